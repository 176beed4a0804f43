// Debian's Chromium through playwright-core for the dashboard's browser
// tests, and their screenshots into docs/dashboard/ (docs/dashboard.md).
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import type { Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
/** The `skip` of a suite that needs Chromium. */
export const withoutChromium = existsSync(CHROMIUM) ? false : `${CHROMIUM} does not exist`;
const SCREENSHOTS = new URL('../../docs/dashboard/', import.meta.url);

export async function launchChromium() {
  await mkdir(SCREENSHOTS, { recursive: true });
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run', '--disable-sync'],
  });
}

/** The whole page as docs/dashboard/<name>.png. */
export const screenshot = (page: Page, name: string) =>
  page.screenshot({ path: new URL(`${name}.png`, SCREENSHOTS).pathname, fullPage: true });
