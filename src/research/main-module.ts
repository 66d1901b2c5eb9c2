// "Am I the script node was asked to run?" for the two entrypoints, which are also imported by tests.

import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

export function isEntrypoint(moduleUrl: string): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return moduleUrl === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}
