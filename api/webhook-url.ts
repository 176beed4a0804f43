export * from '../adapters/webhooks/target.ts';
