/**
 * The layout's rules (issue 28), checked by test/layout.test.ts in `npm test`:
 * imports flow one way, domain → commands → projections/adapters → api, and
 * the pure domain depends on nothing but itself.
 * @type {import('dependency-cruiser').IConfiguration}
 */
module.exports = {
  forbidden: [
    {
      name: 'no-cycles',
      comment: 'An import circle makes neither side readable on its own.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'domain-is-pure',
      comment:
        'domain/ decides from events and commands alone: no I/O, no other layer. Two pure functions are allowed: ' +
        "uuid's v5 (an id named by its content) and node:crypto's hashes (the audit trail's chain).",
      severity: 'error',
      from: { path: '^domain/' },
      to: { pathNot: ['^domain/', '^(uuid|crypto)$'] },
    },
    {
      name: 'nothing-imports-api',
      comment: 'api/ is the outermost layer: only tests and api itself import it.',
      severity: 'error',
      from: { pathNot: '^(api|test)/' },
      to: { path: '^api/' },
    },
    {
      name: 'commands-do-not-read-projections',
      comment: "The write side finds its work in its own tables, never in a projector's.",
      severity: 'error',
      from: { path: '^commands/' },
      to: { path: '^projections/' },
    },
    {
      name: 'adapters-below-commands',
      comment: 'Adapters implement ports; they do not call command handlers or projections.',
      severity: 'error',
      from: { path: '^adapters/' },
      to: { path: '^(commands|projections)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(node_modules|\\.dist[^/]*|dist)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js', '.mjs', '.cjs', '.json'] },
  },
};
