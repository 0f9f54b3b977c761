// Publish and pull between two in-process weight services over real TCP on loopback, with real pools and NVMe files.
import t from 'tap'
import { join } from 'node:path'
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
  const again = await weightsNode(t, key, {}, a.dir)
  t.same(again.weights.list().versions.map(v => v.version), [7])
  const b = await weightsNode(t, key)
  const r = await b.weights.pull({ from: again.weights.address(), model: 'm', version: 7, streams: 2 })
  t.ok((await keyBytes(b.sm, r.keys[0]!)).equals(big.data))
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
  t.same(b.weights.list().versions, [], 'a partial pull is not served as a version')
})
