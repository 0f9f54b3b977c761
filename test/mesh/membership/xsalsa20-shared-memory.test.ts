// The private network's cipher (xsalsa20 via @libp2p/pnet) after one cipher grows the shared WebAssembly
// memory: without the fix every other cipher grows it again on each update and the agent crashes within a
// few hundred updates; with it, the memory grows once and every stream still decrypts to its plaintext.
import t from 'tap'
import { randomBytes } from 'node:crypto'
import XSalsa20 from 'xsalsa20'
import '../../../mesh/membership/xsalsa20-shared-memory.ts'

t.test('a chunk larger than the shared memory: the other ciphers keep working and the memory grows once', async t => {
  const nonce = randomBytes(24)
  const key = randomBytes(32)
  // Three streams, each with its sender and receiver cipher (as two pnet peers hold them).
  const pairs = [0, 1, 2].map(() => ({ send: XSalsa20(nonce, key), receive: XSalsa20(nonce, key) }))
  const roundTrip = (i: number, size: number): boolean => {
    const plain = randomBytes(size)
    const wire = pairs[i]!.send.update(plain)
    return Buffer.from(pairs[i]!.receive.update(wire)).equals(plain)
  }
  t.ok(roundTrip(0, 100) && roundTrip(1, 100) && roundTrip(2, 100), 'small chunks before')
  const before = pairs[1]!.send._xor!._memory!.length
  t.ok(roundTrip(0, 4 * before), `a chunk of ${4 * before} bytes, four times the memory, grows it`)
  let ok = true
  for (let k = 0; k < 2000 && ok; k++) ok = roundTrip(1 + (k % 2), 100 + (k % 700)) && roundTrip(0, 50)
  t.ok(ok, '2000 more chunks on every stream decrypt to their plaintext (unfixed: a RangeError after ~500)')
  const after = pairs[1]!.send._xor!._memory!.length
  t.ok(after > before && after <= 8 * before, `the memory grew once, to ${after} bytes (from ${before})`)
})
