// Preloaded (`node --import`) into a service process by a test: every module
// the process imports is appended to the file IMPORT_LOG names, so the test
// can tell which libraries a configuration loads.
import { register } from 'node:module';

register('./import-log-hooks.mjs', import.meta.url);
