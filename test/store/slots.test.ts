// Redis Cluster slots as Redis computes them (values checked against CLUSTER KEYSLOT on redis 7.0),
// and a hash tag for every slot (the Cluster reservation index shards, src/store/README.md).
import t from 'tap';
import { crc16, keySlot, SLOT_COUNT, slotTags } from '../../src/store/slots.js';

t.test('crc16 is CRC16/XMODEM', async (t) => {
  t.equal(crc16(Buffer.from('123456789')), 0x31c3);
  t.equal(crc16(Buffer.alloc(0)), 0);
});

t.test('keySlot follows the hash-tag rule', async (t) => {
  t.equal(keySlot('foo'), 12182);
  t.equal(keySlot('{user1000}.following'), 3443, 'the tag alone decides');
  t.equal(keySlot('{user1000}.followers'), 3443);
  t.equal(keySlot('a{}b'), 13694, 'an empty tag means the whole key');
  t.equal(keySlot('tollbooth:{h:abc}:res'), keySlot('h:abc'));
  t.equal(keySlot('x{a}{b}'), keySlot('a'), 'the first tag counts');
});

t.test('every slot has a short tag that lands in it', async (t) => {
  const tags = slotTags();
  t.equal(tags.length, SLOT_COUNT);
  t.ok(tags.every((tag, slot) => keySlot(tag) === slot && keySlot(`prefix:{${tag}}`) === slot), 'each tag hashes to its slot');
  t.ok(tags.every((tag) => /^rs:[0-9a-z]{1,5}$/.test(tag)), 'short tags');
  t.equal(slotTags(), tags, 'computed once');
});
