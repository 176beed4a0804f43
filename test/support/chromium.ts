// Debian's Chromium driven by playwright-core, for the dashboard's browser
// tests; their screenshots go to docs/dashboard/ for docs/dashboard.md.
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import type { Browser, Page } from 'playwright-core';

const CHROMIUM = '/usr/bin/chromium';
const SCREENSHOTS = new URL('../../docs/dashboard/', import.meta.url);

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

/** The whole page, as docs/dashboard/<name>.png. */
export const screenshot = (page: Page, name: string) =>
  page.screenshot({ path: new URL(`${name}.png`, SCREENSHOTS).pathname, fullPage: true });
