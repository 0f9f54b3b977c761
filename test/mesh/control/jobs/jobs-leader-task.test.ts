// The jobs leader task and the job table transitions, driven through a fake LeaderContext and a
// fake membership (no network): placement over live nodes, idempotent submits, refusals that change
// nothing, requeue on a dead node, completion by the runtime schedule and by report, takeover.
import t from 'tap'
import pino from 'pino'
import { setTimeout as sleep } from 'node:timers/promises'
import { createJobsLeaderTask, jobsDecisionKind, type SubmitAnswer } from '../../../../mesh/control/jobs/jobs-leader-task.ts'
import { defaultPlacementConfig } from '../../../../mesh/control/jobs/jobs-config.ts'
import { emptyJobTable, type JobTable } from '../../../../mesh/control/jobs/job-table.ts'
import { parseJobSpec } from '../../../../mesh/control/jobs/job-spec.ts'
import { completeJob, placeQueued, submitJob } from '../../../../mesh/control/jobs/job-scheduler.ts'
import type { LeaderCallHandler } from '../../../../mesh/election/leader-calls.ts'
import type { MembershipEvent } from '../../../../mesh/membership/membership.ts'
import type { PeerView } from '../../../../mesh/membership/mesh-views.ts'

const logger = pino({ level: 'silent' })
const peerId = (i: number): string => `12D3KooWPeer${String(i).padStart(40, 'x')}`

function peer (i: number, gpus: number, state: PeerView['state'] = 'alive'): PeerView {
  return {
    peerId: peerId(i), node: `node${i}`, state, incarnation: 0, stateSinceMs: 0, lastHeardMs: 0, addresses: [],
    gpus: { total: gpus, free: gpus }, hostPoolFreeBytes: null, nvmeFreeBytes: null, preemptible: false,
    record: { gpus: Array.from({ length: gpus }, (_, index) => ({ index })) } as unknown as PeerView['record'],
  }
}

/** A leader context whose decisions are recorded, and a membership the test edits. */
function harness (t: { teardown(fn: () => unknown): void, equal(a: unknown, b: unknown): void }, options: { desired?: Record<string, unknown>, peers?: PeerView[], failDecide?: () => boolean } = {}) {
  const decisions: Array<{ seq: number, payload: JobTable }> = []
  const handlers = new Map<string, LeaderCallHandler>()
  const listeners = new Set<(e: MembershipEvent) => void>()
  const controller = new AbortController()
  t.teardown(() => controller.abort())
  const h = {
    peers: options.peers ?? [peer(1, 8), peer(2, 8)],
    decisions,
    latest: (): JobTable => decisions.at(-1)!.payload,
    call: (method: string, body: unknown) => handlers.get(method)!(body, { peerId: peerId(1) }),
    membershipChanged: () => { for (const l of listeners) l({ peerId: peerId(9), node: 'node9', from: null, to: 'alive', incarnation: 0, reason: 'record', atMs: Date.now() }) },
    abort: () => controller.abort(),
  }
  const task = createJobsLeaderTask({ config: { ...defaultPlacementConfig, rescheduleIntervalMs: 50 }, maxTableBytes: 32 * 1024, unknownNodeGraceMs: 60_000 }, {
    logger,
    mesh: { peers: () => h.peers, subscribe: l => { listeners.add(l); return () => listeners.delete(l) } },
    self: () => ({ peerId: peerId(0), name: 'node0', gpus: 8 }),
  })
  void task.start({
    epoch: 3,
    signal: controller.signal,
    async decide (kind, payload) {
      if (options.failDecide?.() === true) throw Object.assign(new Error('lease lost'), { code: 'ERR_NOT_LEADER' })
      t.equal(kind, jobsDecisionKind)
      decisions.push({ seq: decisions.length + 1, payload: payload as JobTable })
      return { epoch: 3, seq: decisions.length }
    },
    async barrier () { return { epoch: 3, seq: decisions.length } },
    desiredState: () => options.desired ?? {},
    handleCalls (method, handler) { handlers.set(method, handler) },
  })
  return h
}

const spec = (id: string, over: Record<string, unknown> = {}) => ({ id, nodes: 1, gpusPerNode: 8, periodS: 100, iterations: 50, segments: [{ offsetS: 10, durationS: 20 }], maxSlowdown: 1.5, ...over })

t.test('a job that fits is placed in the decision that acknowledges it; resubmitting is idempotent; another spec under its id is refused', async t => {
  const h = harness(t)
  const a = await h.call('jobs.submit', { spec: spec('a') }) as SubmitAnswer
  t.equal(a.created, true)
  t.equal(a.job.state, 'RUNNING')
  t.equal(a.job.nodes.length, 1)
  t.ok(a.job.placement !== null && a.job.placement.periodSlots >= 100, 'placement with its period in slots')
  t.same(a.decision, { epoch: 3, seq: h.decisions.length }, 'answered with the decision that holds it')
  t.equal(h.latest().jobs[0]!.state, 'RUNNING')
  const count = h.decisions.length
  const again = await h.call('jobs.submit', { spec: spec('a') }) as SubmitAnswer
  t.equal(again.created, false)
  t.same(again.job, a.job, 'the existing job')
  t.equal(h.decisions.length, count, 'no new decision')
  await t.rejects(h.call('jobs.submit', { spec: spec('a', { iterations: 51 }) }), { code: 'ERR_JOB_CONFLICT', message: /exists with another spec/ })
  await t.rejects(h.call('jobs.submit', { spec: spec('b', { segments: [{ offsetS: 90, durationS: 20 }] }) }), { code: 'ERR_JOB_INVALID', message: /segments\[0\]: ends at 110 s, after the 100 s period/ })
  await t.rejects(h.call('jobs.submit', { spec: { ...spec('c'), nodse: 1 } }), { code: 'ERR_JOB_INVALID', message: /did you mean "nodes"/ })
  t.equal(h.decisions.length, count, 'refusals change nothing')
  t.same(h.latest().jobs.map(j => j.id), ['a'])
})

t.test('a job bigger than the live cluster stays QUEUED and is placed once enough nodes are alive', async t => {
  const h = harness(t)
  const big = await h.call('jobs.submit', { spec: spec('big', { nodes: 4 }) }) as SubmitAnswer
  t.equal(big.job.state, 'QUEUED', 'three nodes alive, four needed')
  const gpuHungry = await h.call('jobs.submit', { spec: spec('wide', { gpusPerNode: 16 }) }) as SubmitAnswer
  t.equal(gpuHungry.job.state, 'QUEUED', 'no node has 16 GPUs')
  const small = await h.call('jobs.submit', { spec: spec('small') }) as SubmitAnswer
  t.equal(small.job.state, 'RUNNING', 'spread-backfill places a later job that fits')
  h.peers = [...h.peers, peer(3, 8)]
  h.membershipChanged()
  await waitFor(() => h.latest().jobs.find(j => j.id === 'big')?.state === 'RUNNING')
  const placed = h.latest().jobs.find(j => j.id === 'big')!
  t.equal(new Set(placed.nodes).size, 4)
  t.equal(h.latest().jobs.find(j => j.id === 'wide')!.state, 'QUEUED')
})

t.test('jobs on a node that died are requeued and placed again; an unknown node right after takeover is not gone', async t => {
  const table = placedTable([peer(1, 8), peer(2, 8)])
  const onPeer2 = table.jobs.filter(j => j.nodes.includes(peerId(2))).map(j => j.id)
  t.ok(onPeer2.length > 0, 'some job runs on node2')
  // node2 is not known yet to the new leader: nothing moves.
  const h = harness(t, { desired: { [jobsDecisionKind]: table }, peers: [peer(1, 8)] })
  await sleep(200)
  t.ok(h.decisions.every(d => d.payload.jobs.every(j => j.state === 'RUNNING')), 'no job requeued because the leader just took over')
  h.peers = [peer(1, 8), peer(2, 8, 'dead')]
  h.membershipChanged()
  await waitFor(() => h.decisions.some(d => d.payload.jobs.some(j => j.requeues === 1)))
  await waitFor(() => h.latest().jobs.every(j => j.state === 'RUNNING'))
  for (const id of onPeer2) {
    const job = h.latest().jobs.find(j => j.id === id)!
    t.equal(job.requeues, 1, `${id} was requeued`)
    t.notOk(job.nodes.includes(peerId(2)), `${id} left the dead node`)
  }
})

t.test('the runtime schedule completes a job after its iterations; a report completes it at once', async t => {
  const h = harness(t, { peers: [] })
  const quick = await h.call('jobs.submit', { spec: spec('quick', { gpusPerNode: 1, periodS: 1, iterations: 2, segments: [{ offsetS: 0, durationS: 0.2 }], switchS: 0 }) }) as SubmitAnswer
  t.equal(quick.job.state, 'RUNNING')
  const long = await h.call('jobs.submit', { spec: spec('long', { gpusPerNode: 1 }) }) as SubmitAnswer
  t.equal(long.job.state, 'RUNNING')
  await waitFor(() => h.latest().jobs.find(j => j.id === 'quick')?.state === 'COMPLETED', 8000)
  const done = h.latest().jobs.find(j => j.id === 'quick')!
  t.equal(done.completedBy, 'elapsed')
  t.ok(done.completedAtMs! - done.startedAtMs! >= 1000, 'two 1 s periods ran')
  const reported = await h.call('jobs.complete', { id: 'long' }) as { job: { state: string, completedBy: string } }
  t.same([reported.job.state, reported.job.completedBy], ['COMPLETED', 'reported'])
  const count = h.decisions.length
  await h.call('jobs.complete', { id: 'long' })
  t.equal(h.decisions.length, count, 'completing twice is idempotent')
  await t.rejects(h.call('jobs.complete', { id: 'nope' }), { code: 'ERR_JOB_NOT_FOUND' })
  await t.rejects(h.call('jobs.complete', {}), { code: 'ERR_BAD_REQUEST' })
})

t.test('a decision that fails to publish leaves the table as it was and the caller gets the error', async t => {
  let fail = false
  const h = harness(t, { failDecide: () => fail })
  await h.call('jobs.submit', { spec: spec('a') })
  fail = true
  await t.rejects(h.call('jobs.submit', { spec: spec('b') }), { message: /lease lost/ })
  fail = false
  const b = await h.call('jobs.submit', { spec: spec('b') }) as SubmitAnswer
  t.equal(b.created, true, 'the retry on a working leader creates it')
  t.same(h.latest().jobs.map(j => j.id), ['a', 'b'])
  h.abort()
  await t.rejects(h.call('jobs.submit', { spec: spec('c') }), { code: 'ERR_NOT_LEADER' })
})

t.test('the table is bounded: active jobs and bytes; the oldest completed jobs are dropped', async t => {
  const options = { contextSwitchS: 10, maxActiveJobs: 2, maxTableBytes: 1 << 20, completedRetained: 0 }
  let table = emptyJobTable(1)
  table = submitJob(table, parseJobSpec(spec('a')), 0, options).table
  table = submitJob(table, parseJobSpec(spec('b')), 0, options).table
  t.throws(() => submitJob(table, parseJobSpec(spec('c')), 0, options), { code: 'ERR_JOBS_FULL', message: /2 queued or running/ })
  t.throws(() => submitJob(table, parseJobSpec(spec('c')), 0, { ...options, maxActiveJobs: 10, maxTableBytes: 1000 }), { code: 'ERR_JOBS_FULL', message: /bytes/ })
  t.equal(submitJob(table, parseJobSpec({ ...spec('a'), switchS: 10, profiled: true }), 0, options).created, false, 'explicit defaults are the same spec')
  const { gpusPerNode: _, ...withoutGpus } = spec('a')
  t.throws(() => submitJob(table, parseJobSpec(withoutGpus), 0, options), { code: 'ERR_JOB_CONFLICT' }, 'a spec without gpusPerNode means 1, not the stored 8')
  const running = placeQueued(table, [{ peerId: peerId(0), name: 'node0', gpus: 8 }, { peerId: peerId(1), name: 'node1', gpus: 8 }], 0, { policy: 'spread', maxJobsPerNode: 4 }).table
  const completed = completeJob(running, 'a', 5, 'reported', 0)
  t.same(completed.jobs.map(j => j.id), ['b'], 'no completed job retained with completedRetained 0')
  t.equal(submitJob(completed, parseJobSpec(spec('c')), 0, options).created, true, 'its slot is free again')
})

t.test('spread-backfill: the first job that does not fit claims its nodes; later jobs backfill them only if they end first', async t => {
  const options = { contextSwitchS: 0, maxActiveJobs: 64, maxTableBytes: 1 << 20, completedRetained: 16 }
  const nodes = [{ peerId: peerId(0), name: 'node0', gpus: 8 }, { peerId: peerId(1), name: 'node1', gpus: 8 }]
  const round = { policy: 'spread-backfill' as const, maxJobsPerNode: 4 }
  let table = emptyJobTable(1)
  for (const [id, iterations] of [['r0', 10], ['r1', 30]] as const) table = submitJob(table, parseJobSpec(spec(id, { iterations })), 0, options).table
  table = placeQueued(table, nodes, 0, round).table
  t.same(table.jobs.map(j => j.nodes.length), [1, 1], 'one resident per node')
  table = submitJob(table, parseJobSpec(spec('cold', { nodes: 2, profiled: false })), 0, options).table
  for (const [id, iterations] of [['long', 50], ['short', 5]] as const) table = submitJob(table, parseJobSpec(spec(id, { iterations })), 0, options).table
  const { placed } = placeQueued(table, nodes, 0, round)
  t.same(placed, ['short'], 'the cold-start gang needs both nodes idle: it claims them, and only the job ending before the residents do backfills')
})

/** A table with four 1-node jobs placed on node0..node2 by the real policy. */
function placedTable (peers: PeerView[]): JobTable {
  const options = { contextSwitchS: 10, maxActiveJobs: 64, maxTableBytes: 1 << 20, completedRetained: 16 }
  let table = emptyJobTable(1)
  for (const id of ['j1', 'j2', 'j3', 'j4']) table = submitJob(table, parseJobSpec(spec(id, { iterations: 500 })), Date.now(), options).table
  const nodes = [{ peerId: peerId(0), name: 'node0', gpus: 8 }, ...peers.map(p => ({ peerId: p.peerId, name: p.node, gpus: 8 }))]
  return placeQueued(table, nodes, Date.now(), { policy: 'spread', maxJobsPerNode: 4 }).table
}

async function waitFor (check: () => boolean, timeoutMs = 5000): Promise<void> {
  const began = performance.now()
  while (!check()) {
    if (performance.now() - began > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`)
    await sleep(20)
  }
}

t.test('a committed desired state that is not a job table: the task refuses to run instead of starting empty', async t => {
  const h = harness(t, { desired: { [jobsDecisionKind]: { evil: true } } })
  await sleep(100)
  await t.rejects(h.call('jobs.submit', { spec: spec('a') }), { code: 'ERR_ELECTION_STATE', message: /refuses to replace it with an empty one/ })
  await t.rejects(h.call('jobs.op', { job: 'a', opId: 'x', name: 'f' }), { code: 'ERR_ELECTION_STATE' })
  t.equal(h.decisions.length, 0, 'nothing decided over it')
})

t.test('the task owns the jobs kind: its check refuses anything but a job table', async t => {
  const task = createJobsLeaderTask({ config: defaultPlacementConfig, maxTableBytes: 32 * 1024 }, { logger, mesh: { peers: () => [], subscribe: () => () => {} }, self: () => ({ peerId: peerId(0), name: 'node0', gpus: 8 }) })
  const check = task.kinds![jobsDecisionKind]!
  t.match(check({ evil: true }), /slotS|Expected/, 'a stray object is refused with the reason')
  t.equal(check(emptyJobTable(1)), undefined, 'a job table passes')
})

t.test('numbers that reach the horizon and the schedulers are bounded: a period of 1e308 s is refused, not queued', async t => {
  t.throws(() => parseJobSpec(spec('huge', { periodS: 1e308 })), { code: 'ERR_JOB_INVALID', message: /periodS/ })
  t.throws(() => parseJobSpec(spec('many', { iterations: 1e12 })), { code: 'ERR_JOB_INVALID', message: /iterations/ })
  t.throws(() => parseJobSpec(spec('slow', { maxSlowdown: 1e9 })), { code: 'ERR_JOB_INVALID', message: /maxSlowdown/ })
  t.throws(() => parseJobSpec(spec('switch', { switchS: 1e9 })), { code: 'ERR_JOB_INVALID', message: /switchS/ })
  t.ok(parseJobSpec(spec('week', { periodS: 7 * 24 * 3600, segments: [{ offsetS: 0, durationS: 10 }] })), 'a week-long period is fine')
})

t.test('a backfill round tries at most backfillDepth jobs that do not fit; a round shares one view per GPU class', async t => {
  const nodes = [{ peerId: 'p1', name: 'n1', gpus: 8 }, { peerId: 'p2', name: 'n2', gpus: 1 }]
  const options = { contextSwitchS: 10, maxActiveJobs: 64, maxTableBytes: 1 << 20, completedRetained: 4 }
  let table: JobTable = emptyJobTable(1)
  for (const [id, over] of [['wide-1', { nodes: 3 }], ['wide-2', { nodes: 3 }], ['a', {}], ['b', { gpusPerNode: 1 }], ['c', {}]] as const) {
    table = submitJob(table, parseJobSpec(spec(id, over)), 0, options).table
  }
  const round = (backfillDepth: number) => placeQueued(table, nodes, 0, { policy: 'spread-backfill', maxJobsPerNode: 2, backfillDepth })
  t.same(round(2).placed, [], 'two misses (the wide jobs) end the round before a')
  const three = round(3)
  t.same(three.placed.slice(0, 2), ['a', 'b'], 'from depth 3 on, a and b are placed')
  const perNode = (peer: string) => three.table.jobs.filter(j => j.state === 'RUNNING' && j.nodes.includes(peer)).length
  t.same([perNode('p1'), three.table.jobs.find(j => j.id === 'b')!.nodes], [2, ['p1']], 'a and b on the 8-GPU node')
  t.equal(three.table.jobs.find(j => j.id === 'c')!.state, 'QUEUED', 'c (8 GPUs) is not placed: the shared view already counts a and b on the only node it fits (maxJobsPerNode 2)')
})
