// Starts the real service in this process on a free port, over real HTTP.
import { loadConfig } from '../../api/config.ts';
import { loadSecrets } from '../../api/secrets-file.ts';
import { startService, type Service } from '../../api/service.ts';

export interface RunningService {
  url: string;
  adminToken: string;
  service: Service;
  /** fetch against the service, JSON in and out. */
  call(
    method: string,
    path: string,
    options?: { body?: unknown; token?: string; headers?: Record<string, string> },
  ): Promise<{
    status: number;
    headers: Headers;
    body: any;
  }>;
  close(): Promise<void>;
}

export async function startTestService(env: Record<string, string> = {}): Promise<RunningService> {
  const config = loadConfig({ DATA_DIR: 'memory://', APP_ENV: 'test', PORT: '0', ...env });
  const secrets = await loadSecrets(config);
  const service = await startService(config, secrets, false);
  const address = await service.app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url: address,
    adminToken: secrets.adminToken,
    service,
    async call(method, path, { body, token, headers = {} } = {}) {
      const response = await fetch(address + path, {
        method,
        headers: {
          ...(body !== undefined && { 'content-type': 'application/json' }),
          ...(token && { authorization: `Bearer ${token}` }),
          ...headers,
        },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      });
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON: keep the text
      }
      return { status: response.status, headers: response.headers, body: parsed };
    },
    close: () => service.close(),
  };
}
