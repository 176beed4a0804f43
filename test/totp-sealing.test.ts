// A dashboard user's TOTP key is sealed in their events (AES-256-GCM under a
// key derived from the wallet seed), and read back in clear only to check a
// sign-in code: a copy of the event log does not let anyone make codes.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { secretSealer } from '../adapters/secrets.ts';
import { DepositKeyring } from '../adapters/keys/derivation.ts';
import { merchantUserStream } from '../domain/merchant-user.ts';
import { dashboardClient } from './support/dashboard.ts';
import { merchantWithKey } from './support/merchant.ts';
import { startTestService, type RunningService } from './support/service.ts';

const MNEMONIC = 'abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about';

describe('sealed secrets', () => {
  const sealer = secretSealer(randomBytes(32));

  it('open gives back what seal sealed; each seal is new; a forged or foreign one is refused', () => {
    const secret = 'JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP';
    const one = sealer.seal(secret);
    const two = sealer.seal(secret);
    assert.match(one, /^sealed:v1:[A-Za-z0-9_-]+$/);
    assert.ok(!one.includes(secret));
    assert.notEqual(one, two, 'a new IV each time');
    assert.equal(sealer.open(one), secret);
    assert.equal(sealer.open(two), secret);
    const forged = one.slice(0, -2) + (one.endsWith('A') ? 'BA' : 'AA');
    assert.throws(() => sealer.open(forged));
    assert.throws(() => secretSealer(randomBytes(32)).open(one), 'another key cannot open it');
    // A value cut short (a shorter tag, or no tag at all) is refused, not opened.
    const raw = Buffer.from(one.slice('sealed:v1:'.length), 'base64url');
    assert.throws(() => sealer.open('sealed:v1:' + raw.subarray(0, raw.length - 4).toString('base64url')));
    assert.throws(() => sealer.open('sealed:v1:' + raw.subarray(0, 20).toString('base64url')));
  });

  it('a value recorded before sealing began is read as it is', () => {
    assert.equal(sealer.open('JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP'), 'JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP');
  });

  it('the key follows from the wallet seed: the same seed opens what another process sealed', () => {
    const sealed = secretSealer(DepositKeyring.fromMnemonic(MNEMONIC).totpSealingKey()).seal('KEY');
    assert.equal(secretSealer(DepositKeyring.fromMnemonic(MNEMONIC).totpSealingKey()).open(sealed), 'KEY');
  });
});

describe("a dashboard user's TOTP key in the event log", () => {
  let svc: RunningService;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
  });
  after(() => svc.close());

  it('is recorded sealed, and the user still signs in with a code of it', async () => {
    const { merchant } = await merchantWithKey(svc);
    // dashboardClient accepts the invitation with the key shown on the page, then signs in with a code of
    // it (asserting the 303): the sign-in read the sealed key back.
    const owner = await dashboardClient(svc, merchant.id, 'sealed-owner@example.com', 'owner');
    assert.ok(owner.totpSecret, 'an owner enrols an authenticator');
    const events = await svc.service.store.readStream(merchantUserStream(owner.userId));
    const accepted = events.find((e) => e.type === 'InvitationAccepted')!;
    const recorded = (accepted.data as { totpSecret: string }).totpSecret;
    assert.match(recorded, /^sealed:v1:/);
    assert.ok(!JSON.stringify(events).includes(owner.totpSecret), 'the key is in no event in clear');
    // The same code again is a replay, refused whatever the key's storage.
    assert.equal((await owner.signIn()).status, 401);
  });
});
