/**
 * Re-serving sliced pulls (PROTOCOL.md "Partial holders"): an agent that
 * pulled one rank's slices serves exactly those, byte-identical to what the
 * full holder sends, checksums checked end to end; anything else is refused
 * clearly; a partial holder dropping the version mid-pull fails the pull, or
 * hands it to a full holder without refetching what landed.
 */
import { join } from 'node:path'
import t from 'tap'
import { viewHostRange } from '../../../native/index.ts'
import { createDataAuth } from '../../../agent/weights/data-auth.ts'
import { planReshard, type TargetLayout } from '../../../agent/weights/reshard.ts'
import { createTcpConnector } from '../../../agent/weights/tcp-client.ts'
import { keyBytes, MiB, sharedKey, tcpProxy, tensor, weightsNode, writeSafetensors, type FixtureTensor, type NodeFixture } from './weights-fixtures.ts'

const tensors: FixtureTensor[] = [
  tensor('a.weight', 'f32', [512, 1024], 1), // column parallel (dim 0): 1 MiB per rank
  tensor('b.weight', 'bf16', [1024, 700], 2), // row parallel (dim 1): strided gather on the full holder
  tensor('gate_up.weight', 'bf16', [512, 256], 3), // fused, two parts along dim 0: a two-range slice
  tensor('norm.weight', 'f32', [1024], 4), // replicated
]
const rules: TargetLayout['rules'] = [
  { pattern: '^a\\.', dim: 0 },
  { pattern: '^b\\.', dim: 1 },
  { pattern: '^gate_up\\.', dim: 0, parts: 2 },
]
const layout = (rank: number): { tp: number, rank: number, rules: TargetLayout['rules'] } => ({ tp: 2, rank, rules })
const rankBytes = planReshard(tensors.map(x => ({ name: x.name, shape: x.shape, elementBytes: x.data.length / x.shape.reduce((p, q) => p * q, 1) })), layout(0)).reduce((a, s) => a + s.bytes, 0)

async function published (t: Parameters<typeof weightsNode>[0], key: Uint8Array): Promise<NodeFixture> {
  const a = await weightsNode(t, key)
  const file = join(a.dir, 'm.safetensors')
  writeSafetensors(file, tensors)
  await a.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: file } })
  return a
}

/** A published version on A and B a partial holder of its tp 2 rank 0 slices (pulled from A); the pull's result is `held`. */
async function partialHolder (t: Parameters<typeof weightsNode>[0]) {
  const key = sharedKey()
  const a = await published(t, key)
  const b = await weightsNode(t, key)
  const held = await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout: layout(0), streams: 1 })
  return { key, a, b, held }
}

t.test('C pulls tp 2 rank 0 from B, which pulled it from A: the same keys and bytes as a pull from A; other slices are refused', async t => {
  const key = sharedKey()
  const a = await published(t, key)
  const b = await weightsNode(t, key)
  const c = await weightsNode(t, key)
  const d = await weightsNode(t, key)
  await b.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout: layout(0), streams: 2 })
  const held = b.weights.list().versions
  t.match(held, [{ model: 'm', version: 1, partial: { tp: 2, rank: 0, layout: /^tp2-r0-[0-9a-f]{16}$/ } }], 'B lists its partial holding')
  t.match(b.weights.advert().weights, [{ model: 'm', version: 1, layout: held[0]!.partial!.layout }], 'and advertises its layout in the mesh record')

  const fromB = await c.weights.pull({ from: b.weights.address(), model: 'm', version: -1, layout: layout(0), streams: 2 })
  const fromA = await d.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout: layout(0), streams: 2 })
  t.equal(fromB.version, 1, 'latest on a partial holder is the version it holds')
  t.same(fromB.keys, fromA.keys, 'the same slice keys')
  t.equal(fromB.bytes, rankBytes)
  t.equal(fromB.bytesReceived, rankBytes, 'exactly the rank\'s bytes over the wire')
  t.equal(fromB.refetchedPieces, 0)
  for (let i = 0; i < fromA.keys.length; i++) t.ok((await keyBytes(c.sm, fromB.keys[i]!)).equals(await keyBytes(d.sm, fromA.keys[i]!)), `${fromA.keys[i]} byte-identical to the full holder's`)
  t.match(c.weights.list().versions, [{ version: 1, partial: { layout: held[0]!.partial!.layout } }], 'C serves the slices in turn')
  const manifest = c.weights.manifest('m', 1)
  t.same(manifest.partial!.slices.map(s => s.chunkChecksums), b.weights.manifest('m', 1).partial!.slices.map(s => s.chunkChecksums), 'the checksums C verified against are B\'s, recorded from bytes checked against A\'s')

  const e = await weightsNode(t, key)
  await t.rejects(e.weights.pull({ from: b.weights.address(), model: 'm', version: 1, layout: layout(1), streams: 1 }),
    { code: 'ERR_WEIGHTS_NOT_FOUND', message: /holds only the tp 2 rank 0 slices \(layout tp2-r0-[0-9a-f]+\) of m v1; this pull asks for tp 2 rank 1/ }, 'another rank')
  await t.rejects(e.weights.pull({ from: b.weights.address(), model: 'm', version: 1, layout: { tp: 2, rank: 0, rules: [{ pattern: '^a\\.', dim: 1 }] }, streams: 1 }),
    { code: 'ERR_WEIGHTS_NOT_FOUND', message: /this pull asks for tp 2 rank 0 \(layout tp2-r0-/ }, 'the same rank of another layout')
  await t.rejects(e.weights.pull({ from: b.weights.address(), model: 'm', version: 1, streams: 1 }),
    { code: 'ERR_WEIGHTS_NOT_FOUND', message: /not the whole version; pull it from a full holder/ }, 'the whole version')
  t.same(e.sm.storedKeys('weights/'), [], 'nothing stored by the refused pulls')

  // A READ of a slice B does not hold, sent without the puller's manifest check, is refused by B's server.
  const stream = await createTcpConnector(createDataAuth(key)).open(b.weights.address())
  t.teardown(() => stream.close())
  const rank1 = planReshard(manifest.tensors.map(x => ({ name: x.name, shape: x.shape, elementBytes: x.bytes / x.shape.reduce((p, q) => p * q, 1) })), layout(1))[0]!
  await t.rejects(stream.read({ model: 'm', version: 1, tensorIndex: 0, dim: rank1.dim, ranges: rank1.ranges, byteOffset: 0, byteLength: 4096 }, Buffer.alloc(4096)),
    { code: 'ERR_WEIGHTS_NOT_FOUND', message: /holds only the tp 2 rank 0 slices .* not the slice of a\.weight asked for/ })
})

t.test('B retires the version while C pulls from it: C fails clearly, or with A as fallback resumes there without refetching', async t => {
  const { key, a, b } = await partialHolder(t)
  const direct = await weightsNode(t, key)
  const expected = await direct.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout: layout(0), streams: 1 })

  // The first connection to B is cut after 512 KiB and B retires the version; the reconnect finds it retired.
  const retiringProxy = async (): Promise<{ address: string, retired: () => Promise<unknown> | undefined }> => {
    let retiring: Promise<unknown> | undefined
    const proxy = await tcpProxy(t, b.weights.address(), (chunk, seen, connection) => {
      if (connection === 0 && seen + chunk.length > MiB / 2) { retiring ??= b.weights.retire('m', 1); return 'cut' }
      return chunk
    }, connection => connection > 0 ? retiring : undefined)
    return { address: proxy.address, retired: () => retiring }
  }
  const c = await weightsNode(t, key)
  const failing = await retiringProxy()
  await t.rejects(c.weights.pull({ from: failing.address, model: 'm', version: 1, layout: layout(0), streams: 1 }), { code: 'ERR_WEIGHTS_RETIRED', message: /version 1 of m was retired/ })
  t.ok(failing.retired(), 'B retired the version mid-pull')
  t.same(c.sm.storedKeys('weights/'), [], 'the failed pull stored nothing')

  // Again, with A as the fallback.
  t.same(b.weights.list().versions, [], 'B no longer serves v1')
  t.same(b.sm.storedKeys('weights/'), [], 'and dropped its slices')
  const file = join(a.dir, 'm2.safetensors')
  writeSafetensors(file, tensors)
  await a.weights.publish({ model: 'm', version: 2, source: { kind: 'safetensors', path: file } })
  await b.weights.pull({ from: a.weights.address(), model: 'm', version: 2, layout: layout(0), streams: 1 })
  let retiring: Promise<unknown> | undefined
  const proxy = await tcpProxy(t, b.weights.address(), (chunk, seen, connection) => {
    if (connection === 0 && seen + chunk.length > MiB / 2) { retiring ??= b.weights.retire('m', 2); return 'cut' }
    return chunk
  }, connection => connection > 0 ? retiring : undefined)
  const r = await c.weights.pull({ from: proxy.address, fallbacks: [a.weights.address()], model: 'm', version: 2, layout: layout(0), streams: 1 })
  t.ok(retiring, 'B retired v2 mid-pull')
  t.ok(proxy.forwarded() > MiB / 4, `B served ${proxy.forwarded()} bytes before it dropped the version`)
  t.same(r.switchedTo, [a.weights.address()], 'the pull resumed from A')
  t.ok(r.bytesReceived < rankBytes + MiB / 2, `received ${r.bytesReceived} for ${rankBytes}: what landed from B was not fetched again`)
  for (let i = 0; i < r.keys.length; i++) {
    t.ok((await keyBytes(c.sm, r.keys[i]!)).equals(await keyBytes(direct.sm, expected.keys[i]!)), `${r.keys[i]} byte-identical to a pull from A (v2 republishes v1's bytes)`)
  }
})

t.test('B goes away while C pulls from it: with A as fallback the pull resumes there once B stays unreachable', async t => {
  const { key, a, b } = await partialHolder(t)
  const c = await weightsNode(t, key)
  let closing: Promise<void> | undefined
  const proxy = await tcpProxy(t, b.weights.address(), (chunk, seen) => {
    if (seen + chunk.length > MiB / 2) { closing ??= proxy.close(); return 'cut' }
    return chunk
  })
  const r = await c.weights.pull({ from: proxy.address, fallbacks: [a.weights.address()], model: 'm', version: 1, layout: layout(0), streams: 2 })
  t.ok(closing, 'B became unreachable mid-pull')
  t.same(r.switchedTo, [a.weights.address()])
  t.ok(r.bytesReceived < rankBytes + MiB / 2, `received ${r.bytesReceived} for ${rankBytes}`)
  const direct = await weightsNode(t, key)
  const expected = await direct.weights.pull({ from: a.weights.address(), model: 'm', version: 1, layout: layout(0), streams: 1 })
  for (let i = 0; i < r.keys.length; i++) t.ok((await keyBytes(c.sm, r.keys[i]!)).equals(await keyBytes(direct.sm, expected.keys[i]!)), `${r.keys[i]} byte-identical`)
})

t.test('the chosen holder no longer has the version when the pull starts: the manifest comes from the fallback', async t => {
  const { key, a, b } = await partialHolder(t)
  await b.weights.retire('m', 1)
  const c = await weightsNode(t, key)
  const r = await c.weights.pull({ from: b.weights.address(), fallbacks: [a.weights.address()], model: 'm', version: 1, layout: layout(0), streams: 2 })
  t.equal(r.from, a.weights.address(), 'started from A')
  t.same(r.switchedTo, [])
  t.equal(r.bytesReceived, rankBytes)
  await t.rejects(c.weights.pull({ from: b.weights.address(), model: 'm', version: 1, layout: layout(1), streams: 1 }), { code: 'ERR_WEIGHTS_RETIRED' }, 'without a fallback: B\'s error')
})

t.test('bytes that changed on the partial holder after it recorded their checksums are never accepted', async t => {
  const { key, b, held: seeded } = await partialHolder(t)
  const pinned = await b.sm.readHost(seeded.keys[1]!) // b.weight's column slice on B
  const view = viewHostRange(pinned.range)
  view[300_000] = view[300_000]! ^ 0x01
  pinned.release()
  const c = await weightsNode(t, key)
  await t.rejects(c.weights.pull({ from: b.weights.address(), model: 'm', version: 1, layout: layout(0), streams: 1 }), { code: 'ERR_DATA_CORRUPT', message: /b\.weight bytes 262144\.\.524288 failed the checksum 4 times/ })
  t.same(c.sm.storedKeys('weights/'), [], 'nothing stored from a corrupt partial holder')
})
