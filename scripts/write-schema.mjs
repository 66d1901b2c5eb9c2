// Run by `npm run build` after tsc: writes config/tollbooth.schema.json from the one config schema
// (src/config/schema.ts), so editors can validate and complete tollbooth.yaml. The input side is
// described (what an operator writes: "20s", "4mb"), not the normalised output.
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { z } from 'zod';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const { configSchema } = await import(pathToFileURL(resolve(root, 'dist/config/schema.js')).href);

const jsonSchema = {
  ...z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' }),
  title: 'Tollbooth Gateway configuration (config/tollbooth.yaml)',
};
const target = resolve(root, 'config/tollbooth.schema.json');
await mkdir(dirname(target), { recursive: true });
await writeFile(target, `${JSON.stringify(jsonSchema, null, 2)}\n`);
console.log(`wrote ${target}`);
