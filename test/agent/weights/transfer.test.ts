// Publish and pull between two in-process weight services over real TCP on loopback, with real pools and NVMe files.
import t from 'tap'
import { join } from 'node:path'
import { checksumBytes } from '../../../native/index.ts'
import { createDataAuth } from '../../../agent/weights/data-auth.ts'
import type { ReadRequest } from '../../../agent/weights/protocol.ts'
import { createTcpConnector } from '../../../agent/weights/tcp-client.ts'
import { keyBytes, MiB, sharedKey, tensor, weightsNode, writeSafetensors } from './weights-fixtures.ts'

t.test('publish from safetensors, full pull over 3 streams: bytes identical, keys stored on the puller, served from there too', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const b = await weightsNode(t, key)
  const tensors = [tensor('model.embed_tokens.weight', 'bf16', [1000, 64], 1), tensor('model.layers.0.mlp.down_proj.weight', 'f32', [96, 4000], 2), tensor('model.norm.weight', 'f32', [64], 3)]
  const file = join(a.dir, 'model.safetensors')
  writeSafetensors(file, tensors, { num_attention_heads: '8' })
  const manifest = await a.weights.publish({ model: 'tiny', source: { kind: 'safetensors', path: file } })
  t.equal(manifest.version, 0)
  t.equal(manifest.totalBytes, tensors.reduce((s, x) => s + x.data.length, 0))
  t.same(manifest.metadata, { num_attention_heads: '8' })
  const result = await b.weights.pull({ from: a.weights.address(), model: 'tiny', version: -1, streams: 3 })
  t.match(result, { model: 'tiny', version: 0, bytes: manifest.totalBytes, bytesReceived: manifest.totalBytes, tensors: 3, refetchedPieces: 0 })
  for (let i = 0; i < tensors.length; i++) t.ok((await keyBytes(b.sm, result.keys[i]!)).equals(tensors[i]!.data), `${tensors[i]!.name} identical`)
  t.same(b.weights.list().versions.map(v => [v.model, v.version]), [['tiny', 0]], 'the puller serves the version too')
  const again = await b.weights.pull({ from: a.weights.address(), model: 'tiny', version: 0, streams: 2 })
  t.equal(again.bytesReceived, 0, 'a repeated pull fetches nothing it already has')
})

t.test('a version published with 1 MiB+ tensors survives a restart of the publishing node', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const big = tensor('w', 'u8', [3 * MiB + 5], 9)
  const file = join(a.dir, 'big.safetensors')
  writeSafetensors(file, [big])
  await a.weights.publish({ model: 'm', version: 7, source: { kind: 'safetensors', path: file } })
  await a.weights.stop()
  await a.sm.stop()
  const again = await weightsNode(t, key, { retainVersions: 1 }, a.dir)
  t.same(again.weights.list().versions.map(v => v.version), [7])
  const b = await weightsNode(t, key)
  const r = await b.weights.pull({ from: again.weights.address(), model: 'm', version: 7, streams: 2 })
  t.ok((await keyBytes(b.sm, r.keys[0]!)).equals(big.data))
  // Retire everything, restart: versions stay monotonic and the retired one is reported as retired.
  await again.weights.retire('m', 7)
  await again.weights.stop()
  await again.sm.stop()
  const third = await weightsNode(t, key, {}, a.dir)
  t.same(third.weights.list().versions, [])
  t.throws(() => third.weights.manifest('m', 7), { code: 'ERR_WEIGHTS_RETIRED' })
  await t.rejects(third.weights.publish({ model: 'm', version: 5, source: { kind: 'safetensors', path: file } }), { code: 'ERR_WEIGHTS_VERSION_EXISTS' })
  t.equal((await third.weights.publish({ model: 'm', source: { kind: 'safetensors', path: file } })).version, 8, 'the next version continues after the retired one')
})

t.test('resharded pull (llama preset, tp 4, GQA from the metadata): each rank receives exactly its bytes', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const b = await weightsNode(t, key)
  const heads = 8; const kvHeads = 2; const headDim = 16; const hidden = 128; const inter = 256
  const tensors = [
    tensor('model.layers.0.self_attn.qkv_proj.weight', 'bf16', [(heads + 2 * kvHeads) * headDim, hidden], 1),
    tensor('model.layers.0.self_attn.o_proj.weight', 'bf16', [hidden, heads * headDim], 2),
    tensor('model.layers.0.mlp.down_proj.weight', 'f32', [hidden, inter], 3),
    tensor('model.norm.weight', 'f32', [hidden], 4),
  ]
  const file = join(a.dir, 'llama.safetensors')
  writeSafetensors(file, tensors, { num_attention_heads: String(heads), num_key_value_heads: String(kvHeads) })
  await a.weights.publish({ model: 'llama', version: 1, source: { kind: 'safetensors', path: file } })
  const rank = 3
  const r = await b.weights.pull({ from: a.weights.address(), model: 'llama', version: 1, streams: 2, layout: { tp: 4, rank, preset: 'llama' } })
  t.equal(r.bytesReceived, r.bytes, 'bytes received = bytes needed')
  // Reference slices, by rows/columns of the full tensors.
  const rows = (x: { data: Buffer, shape: number[] }, es: number, starts: Array<[number, number]>): Buffer => Buffer.concat(starts.map(([s, c]) => x.data.subarray(s * x.shape[1]! * es, (s + c) * x.shape[1]! * es)))
  const cols = (x: { data: Buffer, shape: number[] }, es: number, s: number, c: number): Buffer => Buffer.concat(Array.from({ length: x.shape[0]! }, (_, i) => x.data.subarray((i * x.shape[1]! + s) * es, (i * x.shape[1]! + s + c) * es)))
  const kv = Math.floor(rank * kvHeads / 4)
  const expected = [
    rows(tensors[0]!, 2, [[rank * 2 * headDim, 2 * headDim], [heads * headDim + kv * headDim, headDim], [(heads + kvHeads) * headDim + kv * headDim, headDim]]),
    cols(tensors[1]!, 2, rank * heads * headDim / 4, heads * headDim / 4),
    cols(tensors[2]!, 4, rank * inter / 4, inter / 4),
    tensors[3]!.data,
  ]
  t.equal(r.bytes, expected.reduce((s, e) => s + e.length, 0))
  for (let i = 0; i < expected.length; i++) t.ok((await keyBytes(b.sm, r.keys[i]!)).equals(expected[i]!), `${tensors[i]!.name}: rank ${rank}'s slice`)
  t.match(r.keys[0], /qkv_proj\.weight\.tp4-r3:param@\[0,0\]/, 'a fused multi-range slice is named by its layout')
  t.match(r.keys[1], /o_proj\.weight:param@\[0,96\]\/\[128,32\]:bf16#v1$/, 'a single-range slice keeps its global offsets')
  t.match(b.weights.list().versions, [{ model: 'llama', version: 1, partial: { tp: 4, rank: 3, layout: /^tp4-r3-/ } }], 'a sliced pull is served as a partial holding (its rank only)')
})

t.test('publish from a handed-out shm region and from stored keys; bad input leaves nothing behind', async t => {
  const { writeFileSync: write, existsSync } = await import('node:fs')
  const { makeShm } = await import('../../native/helpers.ts')
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const b = await weightsNode(t, key)
  const w = tensor('layer.weight', 'f32', [300, 70], 5)
  const n = tensor('norm.weight', 'bf16', [70], 6)
  const region = await a.weights.createRegion('r', undefined, [{ name: w.name, dtype: 'f32', shape: w.shape }, { name: n.name, dtype: 'bf16', shape: n.shape }])
  t.equal(region.version, 0)
  t.equal(region.tensors[1]!.offset % 4096, 0, 'tensors start 4 KiB-aligned')
  const { openSync, writeSync, closeSync } = await import('node:fs')
  const fd = openSync(`/dev/shm/${region.region}`, 'r+')
  writeSync(fd, w.data, 0, w.data.length, region.tensors[0]!.offset)
  writeSync(fd, n.data, 0, n.data.length, region.tensors[1]!.offset)
  closeSync(fd)
  const m = await a.weights.publish({ model: 'r', source: { kind: 'region', region: region.region } })
  t.equal(m.version, 0)
  t.notOk(existsSync(`/dev/shm/${region.region}`), 'the region is removed once published')
  const pulled = await b.weights.pull({ from: a.weights.address(), model: 'r', version: 0, streams: 2 })
  t.ok((await keyBytes(b.sm, pulled.keys[0]!)).equals(w.data))
  t.ok((await keyBytes(b.sm, pulled.keys[1]!)).equals(n.data))

  // From keys the trainer offloaded: referenced, not copied; retiring does not drop them.
  const shm = makeShm(t, w.data)
  const trainerKey = `job1/actor/layer.weight:param@[0,0]/[300,70]:f32#v3`
  await a.sm.offload([{ key: trainerKey, source: { kind: 'shm', name: shm, offset: 0 } }])
  const fromKeys = await a.weights.publish({ model: 'k', version: 3, source: { kind: 'keys', prefix: 'job1/actor/' } })
  t.same(fromKeys.tensors.map(x => x.key), [trainerKey])
  const viaKeys = await b.weights.pull({ from: a.weights.address(), model: 'k', version: 3, streams: 1 })
  t.ok((await keyBytes(b.sm, viaKeys.keys[0]!)).equals(w.data))
  await a.weights.retire('k', 3)
  t.equal(a.sm.storedKeys('job1/').length, 1, 'the trainer\'s key survives retirement')

  const before = a.sm.storedKeys('weights/').length
  const bad = join(a.dir, 'bad.safetensors')
  write(bad, Buffer.from([8, 0, 0, 0, 0, 0, 0, 0, 0x7b, 0x7d, 0, 0]))
  await t.rejects(a.weights.publish({ model: 'x', source: { kind: 'safetensors', path: bad } }), { code: 'ERR_BAD_REQUEST' })
  await t.rejects(a.weights.publish({ model: 'x', source: { kind: 'safetensors', path: join(a.dir, 'missing.safetensors') } }), { code: 'ERR_SOURCE_NOT_FOUND' })
  await t.rejects(a.weights.publish({ model: 'bad/name', source: { kind: 'keys', prefix: 'job1/' } }), { code: 'ERR_BAD_REQUEST' })
  await t.rejects(a.weights.publish({ model: 'x', source: { kind: 'region', region: 'nope' } }), { code: 'ERR_WEIGHTS_NOT_FOUND' })
  t.equal(a.sm.storedKeys('weights/').length, before, 'no keys left by failed publishes')
  t.same(a.weights.list().versions.map(v => `${v.model}@${v.version}`), ['r@0'])
  const next = await a.weights.publish({ model: 'x', source: { kind: 'keys', prefix: 'job1/actor/' } })
  t.equal(next.version, 0, 'a failed publish does not use up its version')
})

t.test('CHECKSUM answers the crc32c a READ of the same bytes carries, without the bytes; bad requests as READ', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const w = tensor('model.layers.0.mlp.down_proj.weight', 'bf16', [256, 3000], 4)
  const file = join(a.dir, 'm.safetensors')
  writeSafetensors(file, [w])
  await a.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: file } })
  const stream = await createTcpConnector(createDataAuth(key)).open(a.weights.address())
  t.teardown(() => stream.close())
  const cases: Array<[string, ReadRequest]> = [
    ['a whole tensor (one chunk: the manifest\'s checksum)', { model: 'm', version: 1, tensorIndex: 0, dim: null, ranges: [], byteOffset: 0, byteLength: 1_536_000 }],
    ['an unaligned window', { model: 'm', version: 1, tensorIndex: 0, dim: null, ranges: [], byteOffset: 777, byteLength: 12_345 }],
    ['a gathered row-parallel window', { model: 'm', version: 1, tensorIndex: 0, dim: 1, ranges: [{ start: 1500, count: 1500 }], byteOffset: 3000, byteLength: 200_000 }],
  ]
  for (const [what, req] of cases) {
    const bytes = Buffer.alloc(req.byteLength)
    const read = await stream.read(req, bytes)
    t.equal(await stream.checksum!(req), read.crc32c, `${what}: the READ's checksum`)
    t.equal(read.crc32c, await checksumBytes(bytes), `${what}: which is the bytes' crc32c`)
  }
  await t.rejects(stream.checksum!({ ...cases[0]![1], tensorIndex: 5 }), { code: 'ERR_WEIGHTS_PROTOCOL', message: /bad request: tensor 5 does not exist/ }, 'a tensor that does not exist')
  await t.rejects(stream.checksum!({ ...cases[0]![1], version: 9 }), { code: 'ERR_WEIGHTS_NOT_FOUND' }, 'a version that does not exist')
  await t.rejects(stream.checksum!({ ...cases[2]![1], ranges: [{ start: 2900, count: 200 }] }), { code: 'ERR_WEIGHTS_PROTOCOL', message: /outside dim 1/ }, 'a range past the tensor')
  t.equal(await stream.checksum!(cases[1]![1]), (await stream.read(cases[1]![1], Buffer.alloc(12_345))).crc32c, 'the stream is still in step')
  // This agent (dev config: TCP only) gives out no UCX worker address, and says why.
  await t.rejects(stream.ucxAddress!(), { code: 'ERR_WEIGHTS_PROTOCOL', message: /does not serve weights over UCX: weights\.transports does not list "ucx"/ }, 'UCX_ADDRESS refused with the reason')
  t.equal(await stream.checksum!(cases[0]![1]), (await stream.read(cases[0]![1], Buffer.alloc(1_536_000))).crc32c, 'and the stream is still in step')
})
