// What dashboardRoutes (routes.ts) lends the page groups registered beside it
// (developer-routes, settings-routes, list-routes): a page's route with its
// session check, the page answers, the actor of a user's commands and re-authentication; and the
// form reading they all share. Here, so that no group imports routes.ts back.
import type { FastifyReply, FastifyRequest, RouteGenericInterface } from 'fastify';
import type { Actor } from '../../commands/handle.ts';
import type { DashboardPermission } from '../../domain/merchant-user.ts';
import type { DashboardSession } from './sessions.ts';

export interface DashboardKit {
  /**
   * A page's (or form's) route options: who is signed in, with the permission
   * the route needs (no session sends a page to sign-in, 401 for a form; a
   * role without the permission gets 403, whatever the page showed; a form
   * without the session's CSRF token, 403); kept out of the API's OpenAPI
   * document; and the handler, given the session. One shape for every page.
   */
  page: <Route extends RouteGenericInterface = RouteGenericInterface>(
    permission: DashboardPermission | undefined,
    handler: (request: FastifyRequest<Route>, reply: FastifyReply, session: DashboardSession) => Promise<unknown>,
  ) => PageRoute<Route>;
  html: (reply: FastifyReply, status: number, body: string) => FastifyReply;
  redirect: (reply: FastifyReply, to: string) => FastifyReply;
  /** After a form's write: to `to` once the read models show it, so that the page asked for next shows the change. */
  redirectWhenSettled: (reply: FastifyReply, position: string | undefined, to: string) => Promise<FastifyReply>;
  actorOf: (session: DashboardSession) => Actor;
  /** Undefined when the password (and code) were given lately or are right in the form, else why not. */
  reauthenticationProblem: (request: FastifyRequest) => Promise<string | undefined>;
}

export interface PageRoute<Route extends RouteGenericInterface> {
  preHandler: (request: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply | undefined>;
  schema: { hide: true };
  handler: (request: FastifyRequest<Route>, reply: FastifyReply) => Promise<unknown>;
}

/** A posted form's fields; a field sent more than once (checkboxes) is a list. */
export type Form = Record<string, string | string[] | undefined>;

export function parseForm(body: string): Form {
  const form: Form = {};
  for (const [key, value] of new URLSearchParams(body)) {
    const before = form[key];
    form[key] = before === undefined ? value : [...[before].flat(), value];
  }
  return form;
}

/** A field given once, as text; '' when it is missing or a list. */
export const field = (form: Form | undefined, name: string) => {
  const value = form?.[name];
  return typeof value === 'string' ? value : '';
};

/** A field's values, however many were sent. */
export const fields = (form: Form | undefined, name: string) => [form?.[name] ?? []].flat();
