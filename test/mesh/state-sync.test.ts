// State sync (mesh/state-sync.ts) between real agents, and its wire against a peer inside the private network.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { lpStream } from '@libp2p/utils'
import { parseClusterKey } from '../../mesh/cluster-key.ts'
import { startMeshNode } from '../helpers/mesh-node.ts'
import { decodeEnvelope } from '../../mesh/signed-envelope.ts'
import { syncProtocol } from '../../mesh/state-sync.ts'
import { startTestMesh } from '../helpers/test-mesh.ts'

// Heartbeats every 10 minutes: only the join sync and the re-publication of a record no one heard can make these converge.
const noHeartbeats = ['--set', 'mesh.heartbeatIntervalMs=600000']

t.test('without heartbeats, agents converge through the join sync and the re-published first record', async t => {
  const mesh = await startTestMesh(t, { nodes: 3, args: noHeartbeats, convergeTimeoutMs: 30_000 })
  const [a, b, c] = mesh.agents as [typeof mesh.agents[0], typeof mesh.agents[0], typeof mesh.agents[0]]
  for (const agent of [b, c]) {
    const info = await agent.client.mesh()
    t.ok(info.sync.syncs >= 1, `${agent.name} synced after joining (${JSON.stringify(info.sync)})`)
  }
  // c joined last: whatever it knows of a and b beyond what gossip brought came by sync.
  const cInfo = await c.client.mesh()
  t.ok(cInfo.sync.recordsApplied >= 1, `records arrived by sync (${cInfo.sync.recordsApplied})`)
  const { peers } = await a.client.meshPeers()
  t.same(peers.map(p => [p.node, p.state]), [['node01', 'alive'], ['node02', 'alive']], 'the seed knows both joiners')
})

t.test('the sync answer holds only signed records newer than the digest; a malformed request is refused and the agent carries on', async t => {
  const mesh = await startTestMesh(t, { nodes: 2 })
  const [a, b] = mesh.agents as [typeof mesh.agents[0], typeof mesh.agents[0]]
  const node = await startMeshNode(t, parseClusterKey(readFileSync(mesh.clusterKeyFile, 'utf8'), 'test key'), await generateKeyPair('Ed25519'))
  const target = multiaddr(a.meshAddress)

  const ask = async (request: unknown): Promise<unknown> => {
    const stream = await node.dialProtocol(target, syncProtocol)
    const lp = lpStream(stream)
    await lp.write(new TextEncoder().encode(JSON.stringify(request)))
    const reply = JSON.parse(new TextDecoder().decode((await lp.read()).subarray()))
    await stream.close()
    return reply
  }
  const decodeAll = async (records: string[]) => Promise.all(records.map(async r => {
    const decoded = await decodeEnvelope(Buffer.from(r, 'base64'), 64 * 1024)
    if (!decoded.ok || decoded.message.kind !== 'record') throw new Error(`not a valid record: ${JSON.stringify(decoded)}`)
    return decoded.message
  }))

  const full = await ask({ digest: {} }) as { records: string[] }
  const all = await decodeAll(full.records)
  t.same(all.map(r => r.from).sort(), [a.peerId, b.peerId].sort(), 'an empty digest gets both records, the answering agent\'s own included, each verifiable')

  const own = all.find(r => r.from === a.peerId)!
  const other = all.find(r => r.from === b.peerId)!
  const partial = await decodeAll((await ask({ digest: { [a.peerId]: [own.incarnation, own.seq + 1000], [b.peerId]: [other.incarnation, 0] } }) as { records: string[] }).records)
  t.same(partial.map(r => r.from), [b.peerId], 'a record the requester holds a newer version of is left out')

  for (const bad of [{ digest: [] }, { digest: { x: [1] } }, { digest: { x: [-1, 0] } }, 'hello', null]) {
    await t.rejects(ask(bad), `refused: ${JSON.stringify(bad)}`)
  }
  const after = await a.client.meshPeers()
  t.same(after.peers.map(p => [p.peerId, p.state]), [[b.peerId, 'alive']], 'the agent carries on with its view unchanged')
})
