// The bounded partial view with real agents: ten agents with mesh.maxPeers = 4 each keep at most
// four neighbors (the seed too, though all joined through it), idle connections to others are closed,
// every agent still sees every member, a SIGKILLed one is seen dead by all and its neighbors draw
// replacements. The neighbor protocol refuses malformed asks and bounds what a stranger can take.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'
import { parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { neighborProtocol } from '../../../mesh/membership/peer-dialer.ts'
import { requestJson } from '../../../mesh/membership/json-protocol.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'

t.setTimeout(240_000)
const maxPeers = 4
const bounded = ['--set', `mesh.maxPeers=${maxPeers}`, '--set', 'mesh.idleConnectionMs=2000']

t.test('10 agents, at most 4 neighbors each: everyone sees everyone, a kill is seen by all, lost neighbors are replaced', async t => {
  const mesh = await startTestMesh(t, { nodes: 10, built: true, args: bounded, convergeTimeoutMs: 150_000 })
  const infos = async (agents: MeshAgent[]) => Promise.all(agents.map(async a => ({ a, info: await a.client.mesh() })))

  for (const { a, info } of await infos(mesh.agents)) {
    t.ok(info.neighbors.outbound + info.neighbors.inbound <= maxPeers, `${a.name}: ${info.neighbors.outbound} + ${info.neighbors.inbound} neighbors <= ${maxPeers}`)
  }
  // Requests (state sync, indirect probes) open connections beyond the neighbors for a moment; idle ones close after 2 s.
  let connections: number[] = []
  for (let i = 0; i < 100; i++) {
    connections = (await infos(mesh.agents)).map(x => x.info.connections)
    if (connections.every(c => c <= maxPeers + 2)) break
    await sleep(100)
  }
  // Two agents that ask each other at once hold two connections for one link (libp2p keeps both).
  t.ok(connections.every(c => c <= maxPeers + 2), `connections per agent ${connections.join(' ')}: at most ${maxPeers} neighbors plus a request in flight or a doubled link`)
  t.ok(connections[0]! <= maxPeers + 2, `the seed every agent joined through keeps ${connections[0]} connections, not one per member (9)`)
  t.ok((await infos([mesh.agents[0]!]))[0]!.info.neighbors.idleClosed > 0, 'the seed closed the joiners\' idle connections')

  const victim = mesh.agents[5]!
  const survivors = mesh.agents.filter(a => a !== victim)
  victim.proc.kill('SIGKILL')
  const ms = await mesh.waitFor(survivors, peers => peers.some(p => p.peerId === victim.peerId && p.state === 'dead'), 30_000, 'every survivor to see the killed agent dead')
  t.pass(`the 9 survivors saw it dead within ${Math.round(ms)} ms, none of them connected to more than ${maxPeers} others`)
  // Everyone keeps drawing: no survivor is left without a neighbor, none holds more than its bound. (With
  // maxPeers 4 the inbound sides, 2 each, are mostly full: an ask is often rejected, so an agent may hold
  // one outbound neighbor for a while; a full agent still takes one that has none.)
  let views: Array<{ outbound: number, inbound: number }> = []
  for (let i = 0; i < 100; i++) {
    views = (await infos(survivors)).map(x => x.info.neighbors)
    if (views.every(v => v.outbound >= 1)) break
    await sleep(100)
  }
  t.ok(views.every(v => v.outbound >= 1 && v.outbound + v.inbound <= maxPeers), `every survivor has drawn a neighbor, within the bound (${views.map(v => `${v.outbound}+${v.inbound}`).join(' ')})`)
})

t.test('the neighbor protocol: malformed asks are refused, and a stranger gets at most the inbound limit', async t => {
  const mesh = await startTestMesh(t, { nodes: 1, args: bounded })
  const agent = mesh.agents[0]!
  const key = parseClusterKey(readFileSync(mesh.clusterKeyFile, 'utf8'), 'test key')
  const protocol = { protocol: neighborProtocol, maxMessageBytes: 256 }
  const intruders = await Promise.all(Array.from({ length: 4 }, () => startMeshNode(t, key)))
  for (const bad of [{ op: 'grab' }, null, 'join', { op: 1 }, { op: 'join', priority: 'yes' }]) {
    const answer = await requestJson(intruders[0]!, agent.peerId, protocol, bad, AbortSignal.timeout(5000)).then(() => 'answered', (err: Error) => err.message)
    t.not(answer, 'answered', `${JSON.stringify(bad)} is refused (the stream is aborted)`)
  }
  for (const node of intruders) await node.dial(multiaddr(agent.meshAddress))
  const answers = await Promise.all(intruders.map(node => requestJson(node, agent.peerId, protocol, { op: 'join' }, AbortSignal.timeout(5000)))) as Array<{ accepted: boolean }>
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
