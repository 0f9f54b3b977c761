import t from 'tap'
import { capabilities, checksum, checksumBytes, createHostPool } from '../../native/index.ts'
import { patternBytes } from './helpers.ts'

t.test('CRC-32C known values', async (t) => {
  t.equal(await checksumBytes(Buffer.from('123456789')), 0xe3069283, 'the standard check value')
  t.equal(await checksumBytes(new Uint8Array(0)), 0)
  t.equal(await checksumBytes(new Uint8Array(32)), 0x8a9136aa, 'RFC 3720 B.4: 32 bytes of zeros')
  t.equal(await checksumBytes(new Uint8Array(32).fill(0xff)), 0x62a8ab43, 'RFC 3720 B.4: 32 bytes of ones')
  t.ok(capabilities.crc32c === 'sse4.2' || capabilities.crc32c === 'table')
})

t.test('slices checksummed on several threads combine to the single-thread value', async (t) => {
  const pool = await createHostPool({ sizeBytes: 48 * 2 ** 20 })
  t.teardown(() => pool.close())
  const length = 40 * 2 ** 20 + 12345
  const extent = pool.allocate(length)
  patternBytes(length, 3).copy(pool.view(extent))
  const one = await checksum(pool.range(extent, 0, length), { threads: 1 })
  t.equal(await checksum(pool.range(extent, 0, length), { threads: 2 }), one)
  t.equal(await checksum(pool.range(extent, 0, length), { threads: 5 }), one)
  t.equal(await checksumBytes(pool.view(extent).subarray(0, length)), one)
  await t.rejects(checksum(pool.range(extent, 0, length), { threads: -1 }), { code: 'ERR_ARG_INVALID' })
})

/** Bitwise CRC-32C, the definition itself. */
function referenceCrc32c (bytes: Uint8Array): number {
  let crc = 0xffffffff
  for (const b of bytes) {
    crc ^= b
    for (let k = 0; k < 8; k++) crc = (crc >>> 1) ^ (0x82f63b78 & -(crc & 1))
  }
  return (crc ^ 0xffffffff) >>> 0
}

t.test('the interleaved hardware path equals the definition around its 3 x 8 KiB rounds', async (t) => {
  const bytes = patternBytes(4 * 24576 + 100, 9)
  for (const length of [24575, 24576, 24577, 2 * 24576 + 13, 4 * 24576 + 99]) {
    for (const start of [0, 1, 7]) {
      const part = bytes.subarray(start, start + length)
      t.equal(await checksumBytes(part), referenceCrc32c(part), `${length} bytes from offset ${start}`)
    }
  }
})
