// The bounded-memory sort behind `ledger export`: the same order as an in-memory sort, with runs on
// disk and several merge passes, and nothing left behind in the temporary directory.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { ExternalSorter, type SortItem } from '../../src/ledger/external-sort.js';

function randomItems(count: number, seed: number): SortItem[] {
  let state = seed;
  const next = (): number => (state = (state * 1103515245 + 12345) % 2 ** 31);
  return Array.from({ length: count }, (_, i) => ({ at: 1_700_000_000_000 + (next() % 5_000), account: next() % 50, seq: i, line: JSON.stringify({ i, text: 'tab\there, "quote"' }) }));
}

const byKey = (a: SortItem, b: SortItem): number => a.at - b.at || a.account - b.account || a.seq - b.seq;

async function sortAll(items: SortItem[], options: ConstructorParameters<typeof ExternalSorter>[0]): Promise<{ lines: string[]; runs: number }> {
  const sorter = new ExternalSorter(options);
  try {
    for (const item of items) await sorter.add(item);
    const lines: string[] = [];
    for await (const line of sorter.sorted()) lines.push(line);
    return { lines, runs: sorter.runsWritten };
  } finally {
    await sorter.dispose();
  }
}

t.test('fewer items than a run: sorted in memory, nothing written', async (t) => {
  const items = randomItems(500, 7);
  const { lines, runs } = await sortAll(items, { runSize: 1_000 });
  t.same(lines, [...items].sort(byKey).map((item) => item.line));
  t.equal(runs, 0);
});

t.test('many runs and several merge passes give the same order as an in-memory sort; the temp files go', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tb-sort-test-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const items = randomItems(5_000, 42);
  const { lines, runs } = await sortAll(items, { runSize: 97, fanIn: 4, tmpRoot: root });
  t.same(lines, [...items].sort(byKey).map((item) => item.line), 'same order, lines intact (tabs and quotes in the text)');
  t.ok(runs > 52 + 13, `${runs} runs written (initial runs plus intermediate merges)`);
  t.same(readdirSync(root), [], 'the temporary directory is removed');
});

t.test('items with equal times keep account then seq order', async (t) => {
  const items: SortItem[] = [
    { at: 5, account: 2, seq: 1, line: 'c' },
    { at: 5, account: 1, seq: 2, line: 'b' },
    { at: 5, account: 1, seq: 1, line: 'a' },
    { at: 4, account: 9, seq: 9, line: 'first' },
  ];
  t.same((await sortAll(items, { runSize: 2, fanIn: 2 })).lines, ['first', 'a', 'b', 'c']);
});
