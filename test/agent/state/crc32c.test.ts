// The inline CRC-32C against the native one: same values for every length and alignment.
import t from 'tap'
import { crc32c, inlineChecksumMaxBytes } from '../../../agent/state/crc32c.ts'
import { capabilities, checksumBytes } from '../../../native/index.ts'
import { patternBytes } from '../../native/helpers.ts'

t.test('the known answer: crc32c("123456789") = 0xe3069283', async t => {
  t.equal(crc32c(Buffer.from('123456789')), 0xe3069283)
  t.equal(crc32c(new Uint8Array(0)), 0)
})

t.test('equals the native checksum for lengths 0..64, around 8-byte steps and up to the inline limit, at odd offsets', { skip: capabilities.addon.loaded ? false : 'needs the native addon' }, async t => {
  const data = patternBytes(inlineChecksumMaxBytes + 64, 9)
  const lengths = [...Array.from({ length: 65 }, (_, i) => i), 1023, 1024, 1025, 4095, 4096, 4097, 8191, inlineChecksumMaxBytes]
  const mismatches: string[] = []
  for (const length of lengths) {
    for (const offset of [0, 1, 3, 7]) {
      const bytes = data.subarray(offset, offset + length)
      if (crc32c(bytes) !== await checksumBytes(bytes)) mismatches.push(`${length}@${offset}`)
    }
  }
  t.same(mismatches, [])
})
