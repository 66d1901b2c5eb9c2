// The outbox's local file side (store/outbox.ts; docs/operations.md "Outbox"): where a record waits while
// the store cannot take it. One file per pending record, named by its reference, so the same record queued
// twice is one file:
//   <outboxDir>/<store id>/<sha256(kind "\n" reference), first 32 hex>.json
//   {"v":1,"kind":"x402_settle","ref":"<reference>","queuedAt":<epoch ms>,"record":{…}}
// The store id (a hash of the store's type, address and key prefix) keeps records of one store from ever
// being written to another. A file is written whole or not at all: to `<name>.tmp-<pid>-<random>`,
// fsync'd, renamed over `<name>.json`, then the directory is fsync'd; stray temp files are removed at load.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, unlink } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { GatewayConfig } from '../config/schema.js';
import type { X402SettlementRecord } from './store.js';

export interface OutboxEntry {
  v: 1;
  kind: 'x402_settle';
  /** What makes the record unique (x402: network, asset, payer, authorization nonce). */
  ref: string;
  queuedAt: number;
  record: X402SettlementRecord;
}

/** The OS state directory's `tollbooth/outbox`: $XDG_STATE_HOME, else ~/.local/state (%LOCALAPPDATA% on Windows). */
export function defaultOutboxDir(env: Record<string, string | undefined> = process.env, platform: NodeJS.Platform = process.platform, home: string = homedir()): string {
  if (platform === 'win32' && env.LOCALAPPDATA) return join(env.LOCALAPPDATA, 'tollbooth', 'outbox');
  return join(env.XDG_STATE_HOME || join(home, '.local', 'state'), 'tollbooth', 'outbox');
}

/** The directory of one store's records: `store.outboxDir` (or the default) + the store's id. */
export function outboxDirFor(store: GatewayConfig['store'], env: Record<string, string | undefined> = process.env): string {
  const target = store.type === 'redis' ? { url: store.redis?.url ?? null, cluster: store.redis?.cluster ?? null, keyPrefix: store.redis?.keyPrefix ?? '' } : { memory: true };
  const id = createHash('sha256').update(JSON.stringify(target)).digest('hex').slice(0, 16);
  return join(store.outboxDir || defaultOutboxDir(env), id);
}

export class OutboxFiles {
  readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
  }

  /** Writes the entry durably; resolves with its file name once it survives a crash. */
  async write(entry: OutboxEntry): Promise<string> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const name = `${createHash('sha256').update(`${entry.kind}\n${entry.ref}`).digest('hex').slice(0, 32)}.json`;
    const temp = join(this.dir, `${name}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
    const file = await open(temp, 'w', 0o600);
    try {
      await file.writeFile(`${JSON.stringify(entry)}\n`);
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(temp, join(this.dir, name));
    await syncDir(this.dir);
    return name;
  }

  /** Every pending entry, oldest first; unreadable files are reported, not dropped (an operator looks). */
  async list(): Promise<{ entries: { name: string; entry: OutboxEntry }[]; unreadable: string[] }> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { entries: [], unreadable: [] };
      throw error;
    }
    const entries: { name: string; entry: OutboxEntry }[] = [];
    const unreadable: string[] = [];
    for (const name of names) {
      if (name.includes('.tmp-')) {
        await unlink(join(this.dir, name)).catch(() => undefined); // a write a crash cut short: never renamed, never acknowledged
        continue;
      }
      if (!name.endsWith('.json')) continue;
      const entry = parseEntry(await readFile(join(this.dir, name), 'utf8').catch(() => ''));
      if (entry) entries.push({ name, entry });
      else unreadable.push(name);
    }
    entries.sort((a, b) => a.entry.queuedAt - b.entry.queuedAt);
    return { entries, unreadable };
  }

  async remove(name: string): Promise<void> {
    await unlink(join(this.dir, name)).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'ENOENT') throw error; // another process on the same directory stored it first
    });
    await syncDir(this.dir);
  }
}

async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } catch {
    // Some file systems refuse fsync on a directory; the rename is still atomic there.
  } finally {
    await handle.close();
  }
}

function parseEntry(text: string): OutboxEntry | null {
  try {
    const value = JSON.parse(text) as Partial<OutboxEntry>;
    if (value.v !== 1 || value.kind !== 'x402_settle' || typeof value.ref !== 'string' || typeof value.queuedAt !== 'number' || typeof value.record !== 'object' || value.record === null) return null;
    return value as OutboxEntry;
  } catch {
    return null;
  }
}
