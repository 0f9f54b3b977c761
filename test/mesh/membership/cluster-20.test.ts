// Twenty agents (separate processes) on loopback converge, and all of them notice one of them
// killed, on a bounded partial view (mesh.maxPeers = 6: each agent keeps at most six neighbors, the
// seed that all joined through too, and closes idle connections to others after 2 s); the neighbors
// of the killed one draw replacements. Kept short for CI: start, converge, kill one, done. The built agents run (dist/, as
// installed): starting twenty from the sources costs more CPU than the mesh itself.
// test/bench/mesh.bench.ts measures 20 agents (convergence, dissemination, detection, idle cost).
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'

const maxPeers = 6
/** Election servers (one voter set); the other seventeen agents are clients. */
const servers = 3
const infos = async (agents: MeshAgent[]) => Promise.all(agents.map(a => a.client.mesh()))

// Starting twenty agents on a 2-core CI machine that runs another test file beside it takes 1-3 minutes.
t.setTimeout(300_000)

t.test('a 20-agent cluster converges and every member sees a SIGKILLed one dead', { timeout: 290_000 }, async t => {
  const began = performance.now()
  // Deployed as a cluster: three election servers, seventeen clients (not twenty one-agent elections).
  const mesh = await startTestMesh(t, { nodes: 20, built: true, convergeTimeoutMs: 220_000, clusterServers: servers, args: ['--set', `mesh.maxPeers=${maxPeers}`, '--set', 'mesh.idleConnectionMs=2000'] })
  t.equal(mesh.agents.length, 20)
  // Converged means every agent saw the others alive; a member starved of CPU for seconds right after
  // may be suspected and declared dead for a moment before it refutes: its view must return to 19 alive.
  const liveWithRecords = (peers: Array<{ state: string, record: unknown }>): number => peers.filter(p => p.state !== 'dead' && p.record !== null).length
  const settledMs = await mesh.waitFor([mesh.agents[7]!], peers => liveWithRecords(peers) === 19, 30_000, 'agent 7 to hold the 19 others\' records, none dead')
  t.pass(`agent 7 holds the 19 others' records, none dead (${Math.round(settledMs)} ms after convergence)`)
  t.comment(`started and converged in ${Math.round(performance.now() - began)} ms`)

  const views = (await infos(mesh.agents)).map(i => i.neighbors)
  t.ok(views.every(v => v.outbound + v.inbound <= maxPeers), `every agent within ${maxPeers} neighbors (${views.map(v => v.outbound + v.inbound).join(' ')})`)
  // Requests (state sync, leader calls, indirect probes) open connections beyond the neighbors for a moment;
  // idle ones close after 2 s. Two agents that ask each other at once hold two connections for one link.
  // An election server also keeps a link to each other voter (election RPCs every 100 ms never leave it
  // idle), neighbor or not: the bound the issue allows ("plus ... the leader").
  const bound = (i: number): number => maxPeers + 3 + (i < servers ? servers - 1 : 0)
  let connections: number[] = []
  for (let i = 0; i < 100; i++) {
    connections = (await infos(mesh.agents)).map(i => i.connections)
    if (connections.every((c, i) => c <= bound(i))) break
    await sleep(100)
  }
  t.ok(connections.every((c, i) => c <= bound(i)), `connections per agent ${connections.join(' ')}: at most ${maxPeers} neighbors plus requests in flight, plus the other voters' links at the ${servers} servers`)
  t.ok(connections[0]! <= bound(0), `the seed every agent joined through keeps ${connections[0]} connections, not one per member (19)`)

  const victim = mesh.agents[19]!
  const survivors = mesh.agents.slice(0, 19)
  victim.proc.kill('SIGKILL')
  const ms = await mesh.waitFor(survivors, peers => peers.some(p => p.peerId === victim.peerId && p.state === 'dead'), 30_000, 'every survivor to see the killed agent dead')
    .catch((err: Error) => {
      // An agent that exited on its own is a bug, not load: say which and how it ended.
      const exited = survivors.filter(a => a.proc.exitCode !== null || a.proc.signalCode !== null)
        .map(a => `${a.name} exited (${a.proc.exitCode ?? a.proc.signalCode}); its last output:\n${a.output().split('\n').slice(-15).join('\n')}`)
      throw new Error([err.message, ...exited].join('\n'))
    })
  t.pass(`the 19 survivors saw it dead within ${Math.round(ms)} ms (polling every 50 ms)`)
  // Everyone keeps drawing: no survivor is left without an outbound neighbor, none holds more than its bound.
  let after: Array<{ outbound: number, inbound: number }> = []
  for (let i = 0; i < 100; i++) {
    after = (await infos(survivors)).map(x => x.neighbors)
    if (after.every(v => v.outbound >= 1)) break
    await sleep(100)
  }
  t.ok(after.every(v => v.outbound >= 1 && v.outbound + v.inbound <= maxPeers), `every survivor has drawn a neighbor, within the bound (${after.map(v => `${v.outbound}+${v.inbound}`).join(' ')})`)
})
