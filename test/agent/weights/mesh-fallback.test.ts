// A pull without `from` takes a holder from the mesh view and the other full holders as fallbacks
// (weights-service.ts → puller): when the chosen holder has dropped the version since its record,
// the pull goes on from another holder instead of failing.
import t from 'tap'
import { join } from 'node:path'
import type { PeerView } from '../../../mesh/membership/mesh-views.ts'
import { keyBytes, sharedKey, tensor, weightsNode, writeSafetensors } from './weights-fixtures.ts'

const tensors = [tensor('model.layers.0.mlp.down_proj.weight', 'bf16', [64, 512], 1), tensor('model.norm.weight', 'f32', [64], 2)]

/** What findHolders reads of a peer: alive, its data address, the versions it advertises. */
const advertising = (node: string, address: string): PeerView => ({
  peerId: `peer-${node}`, node, state: 'alive', addresses: [],
  record: { addresses: { weights: address, mesh: [] }, weights: [{ model: 'm', version: 1 }] },
} as unknown as PeerView)

t.test('the chosen holder dropped the version since its record: the pull resumes from a fallback holder', async t => {
  const key = sharedKey()
  const stale = await weightsNode(t, key)
  const good = await weightsNode(t, key)
  const file = join(good.dir, 'm.safetensors')
  writeSafetensors(file, tensors)
  for (const holder of [stale, good]) await holder.weights.publish({ model: 'm', version: 1, source: { kind: 'safetensors', path: file } })
  await stale.weights.retire('m', 1)

  // The mesh view still shows both; the stale holder is listed first and Math.random() = 0 picks it.
  const view = [advertising('stale', stale.weights.address()), advertising('good', good.weights.address())]
  const puller = await weightsNode(t, key, {}, undefined, undefined, () => view)
  const random = Math.random
  Math.random = () => 0
  t.teardown(() => { Math.random = random })
  const result = await puller.weights.pull({ model: 'm', version: 1, streams: 1 })
  Math.random = random
  t.equal(result.version, 1)
  t.equal(result.from, good.weights.address(), 'served by the fallback (the stale holder had no manifest to give)')
  for (const [i, x] of tensors.entries()) t.same(await keyBytes(puller.sm, result.keys[i]!), x.data, `${x.name}: the bytes of the version`)
})
