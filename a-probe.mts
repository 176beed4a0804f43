const mb = () => Math.round(process.memoryUsage().rss / 1048576);
const heap = () => Math.round(process.memoryUsage().heapUsed / 1048576);
const t = process.argv[2];
const before = mb();
if (t !== 'none') await import(t);
globalThis.gc?.();
console.log(t.padEnd(40), 'rss', before, '→', mb(), 'heap', heap());
