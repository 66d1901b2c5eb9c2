// Redis Cluster key slots (CRC16/XMODEM of the hash tag, mod 16384), and for every slot a short
// hash tag that lands in it. The Redis store uses them for the reservation index in Cluster mode:
// one index shard per slot, named with that slot's tag, so the shard of a handle's slot lives in the
// handle's own slot and the reserve script writes the reservation and its index entry together
// (SPEC §6.5; README.md beside this file, "Indexes and Cluster mode").

export const SLOT_COUNT = 16_384;

const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[byte] = crc;
  }
  return table;
})();

/** CRC16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster slots are made of. */
export function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ (CRC16_TABLE[((crc >> 8) ^ byte) & 0xff] as number);
  return crc;
}

/** The slot Redis Cluster puts a key in: the hash tag (first non-empty `{…}`) if any, else the whole key. */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  return crc16(Buffer.from(key, 'utf8')) % SLOT_COUNT;
}

let tags: string[] | null = null;

/**
 * For every slot, a short tag (`rs:<base36>`) whose CRC16 lands in it: the first such counter value.
 * Computed once, on first use (about 170 000 checksums of 5–7 bytes: a few tens of milliseconds).
 */
export function slotTags(): readonly string[] {
  if (tags) return tags;
  const found = new Array<string | undefined>(SLOT_COUNT);
  let missing = SLOT_COUNT;
  for (let n = 0; missing > 0; n++) {
    const tag = `rs:${n.toString(36)}`;
    const slot = keySlot(tag);
    if (found[slot] === undefined) {
      found[slot] = tag;
      missing--;
    }
  }
  tags = found as string[];
  return tags;
}
