// An agent whose resident namespaces outgrow mesh.maxRecordBytes stays in its peers' views: it
// publishes a record cut to fit, marked as partial, and no peer drops it as oversized.
import t from 'tap'
import { startTestMesh } from '../../helpers/test-mesh.ts'
import { makeShm } from '../../native/helpers.ts'

const MiB = 2 ** 20
const maxRecordBytes = 4096

t.test('a record over the byte bound is cut, marked, and still accepted by the peers', async t => {
  const mesh = await startTestMesh(t, { nodes: 2, args: ['--set', `mesh.maxRecordBytes=${maxRecordBytes}`] })
  const b = await mesh.addAgent({ name: 'big-node', args: ['--set', 'state.enabled=true', '--set', `state.hostPoolBytes=${16 * MiB}`, '--set', `state.nvmeCapacityBytes=${64 * MiB}`] })
  await mesh.waitConverged()
  // 40 namespaces of ~200 characters: ~8 KB of names, twice the bound.
  const namespaces = Array.from({ length: 40 }, (_, i) => `job${String(i).padStart(2, '0')}/${'actor-'.repeat(33)}`)
  const shm = makeShm(t, MiB)
  await b.client.call('POST', '/v1/state/offload', { tensors: namespaces.map(ns => ({ key: `${ns}/w:param@[0]/[64]:u8#v1`, source: { kind: 'shm', name: shm, offset: 0 } })) })

  // Records go out on change while the offload lands, so an earlier cut record may list fewer keys: wait for the one with all 40.
  await mesh.waitFor(mesh.agents.filter(x => x !== b), peers => peers.some(p => p.peerId === b.peerId &&
    (p.record?.truncated?.resident ?? 0) > 0 && (p.record?.resident?.length ?? 0) + p.record!.truncated!.resident! === namespaces.length),
  20_000, 'the cut record of all 40 namespaces to reach the other agents')
  for (const observer of mesh.agents.filter(x => x !== b)) {
    const view = (await mesh.peerOf(observer, b))!
    t.equal(view.state, 'alive', `${observer.name} holds big-node alive`)
    const kept = view.record!.resident!
    t.ok(kept.length > 0 && kept.length < namespaces.length, `${observer.name}: ${kept.length} namespaces listed`)
    t.same(kept, namespaces.slice(0, kept.length), 'the first namespaces (sorted order) are kept')
    t.equal(view.record!.truncated!.resident, namespaces.length - kept.length, 'the rest is counted')
    t.equal((await observer.client.mesh()).messages.invalid.oversized, 0, 'nothing dropped as oversized')
  }
})
