// In development the admin token and the wallet seed are generated on first
// start and kept in DATA_DIR, so a restart keeps them (operations.md §1).
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generateMnemonic } from '@scure/bip39';
import { wordlist } from '@scure/bip39/wordlists/english.js';
import { randomSecret } from '../adapters/secrets.ts';
import type { Config } from './config.ts';

export interface ServiceSecrets {
  adminToken: string;
  walletMnemonic: string;
  /** Which ones were made now rather than given or kept. */
  generated: { adminToken: boolean; walletMnemonic: boolean };
}

const FILE = 'secrets.json';

export async function loadSecrets(config: Config): Promise<ServiceSecrets> {
  const inMemory = config.dataDir === 'memory://';
  const path = join(config.dataDir, FILE);
  const kept: Partial<Pick<ServiceSecrets, 'adminToken' | 'walletMnemonic'>> =
    !inMemory && existsSync(path) ? JSON.parse(await readFile(path, 'utf8')) : {};
  const adminToken = config.adminToken ?? kept.adminToken;
  const walletMnemonic = config.walletMnemonic ?? kept.walletMnemonic;
  const secrets: ServiceSecrets = {
    adminToken: adminToken ?? randomSecret('adm_'),
    walletMnemonic: walletMnemonic ?? generateMnemonic(wordlist, 256),
    generated: { adminToken: !adminToken, walletMnemonic: !walletMnemonic },
  };
  if (!inMemory && (secrets.generated.adminToken || secrets.generated.walletMnemonic)) {
    await mkdir(config.dataDir, { recursive: true });
    const toKeep = {
      ...kept,
      ...(secrets.generated.adminToken && { adminToken: secrets.adminToken }),
      ...(secrets.generated.walletMnemonic && { walletMnemonic: secrets.walletMnemonic }),
    };
    await writeFile(path, JSON.stringify(toKeep, null, 2), { mode: 0o600 });
    await chmod(path, 0o600);
  }
  return secrets;
}

/** The admin token for the CLI: ADMIN_TOKEN, or the one kept in DATA_DIR. */
export async function readKeptAdminToken(dataDir: string): Promise<string | undefined> {
  if (process.env.ADMIN_TOKEN) return process.env.ADMIN_TOKEN;
  const path = join(dataDir, FILE);
  if (!existsSync(path)) return undefined;
  return (JSON.parse(await readFile(path, 'utf8')) as { adminToken?: string }).adminToken;
}
