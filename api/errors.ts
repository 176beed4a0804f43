// The contract's error body: { error, message, correlationId }, where `error`
// is the short name of the status code.
import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { DomainError } from '../domain/decider.ts';

export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
    /** Extra fields of the error body, e.g. `retryAfter` on a 429. */
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

export const badRequest = (message: string) => new HttpError(400, message);
export const unauthorized = (message: string) => new HttpError(401, message);
export const forbidden = (message: string) => new HttpError(403, message);
export const notFound = (message: string) => new HttpError(404, message);
/** The read models are behind what a request must see (a write, or a read of one). */
export const catchingUp = () => new HttpError(503, 'The service is catching up; try again shortly');

const domainStatus = { bad_request: 400, forbidden: 403, not_found: 404, conflict: 409 } as const;

export function errorBody(
  statusCode: number,
  message: string,
  correlationId: string,
  extra: Record<string, unknown> = {},
) {
  return { error: STATUS_CODES[statusCode] ?? 'Error', message, ...extra, correlationId };
}

export function sendError(
  reply: FastifyReply,
  statusCode: number,
  message: string,
  extra: Record<string, unknown> = {},
) {
  return reply.code(statusCode).send(errorBody(statusCode, message, String(reply.request.id), extra));
}

interface SchemaError {
  keyword: string;
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
  parentSchema?: { errorMessage?: string };
}

/**
 * Turns a schema validation failure into one clear sentence. A schema can
 * carry the contract's own wording in `errorMessage`.
 */
export function validationMessage(errors: readonly SchemaError[], context: string | undefined): string {
  const first = errors[0];
  if (!first) return 'Invalid request';
  if (first.parentSchema?.errorMessage) return first.parentSchema.errorMessage;
  const where = first.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (first.keyword === 'required') return `${String(first.params.missingProperty)} is required`;
  if (first.keyword === 'additionalProperties') {
    return `Unknown field ${[where, String(first.params.additionalProperty)].filter(Boolean).join('.')}`;
  }
  const subject = where || (context === 'body' ? 'Request body' : (context ?? 'value'));
  return `${subject} ${first.message ?? 'is invalid'}`;
}

export function handleError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  if (error instanceof HttpError) return sendError(reply, error.statusCode, error.message, error.extra);
  if (error instanceof DomainError) return sendError(reply, domainStatus[error.kind], error.message);
  const fastifyError = error as FastifyError & { validation?: SchemaError[]; validationContext?: string };
  if (fastifyError.validation) {
    return sendError(reply, 400, validationMessage(fastifyError.validation, fastifyError.validationContext));
  }
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return sendError(reply, 413, 'Request body is too large');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return sendError(reply, 415, 'Content-Type must be application/json');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return sendError(reply, 400, 'Request body is not valid JSON');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return sendError(reply, 400, 'Request body must not be empty with Content-Type application/json');
  }
  if (fastifyError.statusCode && fastifyError.statusCode >= 400 && fastifyError.statusCode < 500) {
    return sendError(reply, fastifyError.statusCode, error.message);
  }
  request.log.error({ err: error }, 'unexpected error');
  return sendError(reply, 500, 'An unexpected error occurred; retry with exponential backoff');
}
