// A call that may never answer (a node, a name server), given a deadline.

/** `call`, or an error with code ETIMEOUT once `ms` have passed without its answer. */
export function withDeadline<T>(call: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`${what}: no answer in ${ms} ms`), { code: 'ETIMEOUT' })), ms);
  });
  return Promise.race([call, deadline]).finally(() => clearTimeout(timer));
}
