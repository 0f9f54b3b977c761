// The election state machine in one process: in-memory transport with delays, drops, partitions and
// crashes (stop + restart from the persisted term/vote/log). Sampled every few ms: at most one node may
// act, no term ever has two leaders, and a leader holds every decision acknowledged in an earlier term
// (commit by majority + the election restriction).
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { createRaftElection, type ElectionPersistence, type ElectionRequest, type ElectionResponse, type RaftElection } from '../../../mesh/election/raft-election.ts'
import { createSeededRandom } from '../../../core/seeded-random.ts'
import { createReplicatedLog, type LogSnapshot, type ReplicatedLog } from '../../../mesh/election/replicated-log.ts'

const timing = { heartbeatIntervalMs: 20, electionTimeoutMinMs: 150, electionTimeoutMaxMs: 250, leaseMs: 110, rpcTimeoutMs: 60 }
const quiet = { info () {}, warn () {}, debug () {} }

interface Disk extends ElectionPersistence { log: LogSnapshot }
interface Node { id: string, election: RaftElection, replica: ReplicatedLog, disk: Disk, controller: AbortController, up: boolean }
/** A decision the leader of `term` was told is committed: `kind` (unique per decision) = `payload`. */
interface Acknowledged { term: number, seq: number, kind: string, payload: number }

function cluster (size: number, random: () => number) {
  const ids = Array.from({ length: size }, (_, i) => `n${i}`)
  const cut = new Set<string>()
  const linkKey = (a: string, b: string): string => [a, b].sort().join('|')
  const nodes = new Map<string, Node>()
  const leaders = new Map<number, string>()
  const violations: string[] = []
  const acknowledged: Acknowledged[] = []
  let dropRate = 0

  const boot = (id: string, disk: Disk): Node => {
    const node: Node = { id, disk, controller: new AbortController(), up: true, election: undefined as unknown as RaftElection, replica: undefined as unknown as ReplicatedLog }
    // The log on "disk" is what survives a crash: a write lands after a delay, in order.
    node.replica = createReplicatedLog(disk.log, async s => { await sleep(random() * 3); node.disk = { ...node.disk, log: s } })
    node.election = createRaftElection({ self: id, voters: ids, voterSetId: 'v', ...timing }, {
      replica: {
        last: () => node.replica.last('v'),
        snapshot: () => node.replica.snapshot('v'),
        accept: s => node.replica.accept(s),
      },
      storage: {
        current: () => ({ ...node.disk }),
        async save (patch) { await sleep(random() * 3); node.disk = { ...node.disk, ...patch } },
      },
      transport: {
        async request (peer: string, request: ElectionRequest, signal: AbortSignal): Promise<ElectionResponse> {
          const target = nodes.get(peer)
          const lost = (): boolean => cut.has(linkKey(id, peer)) || random() < dropRate || target?.up !== true
          await sleep(random() * 10, undefined, { signal })
          if (lost()) { await sleep(timing.rpcTimeoutMs * 2, undefined, { signal }); throw new Error('unreachable') }
          const response = await target!.election.handle(id, request)
          await sleep(random() * 10, undefined, { signal })
          if (lost()) { await sleep(timing.rpcTimeoutMs * 2, undefined, { signal }); throw new Error('unreachable') }
          return response
        },
      },
      log: quiet,
      random,
    })
    node.election.onChange(s => {
      if (s.role !== 'leader') return
      const known = leaders.get(s.term)
      if (known !== undefined && known !== id) violations.push(`term ${s.term}: ${known} and ${id} both lead`)
      leaders.set(s.term, id)
    })
    node.election.start({ signal: node.controller.signal })
    nodes.set(id, node)
    return node
  }
  for (const id of ids) boot(id, { term: 0, votedFor: null, log: { voterSetId: 'v', epoch: 0, seq: 0, entries: {} } })
  let decisions = 0

  /** The acting leader, if any, appends one decision and waits for its commit; acknowledged ones are recorded. */
  const decide = async (): Promise<void> => {
    const leader = [...nodes.values()].find(n => n.up && n.election.mayAct())
    if (leader === undefined) return
    const term = leader.election.state().term
    const kind = `d${decisions++}`
    const { snapshot, durable } = leader.replica.append('v', term, kind, decisions)
    await durable
    if (!leader.up) return
    try {
      await leader.election.commit(snapshot.seq, AbortSignal.timeout(timing.leaseMs))
      acknowledged.push({ term, seq: snapshot.seq, kind, payload: decisions })
    } catch (err) {
      if ((err as { code?: string }).code !== 'ERR_NOT_COMMITTED') throw err
    }
  }

  /** Leader Completeness: an acting leader's log holds every decision acknowledged in an earlier term. */
  const checkCompleteness = (): void => {
    for (const n of nodes.values()) {
      if (!n.up || !n.election.mayAct()) continue
      const { term } = n.election.state()
      const log = n.replica.snapshot('v')
      for (const a of acknowledged) {
        if (a.term < term && log.entries[a.kind] !== a.payload) violations.push(`leader ${n.id} of term ${term} lacks ${a.kind} (seq ${a.seq}, acknowledged in term ${a.term})`)
      }
    }
  }

  return {
    ids,
    nodes,
    violations,
    acknowledged,
    decide,
    checkCompleteness,
    leaders,
    actingNow: () => [...nodes.values()].filter(n => n.up && n.election.mayAct()).map(n => n.id),
    setDropRate (rate: number) { dropRate = rate },
    partition (side: string[]) {
      cut.clear()
      for (const a of side) for (const b of ids) if (!side.includes(b)) cut.add(linkKey(a, b))
    },
    heal () { cut.clear() },
    crash (id: string) { const n = nodes.get(id)!; n.up = false; n.controller.abort() },
    restart (id: string) { const n = nodes.get(id)!; if (!n.up) boot(id, n.disk) },
    stop () { for (const n of nodes.values()) n.controller.abort() },
  }
}

async function watch (c: ReturnType<typeof cluster>, ms: number): Promise<void> {
  const until = performance.now() + ms
  while (performance.now() < until) {
    const acting = c.actingNow()
    if (acting.length > 1) c.violations.push(`${acting.join(' and ')} act at once`)
    c.checkCompleteness()
    await sleep(2)
  }
}

async function waitActing (c: ReturnType<typeof cluster>, timeoutMs: number, other = ''): Promise<string> {
  const until = performance.now() + timeoutMs
  for (;;) {
    const acting = c.actingNow()
    if (acting.length === 1 && acting[0] !== other) return acting[0]!
    if (performance.now() > until) throw new Error(`no single acting leader after ${timeoutMs} ms (${acting.join(',')})`)
    await sleep(5)
  }
}

t.test('a sole voter leads at once', async t => {
  const c = cluster(1, Math.random)
  t.teardown(() => c.stop())
  t.equal(await waitActing(c, 500), 'n0')
  t.equal(c.nodes.get('n0')!.disk.term, 1, 'term 1 persisted')
})

t.test('3 voters elect one leader; the leader partitioned alone stops acting before another one starts', async t => {
  const c = cluster(3, Math.random)
  t.teardown(() => c.stop())
  const first = await waitActing(c, 10_000)
  const term = c.nodes.get(first)!.election.state().term
  c.partition([first])
  const watching = watch(c, 1500)
  const second = await waitActing(c, 10_000, first).catch(() => '')
  await watching
  t.not(second, first, 'the majority elected another leader')
  t.ok(c.nodes.get(second)!.election.state().term > term, 'in a higher term')
  t.not(c.nodes.get(first)!.election.state().role, 'leader', 'the isolated leader stepped down (CheckQuorum)')
  t.equal(c.nodes.get(first)!.election.state().term, term, 'and did not inflate its term (PreVote)')
  c.heal()
  await watch(c, 600)
  t.equal(c.nodes.get(first)!.election.state().term, c.nodes.get(second)!.election.state().term, 'healed: the old leader follows the new term')
  t.same(c.violations, [], 'never two acting leaders, never two leaders in a term')
})

t.test('commit needs a majority: a leader cut off alone acknowledges nothing; the next leader holds every acknowledged decision', async t => {
  const c = cluster(3, Math.random)
  t.teardown(() => c.stop())
  const first = await waitActing(c, 10_000)
  for (let i = 0; i < 5; i++) await c.decide()
  t.equal(c.acknowledged.length, 5, 'with a majority every decision commits')
  c.partition([first])
  const leader = c.nodes.get(first)!
  const term = leader.election.state().term
  const { snapshot, durable } = leader.replica.append('v', term, 'cut-off', -1)
  await durable
  await t.rejects(leader.election.commit(snapshot.seq, AbortSignal.timeout(timing.leaseMs)), { code: 'ERR_NOT_COMMITTED' }, 'the cut-off leader cannot commit')
  const second = await waitActing(c, 10_000, first)
  const log = c.nodes.get(second)!.replica.snapshot('v')
  t.same(c.acknowledged.map(a => log.entries[a.kind]), c.acknowledged.map(a => a.payload), 'the new leader holds every acknowledged decision')
  t.equal(log.entries['cut-off'], undefined, 'and not the one that was never committed')
  await c.decide()
  c.heal()
  await watch(c, 600)
  t.equal(c.nodes.get(first)!.replica.snapshot('v').entries['cut-off'], undefined, 'healed: the old leader\'s uncommitted entry is replaced by the new leader\'s log')
  t.same(c.nodes.get(first)!.replica.last('v'), c.nodes.get(second)!.replica.last('v'), 'and its log caught up with the leader\'s')
  t.same(c.violations, [])
})

t.test('election restriction: a voter whose log is behind cannot become leader', async t => {
  const c = cluster(3, Math.random)
  t.teardown(() => c.stop())
  const first = await waitActing(c, 10_000)
  const lagging = c.ids.find(id => id !== first)!
  // The lagging voter misses every append; the third voter makes the majority.
  c.partition([lagging])
  for (let i = 0; i < 3; i++) await c.decide()
  t.equal(c.acknowledged.length, 3)
  c.crash(first)
  c.heal()
  const second = await waitActing(c, 10_000, first)
  t.not(second, lagging, `the up-to-date voter leads, not ${lagging}`)
  t.same(c.violations, [])
})

// More runs (about 3 s each): ELECTION_FAULT_RUNS=100 tap --timeout 900 test/mesh/election/raft-election.test.ts
const runs = Number(process.env.ELECTION_FAULT_RUNS ?? 6)

t.test('randomized faults (drops, partitions, crashes with restart from disk): invariants hold in every run', { timeout: Math.max(60_000, runs * 10_000) }, async t => {
  for (let run = 0; run < runs; run++) {
    const seeded = createSeededRandom(1000 + run)
    const random = (): number => seeded.next()
    const size = run % 2 === 0 ? 3 : 5
    const c = cluster(size, random)
    let deciding = true
    const load = (async () => { while (deciding) { await c.decide(); await sleep(5) } })()
    try {
      await waitActing(c, 10_000)
      for (let step = 0; step < 8; step++) {
        const r = random()
        const victim = c.ids[Math.floor(random() * size)]!
        if (r < 0.3) c.partition(c.ids.filter(() => random() < 0.4))
        else if (r < 0.5) c.crash(victim)
        else if (r < 0.7) c.setDropRate(random() * 0.3)
        else { c.heal(); c.setDropRate(0); for (const id of c.ids) c.restart(id) }
        await watch(c, 150 + random() * 300)
      }
      c.heal(); c.setDropRate(0)
      for (const id of c.ids) c.restart(id)
      await waitActing(c, 10_000)
      await watch(c, 200)
    } finally {
      deciding = false
      await load
      c.stop()
    }
    t.ok(c.acknowledged.length > 0, `run ${run}: ${c.acknowledged.length} decisions acknowledged`)
    t.same(c.violations, [], `run ${run} (${size} voters, ${c.leaders.size} terms with a leader): no violation`)
  }
})
