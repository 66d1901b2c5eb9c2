// A bounded-memory sort for `ledger export` (SPEC §17: every entry in time order, constant memory in
// the number of handles). Each ledger is read in its own order; entries are gathered into runs of
// at most `runSize`, each run sorted and written to a temporary file, and the runs are merged
// (k-way, at most `fanIn` files open at once, in several passes when there are more). Memory is one
// run plus one buffered line per open run, whatever the number of entries or handles; disk is one
// copy of the export. With fewer than `runSize` entries nothing touches the disk.
// src/store/README.md ("Ledger") has the measurements and why not an index.
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { createInterface } from 'node:readline';

/** One item: its sort key (time, then the account's ordinal, then seq) and its text (no newline, no tab before it matters). */
export interface SortItem {
  at: number;
  account: number;
  seq: number;
  line: string;
}

export interface SortOptions {
  /** Items held in memory before a run is written. */
  runSize?: number;
  /** Runs merged at once. */
  fanIn?: number;
  /** Where the temporary directory goes (default os.tmpdir()). */
  tmpRoot?: string;
}

export const DEFAULT_RUN_SIZE = 5_000;
export const DEFAULT_FAN_IN = 64;

const compare = (a: SortItem, b: SortItem): number => a.at - b.at || a.account - b.account || a.seq - b.seq;

export class ExternalSorter {
  readonly #runSize: number;
  readonly #fanIn: number;
  readonly #tmpRoot: string;
  #buffer: SortItem[] = [];
  #runs: string[] = [];
  #dir: string | null = null;
  #nextRun = 0;

  constructor(options: SortOptions = {}) {
    this.#runSize = Math.max(1, options.runSize ?? DEFAULT_RUN_SIZE);
    this.#fanIn = Math.max(2, options.fanIn ?? DEFAULT_FAN_IN);
    this.#tmpRoot = options.tmpRoot ?? tmpdir();
  }

  /** How many runs went to disk so far (for measurements). */
  get runsWritten(): number {
    return this.#nextRun;
  }

  async add(item: SortItem): Promise<void> {
    this.#buffer.push(item);
    if (this.#buffer.length >= this.#runSize) await this.#spill();
  }

  /** Every item added, in order; call once, after the last add. */
  async *sorted(): AsyncIterable<string> {
    if (this.#runs.length === 0) {
      const items = this.#buffer.sort(compare);
      this.#buffer = [];
      for (const item of items) yield item.line;
      return;
    }
    if (this.#buffer.length > 0) await this.#spill();
    while (this.#runs.length > this.#fanIn) {
      const group = this.#runs.splice(0, this.#fanIn);
      const merged = await this.#newRunPath();
      await writeLines(merged, mapItems(mergeRuns(group), encode));
      await Promise.all(group.map((path) => rm(path, { force: true })));
      this.#runs.push(merged);
    }
    for await (const item of mergeRuns(this.#runs)) yield item.line;
  }

  /** Removes the temporary files (always call it, in a finally). */
  async dispose(): Promise<void> {
    this.#buffer = [];
    if (this.#dir) await rm(this.#dir, { recursive: true, force: true });
    this.#dir = null;
    this.#runs = [];
  }

  async #spill(): Promise<void> {
    const items = this.#buffer.sort(compare);
    this.#buffer = [];
    const path = await this.#newRunPath();
    await writeLines(path, items.map(encode));
    this.#runs.push(path);
  }

  async #newRunPath(): Promise<string> {
    this.#dir ??= await mkdtemp(join(this.#tmpRoot, 'tollbooth-ledger-'));
    return join(this.#dir, `run-${this.#nextRun++}`);
  }
}

const encode = (item: SortItem): string => `${item.at}\t${item.account}\t${item.seq}\t${item.line}`;

function decode(text: string): SortItem {
  const first = text.indexOf('\t');
  const second = text.indexOf('\t', first + 1);
  const third = text.indexOf('\t', second + 1);
  return { at: Number(text.slice(0, first)), account: Number(text.slice(first + 1, second)), seq: Number(text.slice(second + 1, third)), line: text.slice(third + 1) };
}

async function* mapItems<T>(items: AsyncIterable<SortItem>, map: (item: SortItem) => T): AsyncIterable<T> {
  for await (const item of items) yield map(item);
}

/** Writes lines to a new file, waiting on the stream when its buffer is full. */
async function writeLines(path: string, lines: Iterable<string> | AsyncIterable<string>): Promise<void> {
  const stream = createWriteStream(path, { encoding: 'utf8' });
  try {
    for await (const line of lines) if (!stream.write(`${line}\n`)) await once(stream, 'drain');
  } finally {
    stream.end();
    await once(stream, 'close');
  }
}

/** k-way merge of sorted run files with a binary heap of their current heads. */
async function* mergeRuns(paths: string[]): AsyncIterable<SortItem> {
  const readers = paths.map((path) => createInterface({ input: createReadStream(path, { encoding: 'utf8', highWaterMark: 64 * 1024 }), crlfDelay: Infinity })[Symbol.asyncIterator]());
  const heap: { item: SortItem; reader: number }[] = [];
  const push = (entry: { item: SortItem; reader: number }): void => {
    heap.push(entry);
    for (let i = heap.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (compare((heap[parent] as typeof entry).item, entry.item) <= 0) break;
      [heap[i], heap[parent]] = [heap[parent] as typeof entry, entry];
      i = parent;
    }
  };
  const pop = (): { item: SortItem; reader: number } => {
    const top = heap[0] as { item: SortItem; reader: number };
    const last = heap.pop() as typeof top;
    if (heap.length > 0) {
      heap[0] = last;
      for (let i = 0; ; ) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < heap.length && compare((heap[left] as typeof top).item, (heap[smallest] as typeof top).item) < 0) smallest = left;
        if (right < heap.length && compare((heap[right] as typeof top).item, (heap[smallest] as typeof top).item) < 0) smallest = right;
        if (smallest === i) break;
        [heap[i], heap[smallest]] = [heap[smallest] as typeof top, heap[i] as typeof top];
        i = smallest;
      }
    }
    return top;
  };
  try {
    for (const [reader, lines] of readers.entries()) {
      const next = await lines.next();
      if (!next.done) push({ item: decode(next.value), reader });
    }
    while (heap.length > 0) {
      const { item, reader } = pop();
      yield item;
      const next = await (readers[reader] as AsyncIterator<string>).next();
      if (!next.done) push({ item: decode(next.value), reader });
    }
  } finally {
    await Promise.all(readers.flatMap((lines) => (lines.return ? [lines.return()] : [])));
  }
}
