// The merchant user aggregate (stream merchantuser-<id>): a person of a
// merchant who signs in to the dashboard (dashboard.md, "People and roles").
// Invited by the operator or an owner, they accept once with a password and,
// for the roles that can move money, a TOTP authenticator; later their role
// may change, or they are disabled. Only hashes of the invite token and the
// password are recorded; the TOTP secret must be kept to check codes.
import { permissions as apiKeyPermissions, type Permission } from './api-key.ts';
import { DomainError, type Decider, type DomainEvent } from './decider.ts';
import { streams } from './streams.ts';

export const userRoles = ['owner', 'admin', 'finance', 'support', 'developer', 'viewer'] as const;
export type UserRole = (typeof userRoles)[number];
export const isUserRole = (value: unknown): value is UserRole => userRoles.includes(value as UserRole);

/**
 * What a dashboard user may do: the API keys' permissions, plus what only
 * people do (API keys, users, settlement wallets), which no API key can.
 */
export const dashboardOnlyPermissions = [
  'api_keys:write',
  'users:write',
  'owners:write',
  'wallets:write',
  'reports:export',
  // The merchant's own settings (its name); settlement wallets are wallets:write.
  'merchant:write',
  // Who did what (the Activity page): for those who answer for the merchant's money and people.
  'activity:read',
] as const;
export type DashboardPermission = Permission | (typeof dashboardOnlyPermissions)[number];
export const dashboardPermissions: readonly DashboardPermission[] = [...apiKeyPermissions, ...dashboardOnlyPermissions];

const reads: DashboardPermission[] = ['invoices:read', 'settlements:read', 'subscriptions:read', 'refunds:read'];

/** The roles of dashboard.md as permissions: the one table every server-side check reads. */
export const rolePermissions: Record<UserRole, readonly DashboardPermission[]> = {
  owner: dashboardPermissions,
  // Everything but removing (or demoting, or making) an owner.
  admin: dashboardPermissions.filter((p) => p !== 'owners:write'),
  finance: [...reads, 'reports:export', 'refunds:approve', 'wallets:write', 'activity:read'],
  // Cancelling an invoice is invoices:write; a refund is created but never approved.
  support: ['invoices:read', 'settlements:read', 'refunds:read', 'refunds:write', 'invoices:write'],
  developer: ['invoices:read', 'api_keys:write', 'webhooks:write'],
  viewer: reads,
};

export const roleAllows = (role: UserRole, permission: DashboardPermission) =>
  rolePermissions[role].includes(permission);

/** The roles that can move money or let others do so sign in with a second factor. */
export const roleNeedsTotp = (role: UserRole) => role === 'owner' || role === 'admin' || role === 'finance';

/** An invitation is good for 7 days, and once. */
export const INVITE_VALID_MS = 7 * 24 * 60 * 60 * 1000;

export type UserStatus = 'invited' | 'active' | 'disabled';

export interface MerchantUser {
  id: string;
  merchantId: string;
  /** Lower-cased: one person, one address, however typed. */
  email: string;
  role: UserRole;
  status: UserStatus;
  /** SHA-256 of the invitation's token; null once used. */
  inviteTokenHash: string | null;
  inviteExpiresAt: string;
  passwordHash: string | null;
  totpSecret: string | null;
  invitedAt: string;
  acceptedAt: string | null;
  disabledAt: string | null;
  updatedAt: string;
}

export type MerchantUserEvent =
  | DomainEvent<
      'UserInvited',
      {
        userId: string;
        merchantId: string;
        email: string;
        role: UserRole;
        inviteTokenHash: string;
        inviteExpiresAt: string;
        invitedAt: string;
      }
    >
  | DomainEvent<'InvitationAccepted', { passwordHash: string; totpSecret: string | null; acceptedAt: string }>
  | DomainEvent<'UserRoleChanged', { role: UserRole; changedAt: string }>
  | DomainEvent<'UserDisabled', { disabledAt: string }>;

export type MerchantUserCommand =
  | {
      type: 'InviteUser';
      userId: string;
      merchantId: string;
      email: string;
      role: UserRole;
      inviteTokenHash: string;
      now: string;
    }
  | { type: 'AcceptInvitation'; inviteTokenHash: string; passwordHash: string; totpSecret: string | null; now: string }
  | { type: 'ChangeUserRole'; role: UserRole; now: string }
  | { type: 'DisableUser'; now: string };

export type MerchantUserState = MerchantUser | null;

/** The same words for an unknown, used or expired invitation: a token guesser learns nothing. */
export const INVITATION_UNUSABLE = 'This invitation is not valid any more; ask for a new one';

export const normaliseEmail = (email: string) => email.trim().toLowerCase();

export const merchantUserDecider: Decider<MerchantUserCommand, MerchantUserState, MerchantUserEvent> = {
  initialState: null,

  decide(command, state) {
    if (command.type === 'InviteUser') {
      // Sign-in is by e-mail alone, so an address belongs to one user of one merchant.
      if (state && (state.status !== 'invited' || state.merchantId !== command.merchantId)) {
        throw new DomainError('conflict', 'A user with this email already exists');
      }
      // Inviting again an address not yet accepted replaces the invitation (a lost link, another role).
      return [
        {
          type: 'UserInvited',
          data: {
            userId: command.userId,
            merchantId: command.merchantId,
            email: normaliseEmail(command.email),
            role: command.role,
            inviteTokenHash: command.inviteTokenHash,
            inviteExpiresAt: new Date(Date.parse(command.now) + INVITE_VALID_MS).toISOString(),
            invitedAt: command.now,
          },
        },
      ];
    }
    if (!state) throw new DomainError('not_found', 'User not found');
    switch (command.type) {
      case 'AcceptInvitation': {
        const usable =
          state.status === 'invited' &&
          state.inviteTokenHash === command.inviteTokenHash &&
          Date.parse(command.now) < Date.parse(state.inviteExpiresAt);
        if (!usable) throw new DomainError('not_found', INVITATION_UNUSABLE);
        if (roleNeedsTotp(state.role) && !command.totpSecret) {
          throw new DomainError('bad_request', `The ${state.role} role needs an authenticator`);
        }
        return [
          {
            type: 'InvitationAccepted',
            data: {
              passwordHash: command.passwordHash,
              totpSecret: command.totpSecret,
              acceptedAt: command.now,
            },
          },
        ];
      }
      case 'ChangeUserRole':
        if (state.status === 'disabled') throw new DomainError('conflict', 'The user is disabled');
        if (state.role === command.role) return [];
        if (state.status === 'active' && roleNeedsTotp(command.role) && !state.totpSecret) {
          throw new DomainError(
            'conflict',
            `The ${command.role} role needs an authenticator, which this user has not enrolled`,
          );
        }
        return [{ type: 'UserRoleChanged', data: { role: command.role, changedAt: command.now } }];
      case 'DisableUser':
        if (state.status === 'disabled') return []; // disabling twice changes nothing
        return [{ type: 'UserDisabled', data: { disabledAt: command.now } }];
    }
  },

  evolve(state, event) {
    switch (event.type) {
      case 'UserInvited': {
        const { userId, invitedAt, ...rest } = event.data;
        return {
          id: userId,
          ...rest,
          status: 'invited',
          passwordHash: null,
          totpSecret: null,
          invitedAt,
          acceptedAt: null,
          disabledAt: null,
          updatedAt: invitedAt,
        };
      }
      case 'InvitationAccepted':
        return (
          state && {
            ...state,
            status: 'active',
            inviteTokenHash: null,
            passwordHash: event.data.passwordHash,
            totpSecret: event.data.totpSecret,
            acceptedAt: event.data.acceptedAt,
            updatedAt: event.data.acceptedAt,
          }
        );
      case 'UserRoleChanged':
        return state && { ...state, role: event.data.role, updatedAt: event.data.changedAt };
      case 'UserDisabled':
        return (
          state && {
            ...state,
            status: 'disabled',
            inviteTokenHash: null,
            disabledAt: event.data.disabledAt,
            updatedAt: event.data.disabledAt,
          }
        );
    }
  },
};

export const merchantUserStream = streams.merchantUser.name;
