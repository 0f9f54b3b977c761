// The election state machine in one process: in-memory transport with delays, drops, partitions and
// crashes (stop + restart from the persisted term/vote). Sampled every few ms: at most one node may act,
// and no term ever has two leaders.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { createRaftElection, type ElectionPersistence, type ElectionRequest, type ElectionResponse, type RaftElection } from '../../../mesh/election/raft-election.ts'
import { createSeededRandom } from '../../../mesh/sim/seeded-random.ts'

const timing = { heartbeatIntervalMs: 20, electionTimeoutMinMs: 150, electionTimeoutMaxMs: 250, leaseMs: 110, rpcTimeoutMs: 60 }
const quiet = { info () {}, warn () {}, debug () {} }

interface Node { id: string, election: RaftElection, disk: ElectionPersistence, controller: AbortController, up: boolean }

function cluster (size: number, random: () => number) {
  const ids = Array.from({ length: size }, (_, i) => `n${i}`)
  const cut = new Set<string>()
  const linkKey = (a: string, b: string): string => [a, b].sort().join('|')
  const nodes = new Map<string, Node>()
  const leaders = new Map<number, string>()
  const violations: string[] = []
  let dropRate = 0

  const boot = (id: string, disk: ElectionPersistence): Node => {
    const node: Node = { id, disk, controller: new AbortController(), up: true, election: undefined as unknown as RaftElection }
    node.election = createRaftElection({ self: id, voters: ids, voterSetId: 'v', ...timing }, {
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
  for (const id of ids) boot(id, { term: 0, votedFor: null })

  return {
    ids,
    nodes,
    violations,
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

// More runs (about 3 s each): ELECTION_FAULT_RUNS=100 tap --timeout 900 test/mesh/election/raft-election.test.ts
const runs = Number(process.env.ELECTION_FAULT_RUNS ?? 6)

t.test('randomized faults (drops, partitions, crashes with restart from disk): invariants hold in every run', { timeout: Math.max(60_000, runs * 10_000) }, async t => {
  for (let run = 0; run < runs; run++) {
    const seeded = createSeededRandom(1000 + run)
    const random = (): number => seeded.next()
    const size = run % 2 === 0 ? 3 : 5
    const c = cluster(size, random)
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
      c.stop()
    }
    t.same(c.violations, [], `run ${run} (${size} voters, ${c.leaders.size} terms with a leader): no violation`)
  }
})
