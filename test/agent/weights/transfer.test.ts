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
