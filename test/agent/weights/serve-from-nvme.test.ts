// A data server whose version is on NVMe only (published durably, then the agent restarted with a
// pool smaller than the version and than its largest tensor): pulls read it by chunks through the
// serve window, nothing is promoted, bytes are exact, and concurrent pullers share the reads.
import t, { type Test } from 'tap'
import { join } from 'node:path'
import { diskDir } from '../../native/helpers.ts'
import { keyBytes, MiB, sharedKey, tensor, weightsNode, writeSafetensors, type FixtureTensor } from './weights-fixtures.ts'

const total = (ts: FixtureTensor[]): number => ts.reduce((s, x) => s + x.data.length, 0)

/** A server holding `tensors` as model `m` v1 on NVMe only, with a host pool of `pool` bytes. */
async function nvmeServer (t: Test, key: Uint8Array, tensors: FixtureTensor[], pool: number, serveWindowBytes = 0) {
  const dir = diskDir(t)
  await t.test('publish durably with a pool large enough for the biggest tensor', async st => {
    const publisher = await weightsNode(st, key, {}, dir, 64 * MiB)
    const file = join(dir, 'm.safetensors')
    writeSafetensors(file, tensors)
    await publisher.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: file } })
  })
  const server = await weightsNode(t, key, { serveWindowBytes }, dir, pool)
  t.same([...new Set(server.sm.residency('weights/m/').keys.map(k => k.tier))], ['nvme'], 'after the restart the version is on NVMe only')
  return server
}

t.test('a tensor 4x the server\'s pool is served from NVMe by chunks: whole and sliced pulls byte-exact, nothing promoted', async t => {
  const key = sharedKey()
  const big = tensor('model.embed_tokens.weight', 'bf16', [4096, 2048], 5) // 16 MiB
  const tensors = [big, ...Array.from({ length: 8 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], 10 + i))]
  const a = await nvmeServer(t, key, tensors, 4 * MiB)
  const b = await weightsNode(t, key, {}, undefined, 32 * MiB)
  const whole = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 4 })
  t.equal(whole.bytesReceived, total(tensors))
  t.ok((await keyBytes(b.sm, whole.keys[0]!)).equals(big.data), 'the 16 MiB tensor byte-exact')
  t.ok((await keyBytes(b.sm, whole.keys[5]!)).equals(tensors[5]!.data), 'a 1 MiB tensor byte-exact')
  const counters = a.sm.residency().counters
  t.equal(counters.promoted, 0, 'the server promoted nothing into its 4 MiB pool')
  t.ok(counters.rangeReadBytes >= total(tensors), `the server read the version from NVMe by range (${counters.rangeReadBytes} bytes for ${total(tensors)})`)
  t.ok(a.weights.counters().server.windowBytes <= 2 * MiB, `the serve window holds ${a.weights.counters().server.windowBytes} bytes (default: 32 chunks, here held to half the 4 MiB pool)`)

  // Rank 1 of tp 4 split along dim 1 (row-parallel): each piece gathers from rows spread over the tensor.
  const c = await weightsNode(t, key, {}, undefined, 32 * MiB)
  const sliced = await c.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2, layout: { tp: 4, rank: 1, rules: [{ pattern: 'embed_tokens', dim: 1 }] } })
  const quarter = Buffer.concat(Array.from({ length: 4096 }, (_, r) => big.data.subarray(r * 4096 + 1024, r * 4096 + 2048)))
  t.ok((await keyBytes(c.sm, sliced.keys[0]!)).equals(quarter), 'a dim-1 slice of the 16 MiB tensor byte-exact')
  t.equal(a.sm.residency().counters.promoted, 0, 'still nothing promoted')
})

t.test('four pullers at once: the server reads each chunk from NVMe about once, not four times', async t => {
  const key = sharedKey()
  const tensors = Array.from({ length: 24 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], 40 + i)) // 24 MiB
  const a = await nvmeServer(t, key, tensors, 4 * MiB, 2 * MiB)
  const pullers = await Promise.all(Array.from({ length: 4 }, () => weightsNode(t, key, {}, undefined, 32 * MiB)))
  const results = await Promise.all(pullers.map(p => p.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 2 })))
  for (const [i, r] of results.entries()) t.equal(r.bytesReceived, total(tensors), `puller ${i} received the whole version`)
  t.ok((await keyBytes(pullers[3]!.sm, results[3]!.keys[17]!)).equals(tensors[17]!.data), 'byte-exact')
  const read = a.sm.residency().counters.rangeReadBytes / total(tensors)
  const shared = a.weights.counters().server.sharedReads
  t.ok(shared > 0, `${shared} READs answered by another puller's read`)
  // Without sharing the server reads the version 4 times; pullers started together stay within the 2 MiB window of each other.
  t.ok(read < 2, `the server read ${read.toFixed(2)}x the version from NVMe for 4 pullers (bound 2x)`)
  t.equal(a.sm.residency().counters.promoted, 0, 'nothing promoted')
})

t.test('a serve window configured larger than half the pool is held to half of it', async t => {
  const key = sharedKey()
  const tensors = Array.from({ length: 12 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], 70 + i)) // 12 MiB
  const a = await nvmeServer(t, key, tensors, 4 * MiB, 64 * MiB)
  const b = await weightsNode(t, key, {}, undefined, 32 * MiB)
  let most = 0
  const sample = setInterval(() => { most = Math.max(most, a.weights.counters().server.windowBytes) }, 1)
  await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, streams: 1 })
  clearInterval(sample)
  most = Math.max(most, a.weights.counters().server.windowBytes)
  t.ok(most > 0 && most <= 2 * MiB + 256 * 1024, `the window held at most ${most} bytes (half the 4 MiB pool, plus the chunk in use)`)
})
