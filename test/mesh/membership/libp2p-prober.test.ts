// The failure detector's direct probes over real libp2p nodes: one ping stream per member, reused
// probe after probe beside the connection monitor's own pings; a stream closed under the prober is
// no evidence against the member (the probe is retried on a fresh one); a stopped node is refused.
import t from 'tap'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { createLibp2pProber, pingProtocol } from '../../../mesh/membership/libp2p-prober.ts'
import type { MeshLibp2p } from '../../../mesh/membership/libp2p-node.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'

/** Ids of the ping streams `on` has open with `peer` (both directions). */
const pingStreams = (on: MeshLibp2p, peer: MeshLibp2p): Set<string> =>
  new Set(on.getConnections(peer.peerId).flatMap(c => c.streams.filter(s => s.protocol === pingProtocol).map(s => s.id)))

t.test('probes reuse one ping stream; a stream closed under the prober is retried; a stopped node is refused', async t => {
  const key = parseClusterKey(generateClusterKey(), 'test key')
  const [a, b] = await Promise.all([startMeshNode(t, key), startMeshNode(t, key)])
  const prober = createLibp2pProber(a)
  await prober.register()
  t.teardown(() => prober.unregister())
  await a.dial(b.getMultiaddrs()[0]!)

  // Twenty probes over 4 s: the connection monitor pings each second too (the helper's interval).
  const outcomes: string[] = []
  const seen: Array<Set<string>> = []
  for (let i = 0; i < 20; i++) {
    outcomes.push(await prober.ping(b.peerId.toString(), 2000, AbortSignal.timeout(5000)))
    seen.push(pingStreams(b, a))
    await new Promise(resolve => setTimeout(resolve, 200))
  }
  t.same(new Set(outcomes), new Set(['ack']), 'every probe acked')
  const kept = [...seen[0]!].filter(id => seen.every(ids => ids.has(id)))
  t.equal(kept.length, 1, 'one ping stream stayed open across all twenty probes')
  t.equal(a.getConnections(b.peerId).length, 1, 'and the connection monitor kept the connection')

  // The member's end of the probe stream goes away (its handler's timeout, say): the next probe acks on a fresh stream.
  for (const c of b.getConnections(a.peerId)) for (const s of c.streams) if (s.protocol === pingProtocol) s.abort(new Error('closed by the test'))
  t.equal(await prober.ping(b.peerId.toString(), 2000, AbortSignal.timeout(5000)), 'ack', 'a probe on a stream closed under it acks on a fresh one')
  t.notOk(pingStreams(b, a).has(kept[0]!), 'on another stream')

  await b.stop()
  t.equal(await prober.ping(b.peerId.toString(), 2000, AbortSignal.timeout(5000)), 'refused', 'a stopped node is refused')
})
