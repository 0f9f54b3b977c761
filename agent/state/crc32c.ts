/**
 * CRC-32C (Castagnoli, the checksum of native/checksum: same values) of
 * small byte ranges on the event loop, slice-by-8 over 8 KiB of tables.
 *
 * Why: the native checksum hops to a native thread, and that hop (promise,
 * async work, wake-up) costs more main-thread time than checksumming a few
 * KiB here; spilling 4 KiB keys by the thousand made those hops the largest
 * cost of a spill (test/bench/state-scale.bench.ts measures both). Larger
 * ranges go native: `inlineChecksumMaxBytes` keeps the event loop's share
 * of one call to about 20 µs.
 */

/** Ranges up to this many bytes are checksummed inline. */
export const inlineChecksumMaxBytes = 16 * 1024

const table = new Int32Array(8 * 256)
for (let n = 0; n < 256; n++) {
  let c = n
  for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0x82f63b78 & -(c & 1))
  table[n] = c
}
for (let n = 0; n < 256; n++) {
  for (let k = 1; k < 8; k++) table[k * 256 + n] = (table[(k - 1) * 256 + n]! >>> 8) ^ table[table[(k - 1) * 256 + n]! & 0xff]!
}

/** CRC-32C of `bytes`, an unsigned 32-bit integer. */
export function crc32c (bytes: Uint8Array): number {
  const t = table
  let crc = -1
  let i = 0
  const whole = bytes.length & ~7
  for (; i < whole; i += 8) {
    const low = (bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24)) ^ crc
    crc = t[1792 + (low & 0xff)]! ^ t[1536 + ((low >>> 8) & 0xff)]! ^ t[1280 + ((low >>> 16) & 0xff)]! ^ t[1024 + (low >>> 24)]! ^
      t[768 + bytes[i + 4]!]! ^ t[512 + bytes[i + 5]!]! ^ t[256 + bytes[i + 6]!]! ^ t[bytes[i + 7]!]!
  }
  for (; i < bytes.length; i++) crc = (crc >>> 8) ^ t[(crc ^ bytes[i]!) & 0xff]!
  return (crc ^ -1) >>> 0
}
