// The neighbor protocol of the bounded partial view against a real agent: malformed asks are refused,
// a stranger gets at most the inbound limit, and leave frees the slot. cluster-20.test.ts runs the view
// itself on twenty agents (bounds, idle connections, a kill, replacement draws).
import t from 'tap'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'
import { parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { neighborProtocol } from '../../../mesh/membership/peer-dialer.ts'
import { requestJson } from '../../../mesh/membership/json-protocol.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'

const maxPeers = 4
const bounded = ['--set', `mesh.maxPeers=${maxPeers}`, '--set', 'mesh.idleConnectionMs=2000']

t.test('the neighbor protocol: malformed asks are refused, and a stranger gets at most the inbound limit', async t => {
  const mesh = await startTestMesh(t, { nodes: 1, args: bounded })
  const agent = mesh.agents[0]!
  const key = parseClusterKey(readFileSync(mesh.clusterKeyFile, 'utf8'), 'test key')
  const protocol = { protocol: neighborProtocol, maxMessageBytes: 256 }
  // The malformed asks come from a node of their own: the four that ask to join then dial fresh links
  // (a link of a non-neighbor is closed after 2 s without a request).
  const [malformed, ...intruders] = await Promise.all(Array.from({ length: 5 }, () => startMeshNode(t, key))) as [Awaited<ReturnType<typeof startMeshNode>>, ...Array<Awaited<ReturnType<typeof startMeshNode>>>]
  for (const bad of [{ op: 'grab' }, null, 'join', { op: 1 }, { op: 'join', priority: 'yes' }]) {
    const answer = await requestJson(malformed, agent.peerId, protocol, bad, AbortSignal.timeout(5000)).then(() => 'answered', (err: Error) => err.message)
    t.not(answer, 'answered', `${JSON.stringify(bad)} is refused (the stream is aborted)`)
  }
  // The agent closes a non-neighbor's connection after 2 s without a request: on a loaded machine it
  // may do so between a dial and the ask (an ask that arrives over a closed link takes no slot). A
  // closed link is redialed and asked again; a refusal is an answer and is not retried.
  const join = async (node: typeof intruders[number]): Promise<{ accepted: boolean }> => {
    for (let attempt = 1; ; attempt++) {
      await node.dial(multiaddr(agent.meshAddress))
      try {
        return await requestJson(node, agent.peerId, protocol, { op: 'join' }, AbortSignal.timeout(5000)) as { accepted: boolean }
      } catch (err) {
        if (attempt === 3) throw err
      }
    }
  }
  const answers = await Promise.all(intruders.map(join))
  // maxPeers 4: 2 outbound, at most 2 inbound.
  t.same(answers.map(a => a.accepted).sort(), [false, false, true, true], 'two accepted, two rejected')
  const info = await agent.client.mesh()
  t.equal(info.neighbors.inbound, 2)
  t.equal(info.neighbors.outbound, 0, 'strangers are no members: the agent draws none of them')
  t.equal(info.members.alive, 0, 'neighbors are links, not members: no record, no membership')
  const accepted = intruders.filter((_, i) => answers[i]!.accepted)
  await requestJson(accepted[0]!, agent.peerId, protocol, { op: 'leave' }, AbortSignal.timeout(5000))
  t.equal((await agent.client.mesh()).neighbors.inbound, 1, 'leave frees the slot')
  // The node that left is no neighbor any more: its idle connection is closed after idleConnectionMs.
  const left = accepted[0]!
  for (let i = 0; i < 100 && left.getConnections(peerIdFromString(agent.peerId)).length > 0; i++) await sleep(100)
  t.equal(left.getConnections(peerIdFromString(agent.peerId)).length, 0, 'the agent closed the idle connection of the node that left')
  t.equal(accepted[1]!.getConnections(peerIdFromString(agent.peerId)).length, 1, 'and kept its neighbor\'s')
})
