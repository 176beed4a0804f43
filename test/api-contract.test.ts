// The published contract and the errors fastify raises before a route runs:
// GET /openapi.json is a document swagger-parser accepts and from which
// openapi-typescript generates a client that type-checks; 414, 431, 415, 406,
// malformed JSON, a body over the limit and a bad URL all answer in the
// contract's envelope with a correlationId.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import SwaggerParser from '@apidevtools/swagger-parser';
import openapiTS, { astToString } from 'openapi-typescript';
import { merchantWithKey } from './support/merchant.ts';
import { root } from './support/process.ts';
import { startTestService, type RunningService } from './support/service.ts';

describe('the published contract and framework errors', () => {
  let svc: RunningService;
  let key: string;
  before(async () => {
    svc = await startTestService({ RATE_LIMITS: 'off' });
    key = (await merchantWithKey(svc)).key;
  });
  after(() => svc?.close());

  it('GET /openapi.json is a valid OpenAPI document, with the validation wording as an x- extension', async () => {
    const document = (await svc.call('GET', '/openapi.json')).body;
    assert.doesNotMatch(JSON.stringify(document), /"errorMessage"/);
    assert.match(JSON.stringify(document), /"x-error-message"/);
    await SwaggerParser.validate(structuredClone(document));
  });

  it('generates a typed client that type-checks a call', async () => {
    const document = (await svc.call('GET', '/openapi.json')).body;
    const types = astToString(await openapiTS(document));
    const dir = await mkdtemp(join(tmpdir(), 'openapi-client-'));
    try {
      await writeFile(join(dir, 'api.d.ts'), types);
      await writeFile(
        join(dir, 'call.ts'),
        [
          "import type { paths } from './api';",
          "type Create = paths['/api/v1/payments']['post'];",
          "type Body = NonNullable<Create['requestBody']>['content']['application/json'];",
          "const body: Body = { amount: '25', currency: 'USD', chain: 'ethereum' };",
          "type Created = Create['responses'][201]['content']['application/json'];",
          'export const address = (created: Created): string => created.data.address;',
          'export { body };',
          '',
        ].join('\n'),
      );
      const tsc = join(root, 'node_modules/typescript/bin/tsc');
      await promisify(execFile)(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck', join(dir, 'call.ts')]);
      // And a wrong use does not type-check: the answer's address is a string.
      await writeFile(
        join(dir, 'call.ts'),
        "import type { paths } from './api';\ntype Created = paths['/api/v1/payments']['post']['responses'][201]['content']['application/json'];\nexport const wrong = (created: Created): number => created.data.address;\n",
      );
      await assert.rejects(promisify(execFile)(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck', join(dir, 'call.ts')]));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  const send = async (path: string, init: RequestInit = {}) => {
    const response = await fetch(svc.url + path, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });
    return { status: response.status, header: response.headers.get('x-correlation-id'), body: (await response.json()) as any };
  };
  const enveloped = (answer: { status: number; header: string | null; body: any }, status: number, error: string) => {
    assert.equal(answer.status, status, JSON.stringify(answer.body));
    assert.deepEqual(Object.keys(answer.body).sort(), ['correlationId', 'error', 'message']);
    assert.equal(answer.body.error, error);
    assert.match(answer.body.correlationId, /^[0-9a-f-]{36}$/);
    if (answer.header) assert.equal(answer.header, answer.body.correlationId);
  };
  const json = { 'content-type': 'application/json' };

  it('answers malformed JSON, a body over the limit and another media type in the envelope', async () => {
    enveloped(await send('/api/v1/payments', { method: 'POST', headers: json, body: '{"amount":' }), 400, 'Bad Request');
    enveloped(
      await send('/api/v1/payments', { method: 'POST', headers: json, body: JSON.stringify({ x: 'a'.repeat(70_000) }) }),
      413,
      'Payload Too Large',
    );
    enveloped(
      await send('/api/v1/payments', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'amount=25' }),
      415,
      'Unsupported Media Type',
    );
  });

  it('answers an Accept that excludes JSON with 406, and takes the usual ones', async () => {
    enveloped(await send('/api/v1/invoices', { headers: { accept: 'text/html' } }), 406, 'Not Acceptable');
    for (const accept of ['application/json', '*/*', 'text/html,application/xhtml+xml,*/*;q=0.8']) {
      assert.equal((await send('/api/v1/invoices', { headers: { accept } })).status, 200, accept);
    }
  });

  it('answers an over-long path parameter with 414 and a bad URL with 400', async () => {
    enveloped(await send('/api/v1/invoices/' + 'a'.repeat(500)), 414, 'URI Too Long');
    enveloped(await send('/api/v1/invoices/%zz'), 400, 'Bad Request');
  });

  it('answers a request line too large for the HTTP parser in the envelope too', async () => {
    const { port } = new URL(svc.url);
    const answer = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: '/api/v1/invoices/' + 'a'.repeat(20_000) }, (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      req.on('error', reject);
      req.end();
    });
    enveloped({ ...answer, header: null }, 431, 'Request Header Fields Too Large');
  });
});
