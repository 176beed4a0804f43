// Failpoints: named places where a test can make the process die on the
// spot (SIGKILL, as a power cut would), to prove that every side effect
// survives a crash between its steps. FAILPOINTS=name,name arms them; they
// are never armed in production.
const armed = new Set(
  process.env.APP_ENV === 'production'
    ? []
    : (process.env.FAILPOINTS ?? '')
        .split(',')
        .map((name) => name.trim())
        .filter(Boolean),
);

export function failpoint(name: string): void {
  if (armed.has(name)) process.kill(process.pid, 'SIGKILL');
}
