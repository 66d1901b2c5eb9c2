// How a handle appears outside the store (SPEC §10): its fingerprint; and text that may hold one
// (a CLI argument echoed in a message, an operator's note) with every handle-like run replaced.
import t from 'tap';
import { fingerprint, redactHandles } from '../../src/observability/fingerprint.js';
import { mintHandle } from '../../src/paywall/handles.js';

t.test('a fingerprint is the first 9 characters, "..", the last 4', async (t) => {
  t.equal(fingerprint('tb_s_KLeV0123456789abcdEPcw'), 'tb_s_KLeV..EPcw');
  t.equal(fingerprint('tb_s_short'), 'tb_s_..', 'too short to show anything of it');
});

t.test('redactHandles replaces every handle in a text by its fingerprint', async (t) => {
  const [a, b] = [mintHandle(), mintHandle()];
  const text = redactHandles(`unknown command "${a}", got ${b}; '--${a}'`);
  t.equal(text, `unknown command "${fingerprint(a)}", got ${fingerprint(b)}; '--${fingerprint(a)}'`);
  t.notOk(text.includes(a.slice(9, -4)) || text.includes(b.slice(9, -4)));
});

t.test('anything that starts like a handle is redacted, whatever its length or case; fingerprints and prose are kept', async (t) => {
  t.equal(redactHandles('tb_s_abcdefghijklmnopqrstuvwxyz0123'), 'tb_s_abcd..0123', 'longer than a handle');
  t.equal(redactHandles('TB_S_ABCDEFGHIJKLMNOPQRSTUV'), 'TB_S_ABCD..STUV', 'upper case');
  t.equal(redactHandles('a tb_s_abcdefghijklmnopqrstuv..wxyz b'), 'a tb_s_abcd..wxyz b', 'a handle dressed as a fingerprint');
  t.equal(redactHandles('no live handle tb_s_KLeV..EPcw'), 'no live handle tb_s_KLeV..EPcw', 'a fingerprint stays');
  t.equal(redactHandles('expected a handle (tb_s_ followed by 22 characters)'), 'expected a handle (tb_s_ followed by 22 characters)');
  t.equal(redactHandles('nothing here'), 'nothing here');
});
