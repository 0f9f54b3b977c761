// A peer inside the private network (it holds the cluster key) publishes invalid messages on the mesh topic:
// each is dropped and counted by reason, a stale record is ignored, and the agents carry on.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'
import { encodeEnvelope } from '../../../mesh/membership/signed-envelope.ts'
import { meshTopic, type AvailabilityRecord } from '../../../mesh/membership/mesh-messages.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'

t.test('invalid, oversized, forged and stale records are dropped and counted; the agents carry on', async t => {
  const mesh = await startTestMesh(t, { nodes: 2 })
  const [a, b] = mesh.agents as [typeof mesh.agents[0], typeof mesh.agents[0]]
  const key = await generateKeyPair('Ed25519')
  const node = await startMeshNode(t, parseClusterKey(readFileSync(mesh.clusterKeyFile, 'utf8'), 'test key'), key)
  node.services.pubsub.subscribe(meshTopic)
  await node.dial(multiaddr(a.meshAddress))

  const self = node.peerId.toString()
  const record = (seq: number): AvailabilityRecord => ({
    kind: 'record', from: self, node: 'intruder', incarnation: 1, seq, publishedAtMs: Date.now(), addresses: { mesh: [] },
    preemptible: false, cpu: { cores: 1, loadAvg1: 0 }, memory: { totalBytes: 1, availableBytes: 1 }, gpus: [],
  })
  // A publication before the agent's subscription is known reaches no one and cannot be repeated (same id): wait first.
  for (let i = 0; node.services.pubsub.getSubscribers(meshTopic).length === 0; i++) {
    if (i > 600) throw new Error(`the agent never subscribed to the mesh topic (${node.getConnections().length} connections, ${node.services.pubsub.getPeers().length} pubsub peers)`)
    await sleep(50)
  }
  const publish = async (data: Uint8Array): Promise<void> => {
    t.ok((await node.services.pubsub.publish(meshTopic, data)).recipients.length > 0, 'published to the agent')
  }

  const oversized = new Uint8Array(80 * 1024).fill(7)
  oversized[0] = 1
  const malformed = new Uint8Array(200).fill(42)
  malformed[0] = 1
  const badSchema = await encodeEnvelope({ ...record(1), cpu: { cores: -1, loadAvg1: 0 } }, key)
  const forged = await encodeEnvelope(record(2), await generateKeyPair('Ed25519'))
  for (const data of [oversized, malformed, badSchema, forged]) await publish(data)
  await publish(await encodeEnvelope(record(10), key))
  await publish(await encodeEnvelope(record(9), key))

  const deadline = Date.now() + 15_000
  let info = await a.client.mesh()
  while (Date.now() < deadline) {
    info = await a.client.mesh()
    const i = info.messages.invalid
    if (i.oversized > 0 && i.malformed > 0 && i.schema > 0 && i.signature > 0 && info.messages.stale > 0) break
    await sleep(100)
  }
  t.ok(info.messages.invalid.oversized >= 1, 'oversized counted')
  t.ok(info.messages.invalid.malformed >= 1, 'malformed counted')
  t.ok(info.messages.invalid.schema >= 1, 'schema violation counted')
  t.ok(info.messages.invalid.signature >= 1, 'forged signature counted')
  t.ok(info.messages.stale >= 1, 'an older sequence is ignored')

  const intruder = (await a.client.meshPeers()).peers.find(p => p.peerId === self)
  t.equal(intruder?.record?.seq, 10, 'only the valid record was taken, and the stale one did not replace it')
  const bInfo = await b.client.mesh()
  t.same(bInfo.messages.invalid, { oversized: 0, malformed: 0, schema: 0, signature: 0 }, 'invalid messages are not forwarded')
  t.equal((await a.client.status()).subsystems.find(s => s.id === 'mesh')?.state, 'ok', 'the agent carries on')
  // With two agents a probe that times out on a loaded machine has no helper to ask, so b may be
  // suspected for a moment and refute; what must hold is that it stays (or is again) alive, never dead.
  await mesh.waitFor([a], peers => peers.some(p => p.peerId === b.peerId && p.state === 'alive'), 10_000, 'the other agent to be alive at a')
  t.not((await mesh.peerOf(a, b))?.state, 'dead', 'the other agent is still a member')
})
