// Merchant users (dashboard.md): invited, accepted once within 7 days, role
// changed, disabled; given events, when a command, then events. And the one
// table of what each role may do.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { permissions as apiKeyPermissions } from '../domain/api-key.ts';
import {
  INVITATION_UNUSABLE,
  merchantUserDecider,
  roleAllows,
  rolePermissions,
  dashboardOnlyPermissions,
  roleNeedsTotp,
  userRoles,
  type MerchantUserEvent,
  type UserRole,
} from '../domain/merchant-user.ts';
import { given } from './support/decider.ts';

const USER_ID = '7c1e2d3f-4a5b-4c6d-8e7f-901234567890';
const MERCHANT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';
const OTHER_MERCHANT = '1a1b2c3d-4e5f-4a6b-8c7d-8e9f00112233';
const day = (n: number, hour = 0) => new Date(Date.UTC(2026, 10, 1 + n, hour)).toISOString();

const invited = (role: UserRole): Extract<MerchantUserEvent, { type: 'UserInvited' }> => ({
  type: 'UserInvited',
  data: {
    userId: USER_ID,
    merchantId: MERCHANT_ID,
    email: 'ann@example.com',
    role,
    inviteTokenHash: 'hash-1',
    inviteExpiresAt: day(7),
    invitedAt: day(0),
  },
});
const accepted = (totpSecret: string | null): MerchantUserEvent => ({
  type: 'InvitationAccepted',
  data: { passwordHash: 'scrypt$...', totpSecret, acceptedAt: day(1) },
});

describe('merchant user: invitation', () => {
  it('is recorded with the address lower-cased and an expiry 7 days on', () => {
    given(merchantUserDecider, [])
      .when({
        type: 'InviteUser',
        userId: USER_ID,
        merchantId: MERCHANT_ID,
        email: ' Ann@Example.COM ',
        role: 'owner',
        inviteTokenHash: 'hash-1',
        now: day(0),
      })
      .then([invited('owner')]);
  });

  it('is accepted once, before it expires, with the token it was sent with', () => {
    const accept = { type: 'AcceptInvitation', passwordHash: 'scrypt$...', totpSecret: 'SECRET', now: day(1) } as const;
    given(merchantUserDecider, [invited('owner')])
      .when({ ...accept, inviteTokenHash: 'hash-1' })
      .then([
        { type: 'InvitationAccepted', data: { passwordHash: 'scrypt$...', totpSecret: 'SECRET', acceptedAt: day(1) } },
      ]);
    given(merchantUserDecider, [invited('owner')])
      .when({ ...accept, inviteTokenHash: 'another' })
      .thenError('not_found', INVITATION_UNUSABLE);
    given(merchantUserDecider, [invited('owner')])
      .when({ ...accept, inviteTokenHash: 'hash-1', now: day(7) })
      .thenError('not_found', INVITATION_UNUSABLE);
    given(merchantUserDecider, [invited('owner'), accepted('SECRET')])
      .when({ ...accept, inviteTokenHash: 'hash-1' })
      .thenError('not_found', INVITATION_UNUSABLE);
  });

  it('needs an authenticator for owner, admin and finance only', () => {
    const accept = {
      type: 'AcceptInvitation',
      inviteTokenHash: 'hash-1',
      passwordHash: 'p',
      totpSecret: null,
      now: day(1),
    } as const;
    given(merchantUserDecider, [invited('finance')])
      .when(accept)
      .thenError('bad_request', 'The finance role needs an authenticator');
    given(merchantUserDecider, [invited('viewer')])
      .when(accept)
      .then([{ type: 'InvitationAccepted', data: { passwordHash: 'p', totpSecret: null, acceptedAt: day(1) } }]);
  });

  it('of an address already in use is refused; one not yet accepted is replaced', () => {
    const invite = {
      type: 'InviteUser',
      userId: USER_ID,
      merchantId: MERCHANT_ID,
      email: 'ann@example.com',
      role: 'viewer',
      inviteTokenHash: 'hash-2',
      now: day(2),
    } as const;
    given(merchantUserDecider, [invited('owner'), accepted('S')])
      .when(invite)
      .thenError('conflict', 'A user with this email already exists');
    given(merchantUserDecider, [invited('owner')])
      .when({ ...invite, merchantId: OTHER_MERCHANT })
      .thenError('conflict', 'A user with this email already exists');
    given(merchantUserDecider, [invited('owner')])
      .when(invite)
      .then([
        {
          type: 'UserInvited',
          data: { ...invited('viewer').data, inviteTokenHash: 'hash-2', invitedAt: day(2), inviteExpiresAt: day(9) },
        },
      ]);
  });
});

describe('merchant user: role and disabling', () => {
  it('changes role, but not to one needing an authenticator the user lacks', () => {
    given(merchantUserDecider, [invited('viewer'), accepted(null)])
      .when({ type: 'ChangeUserRole', role: 'support', now: day(3) })
      .then([{ type: 'UserRoleChanged', data: { role: 'support', changedAt: day(3) } }]);
    given(merchantUserDecider, [invited('viewer'), accepted(null)])
      .when({ type: 'ChangeUserRole', role: 'admin', now: day(3) })
      .thenError('conflict', 'The admin role needs an authenticator, which this user has not enrolled');
    given(merchantUserDecider, [invited('viewer'), accepted(null)])
      .when({ type: 'ChangeUserRole', role: 'viewer', now: day(3) })
      .then([]);
  });

  it('disables once, and a disabled user cannot accept or change role', () => {
    given(merchantUserDecider, [invited('owner'), accepted('S')])
      .when({ type: 'DisableUser', now: day(4) })
      .then([{ type: 'UserDisabled', data: { disabledAt: day(4) } }]);
    const disabled: MerchantUserEvent[] = [invited('owner'), { type: 'UserDisabled', data: { disabledAt: day(1) } }];
    given(merchantUserDecider, disabled)
      .when({ type: 'DisableUser', now: day(4) })
      .then([]);
    given(merchantUserDecider, disabled)
      .when({ type: 'AcceptInvitation', inviteTokenHash: 'hash-1', passwordHash: 'p', totpSecret: 'S', now: day(2) })
      .thenError('not_found', INVITATION_UNUSABLE);
    given(merchantUserDecider, disabled)
      .when({ type: 'ChangeUserRole', role: 'viewer', now: day(2) })
      .thenError('conflict', 'The user is disabled');
    assert.equal(given(merchantUserDecider, disabled).state?.inviteTokenHash, null);
  });
});

describe('roles as permissions', () => {
  it('grant the API keys’ own permission names', () => {
    for (const role of userRoles) {
      for (const permission of rolePermissions[role]) {
        assert.ok(
          (apiKeyPermissions as readonly string[]).includes(permission) ||
            (dashboardOnlyPermissions as readonly string[]).includes(permission),
          `${role}: ${permission}`,
        );
      }
    }
    assert.deepEqual([...rolePermissions.owner].sort(), [...new Set(rolePermissions.owner)].sort());
  });

  it('follow the table of dashboard.md', () => {
    assert.ok(apiKeyPermissions.every((p) => roleAllows('owner', p)));
    assert.ok(roleAllows('owner', 'owners:write'));
    assert.ok(!roleAllows('admin', 'owners:write') && roleAllows('admin', 'users:write'));
    assert.ok(roleAllows('finance', 'refunds:approve') && roleAllows('finance', 'wallets:write'));
    assert.ok(!roleAllows('finance', 'refunds:write') && !roleAllows('finance', 'api_keys:write'));
    // The merchant's name is the owners' and admins'; who did what, theirs and finance's.
    assert.ok(roleAllows('admin', 'merchant:write') && !roleAllows('finance', 'merchant:write'));
    assert.ok(roleAllows('finance', 'activity:read') && !roleAllows('support', 'activity:read'));
    assert.ok(roleAllows('support', 'refunds:write') && roleAllows('support', 'invoices:write'));
    assert.ok(!roleAllows('support', 'refunds:approve') && !roleAllows('support', 'api_keys:write'));
    assert.ok(roleAllows('developer', 'api_keys:write') && roleAllows('developer', 'webhooks:write'));
    assert.ok(!roleAllows('developer', 'settlements:read'));
    assert.deepEqual(
      rolePermissions.viewer.filter((p) => !p.endsWith(':read')),
      [],
      'a viewer reads only',
    );
    assert.deepEqual(
      userRoles.filter((r) => roleNeedsTotp(r)),
      ['owner', 'admin', 'finance'],
    );
  });
});
