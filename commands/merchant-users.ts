// Commands on merchant users (dashboard.md): invite, accept, change role,
// disable. A user's id follows from their e-mail address, so sign-in finds
// the one stream of an address without a read model, and two invitations of
// one address meet on one stream instead of making two users.
import { createHash } from 'node:crypto';
import { v5 as uuidv5 } from 'uuid';
import type { EventStore } from '../adapters/event-store/port.ts';
import { randomSecret, type SecretSealer } from '../adapters/secrets.ts';
import {
  merchantUserDecider,
  merchantUserStream,
  normaliseEmail,
  type MerchantUser,
  type MerchantUserCommand,
  type UserRole,
} from '../domain/merchant-user.ts';
import { handleWritten, loadState, type Actor, type HandleOptions, type Written } from './handle.ts';
import type { MerchantCommands } from './merchants.ts';

/** UUIDv5 namespace of user ids (of the lower-cased e-mail address). */
const USER_ID_NAMESPACE = 'b8f3c2a1-6d4e-4f5a-9b7c-2e1d0c9b8a76';

export const userIdOf = (email: string) => uuidv5(normaliseEmail(email), USER_ID_NAMESPACE);

/** Invitation tokens are 256 random bits: a plain SHA-256 finds them without making a guess cheaper. */
export const hashInviteToken = (token: string) => createHash('sha256').update(token).digest('hex');

/**
 * `sealer` seals a user's TOTP key before it is recorded and opens it when
 * the user is loaded: the events hold it sealed, the sign-in reads it in clear.
 */
export function merchantUserCommands(
  store: EventStore,
  merchants: MerchantCommands,
  sealer: SecretSealer,
  now = () => new Date(),
) {
  /** The user's state from their stream: the only place their password hash and TOTP secret are read. */
  const load = async (userId: string) => {
    const user = await loadState(store, merchantUserDecider, merchantUserStream(userId));
    return user?.totpSecret ? { ...user, totpSecret: sealer.open(user.totpSecret) } : user;
  };
  /** `command` decided on the user's stream: the user as they stand after it. */
  const decide = (userId: string, command: MerchantUserCommand, options: HandleOptions) =>
    handleWritten(store, merchantUserDecider, merchantUserStream(userId), command, options);
  return {
    load,

    /** Invites `email` as `role`; the token is in the result and nowhere else. */
    async invite(
      merchantId: string,
      request: { email: string; role: UserRole },
      actor: Actor,
      correlationId?: string,
    ): Promise<Written<{ user: MerchantUser; token: string }>> {
      await merchants.existingMerchant(merchantId);
      const token = randomSecret();
      const userId = userIdOf(request.email);
      const { value, position } = await decide(
        userId,
        {
          type: 'InviteUser',
          userId,
          merchantId,
          email: request.email,
          role: request.role,
          inviteTokenHash: hashInviteToken(token),
          now: now().toISOString(),
        },
        { actor, correlationId },
      );
      return { value: { user: value, token }, position };
    },

    async accept(
      userId: string,
      request: { token: string; passwordHash: string; totpSecret: string | null },
      correlationId?: string,
    ): Promise<Written<MerchantUser>> {
      return decide(
        userId,
        {
          type: 'AcceptInvitation',
          inviteTokenHash: hashInviteToken(request.token),
          passwordHash: request.passwordHash,
          totpSecret: request.totpSecret && sealer.seal(request.totpSecret),
          now: now().toISOString(),
        },
        // The invitee is the one who acts: the token proved who they are.
        { actor: { type: 'user', userId, email: (await load(userId))?.email ?? '' }, correlationId },
      );
    },

    async changeRole(userId: string, role: UserRole, actor: Actor, correlationId?: string) {
      return decide(userId, { type: 'ChangeUserRole', role, now: now().toISOString() }, { actor, correlationId });
    },

    async disable(userId: string, actor: Actor, correlationId?: string): Promise<Written<MerchantUser>> {
      return decide(userId, { type: 'DisableUser', now: now().toISOString() }, { actor, correlationId });
    },
  };
}

export type MerchantUserCommands = ReturnType<typeof merchantUserCommands>;
