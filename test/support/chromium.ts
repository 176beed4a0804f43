// Debian's Chromium driven by playwright-core, for the dashboard's browser
// tests. Their screenshots go to test/artifacts/dashboard/ (ignored by git),
// so a test run leaves the checkout clean; with UPDATE_SCREENSHOTS=1 they
// replace the ones docs/dashboard.md shows, in docs/dashboard/.
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import type { Browser, Page } from 'playwright-core';

const CHROMIUM = '/usr/bin/chromium';
const SCREENSHOTS = new URL(
  process.env.UPDATE_SCREENSHOTS === '1' ? '../../docs/dashboard/' : '../artifacts/dashboard/',
  import.meta.url,
);

/** The `skip` of a suite that needs Chromium: false, or why it is skipped. */
export const withoutChromium = existsSync(CHROMIUM) ? false : `${CHROMIUM} does not exist`;

export async function launchChromium(): Promise<Browser> {
  await mkdir(SCREENSHOTS, { recursive: true });
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', '--disable-sync'],
  });
}

/** The whole page, as <name>.png in the screenshots folder. */
export const screenshot = (page: Page, name: string) =>
  page.screenshot({ path: new URL(`${name}.png`, SCREENSHOTS).pathname, fullPage: true });
