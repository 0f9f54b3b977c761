// Leader calls between real libp2p nodes in this process (same protocol stack as the agents):
// forwarding to the acting leader, following a stale agent's hint, errors, retries and timeouts,
// many long-polls at once, backing off while no leader acts.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import type { MeshLibp2p } from '../../../mesh/membership/libp2p-node.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'
import { createLeaderCalls, leaderCallProtocol, type LeaderCalls } from '../../../mesh/election/leader-calls.ts'
import { requestJson } from '../../../mesh/membership/json-protocol.ts'
import { AgentError } from '../../../core/errors.ts'

const clusterKey = parseClusterKey(generateClusterKey(), 'test key')

interface Agent { node: MeshLibp2p, id: string, calls: LeaderCalls, leadership: { leaderId: string | null, acting: boolean, tasksStarted: boolean }, changed: Set<() => void> }

async function startAgents (t: { teardown(fn: () => unknown): void }, n: number): Promise<Agent[]> {
  const agents: Agent[] = []
  for (let i = 0; i < n; i++) {
    const node = await startMeshNode(t, clusterKey)
    const agent: Agent = { node, id: node.peerId.toString(), leadership: { leaderId: null, acting: false, tasksStarted: false }, changed: new Set() } as Agent
    agent.calls = createLeaderCalls({
      node, self: agent.id, leadership: () => agent.leadership, logger: pino({ level: 'silent' }), defaultTimeoutMs: 2_000,
      onLeadershipChange: l => { agent.changed.add(l); return () => agent.changed.delete(l) },
    })
    await agent.calls.start()
    agents.push(agent)
    t.teardown(() => agent.calls.stop())
  }
  for (const a of agents) for (const b of agents) if (a !== b) await a.node.dial(b.node.getMultiaddrs()[0]!)
  return agents
}

const lead = (agents: Agent[], leader: Agent | null, knownBy: Agent[] = agents): void => {
  for (const a of agents) a.leadership = { leaderId: knownBy.includes(a) ? leader?.id ?? null : a.leadership.leaderId, acting: a === leader, tasksStarted: a === leader }
  for (const a of agents) for (const l of [...a.changed]) l()
}

t.test('a call runs on the acting leader, from it and from any other agent, with the caller identified', async t => {
  const [a, b, c] = await startAgents(t, 3) as [Agent, Agent, Agent]
  const seen: string[] = []
  b.calls.handle('jobs.echo', async (body, caller) => { seen.push(caller.peerId); return { echoed: body, on: b.id } })
  lead([a, b, c], b)
  t.same(await a.calls.call('jobs.echo', { x: 1 }), { echoed: { x: 1 }, on: b.id }, 'forwarded from a follower')
  t.same(await b.calls.call('jobs.echo', [2]), { echoed: [2], on: b.id }, 'run locally on the leader')
  t.same(seen, [a.id, b.id], 'the handler sees who called')
})

t.test('a stale view is corrected by the answering agent\'s hint; a leader change mid-way is retried', async t => {
  const [a, b, c] = await startAgents(t, 3) as [Agent, Agent, Agent]
  b.calls.handle('m', async () => 'from b')
  c.calls.handle('m', async () => 'from c')
  lead([a, b, c], c, [b, c])
  a.leadership = { leaderId: b.id, acting: false, tasksStarted: false } // a still thinks b leads
  t.equal(await a.calls.call('m', null), 'from c', 'b answered ERR_NOT_LEADER naming c; a followed')

  lead([a, b, c], null) // nobody acts for a while, then b takes over
  setTimeout(() => lead([a, b, c], b), 300)
  const started = performance.now()
  t.equal(await a.calls.call('m', null), 'from b', 'retried until a leader acted')
  t.ok(performance.now() - started >= 250, 'it waited for the new leader')
})

t.test('handler errors keep their code and are not retried; unknown methods and bad requests are refused', async t => {
  const [a, b] = await startAgents(t, 2) as [Agent, Agent]
  let runs = 0
  b.calls.handle('jobs.submit', async () => { runs++; throw new AgentError('ERR_BAD_REQUEST', 'job spec: nodes must be >= 1') })
  b.calls.handle('crash', async () => { throw new Error('boom') })
  lead([a, b], b)
  await t.rejects(a.calls.call('jobs.submit', {}), { code: 'ERR_BAD_REQUEST', message: 'job spec: nodes must be >= 1' })
  t.equal(runs, 1, 'a refused request is not retried')
  await t.rejects(a.calls.call('crash', {}), { code: 'ERR_INTERNAL', message: /boom/ })
  await t.rejects(a.calls.call('nope', {}), { code: 'ERR_NOT_FOUND', message: /no method "nope"/ })
  t.same(await requestJson(a.node, b.id, { protocol: leaderCallProtocol, maxMessageBytes: 1 << 20 }, 'garbage', AbortSignal.timeout(2000)),
    { ok: false, code: 'ERR_BAD_REQUEST', message: 'a leader call is { method, body }', leaderId: b.id }, 'a malformed request gets a clear answer')
  t.throws(() => b.calls.handle('Bad Name', async () => 1), { code: 'ERR_ARG_INVALID' })
  t.throws(() => b.calls.handle('crash', async () => 1), { code: 'ERR_ARG_INVALID', message: /already handled/ })
})

t.test('a method bound to a signal goes when it aborts; one bound to an aborted signal is never registered', async t => {
  const [a, b] = await startAgents(t, 2) as [Agent, Agent]
  lead([a, b], b)
  const acting = new AbortController()
  b.calls.handle('m', async () => 1, acting.signal)
  t.equal(await a.calls.call('m', null), 1)
  acting.abort()
  await t.rejects(a.calls.call('m', null), { code: 'ERR_NOT_FOUND' }, 'gone with its acting')
  // A leader task whose start() was still running when acting stopped registers late: that must leave the
  // method free, or the next acting's start-up fails on "already handled" for as long as the epoch lasts.
  b.calls.handle('m', async () => 2, acting.signal)
  await t.rejects(a.calls.call('m', null), { code: 'ERR_NOT_FOUND' }, 'a late registration registers nothing')
  b.calls.handle('m', async () => 3, new AbortController().signal)
  t.equal(await a.calls.call('m', null), 3, 'the next acting registers it')
})

t.test('with no acting leader the call fails after its timeout; unregistered methods stop answering', async t => {
  const [a, b] = await startAgents(t, 2) as [Agent, Agent]
  const unregister = b.calls.handle('m', async () => 1)
  lead([a, b], null)
  await t.rejects(a.calls.call('m', null, { timeoutMs: 400 }), { code: 'ERR_LEADER_UNAVAILABLE', message: /within 400 ms/ })
  lead([a, b], b)
  t.equal(await a.calls.call('m', null), 1)
  unregister()
  await t.rejects(a.calls.call('m', null), { code: 'ERR_NOT_FOUND' })
  await b.node.stop() // the leader is gone: transport failures are retried until the timeout
  await t.rejects(a.calls.call('m', null, { timeoutMs: 500 }), { code: 'ERR_LEADER_UNAVAILABLE', message: new RegExp(b.id) })
})

t.test('a leader whose tasks are still starting answers "not ready": the call waits for them instead of failing', async t => {
  const [a, b] = await startAgents(t, 2) as [Agent, Agent]
  lead([a, b], b)
  b.leadership = { leaderId: b.id, acting: true, tasksStarted: false }
  setTimeout(() => { b.calls.handle('late', async () => 'registered late'); b.leadership = { ...b.leadership, tasksStarted: true } }, 300)
  t.equal(await a.calls.call('late', null), 'registered late')
})

t.test('long-polls: a hundred calls from one agent are in flight at once (no per-protocol stream cap)', async t => {
  const [a, b] = await startAgents(t, 2) as [Agent, Agent]
  let inFlight = 0
  let most = 0
  let runs = 0
  b.calls.handle('poll', async () => { runs++; most = Math.max(most, ++inFlight); await sleep(400); inFlight--; return 'done' })
  lead([a, b], b)
  const answers = await Promise.all(Array.from({ length: 100 }, () => a.calls.call('poll', null, { timeoutMs: 20_000 })))
  t.equal(answers.filter(x => x === 'done').length, 100)
  t.equal(runs, 100, 'none was refused and retried')
  t.equal(most, 100, 'all held a stream at the same time (libp2p\'s default would stop at 32)')
})

t.test('while no leader acts a call backs off, and a leadership change wakes it at once', async t => {
  const [a, b] = await startAgents(t, 2) as [Agent, Agent]
  b.calls.handle('m', async () => 'from b')
  lead([a, b], null)
  a.leadership = { leaderId: b.id, acting: false, tasksStarted: false } // a still names b, which answers "not leader"
  let asked = 0
  let view = b.leadership
  Object.defineProperty(b, 'leadership', { get: () => { asked++; return view }, set: v => { view = v } })
  await t.rejects(a.calls.call('m', null, { timeoutMs: 2_000 }), { code: 'ERR_LEADER_UNAVAILABLE' })
  t.ok(asked <= 8, `${asked} requests in 2 s (100 ms doubling to 1 s; fixed 100 ms polling sent ~20)`)
  const call = a.calls.call('m', null, { timeoutMs: 10_000 })
  await sleep(2_500) // its wait has grown to about 1 s
  const changedAt = performance.now()
  lead([a, b], b)
  t.equal(await call, 'from b')
  t.ok(performance.now() - changedAt < 500, `answered ${Math.round(performance.now() - changedAt)} ms after the change, not after the rest of its wait`)
})
