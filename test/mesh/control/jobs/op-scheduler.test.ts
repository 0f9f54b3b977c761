// The leader's operation scheduler (mesh/control/jobs/op-scheduler.ts) over nodes that behave like the
// agents' executors (residency, switch before run, timing, a rank that dies): order per job, one lock
// per node, gang admission, HRRS vs FCFS switches, idempotency, rollback on a lost rank, failover.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { AgentError } from '../../../../core/errors.ts'
import { createOpScheduler } from '../../../../mesh/control/jobs/op-scheduler.ts'
import type { DispatchReply, OpDispatch } from '../../../../mesh/control/jobs/op-dispatch.ts'
import type { DispatchMessage } from '../../../../mesh/control/jobs/op-wire.ts'
import type { JobRecord, JobTable } from '../../../../mesh/control/jobs/job-table.ts'

const logger = pino({ level: 'silent' })

function job (id: string, nodes: string[], state: JobRecord['state'] = 'RUNNING'): JobRecord {
  return {
    id, state, nodes, nodeNames: nodes, placement: null, submittedAtMs: 0, startedAtMs: 0, completedAtMs: null, completedBy: null, requeues: 0,
    spec: { id, nodes: nodes.length, gpusPerNode: 1, periodS: 10, iterations: 10, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2, profiled: true, switchS: 0.02, live: true },
  }
}

/** Nodes that switch and run like executors: switchMs when another job is resident, runMs per run. */
function fakeNodes (options: { runMs: number, switchMs: number, fail?: (m: DispatchMessage, peer: string) => AgentError | undefined }) {
  const resident = new Map<string, string>()
  const busy = new Map<string, number>()
  const log: Array<{ peer: string, m: DispatchMessage }> = []
  let maxBusy = 0
  const runs = new Map<string, number>()
  const dispatch: OpDispatch = {
    async send (peer, m): Promise<DispatchReply> {
      log.push({ peer, m })
      if (m.kind === 'versions') return { ranks: [{ rank: 0, versions: [0] }] }
      if (m.kind !== 'run') { if (m.kind === 'invalidate' && resident.get(peer) === m.job) resident.delete(peer); return {} }
      busy.set(peer, (busy.get(peer) ?? 0) + 1)
      maxBusy = Math.max(maxBusy, busy.get(peer)!)
      try {
        const switching = resident.get(peer) !== m.job
        const offloaded = switching && resident.has(peer) ? [{ job: resident.get(peer)!, version: m.version }] : []
        if (switching) await sleep(options.switchMs)
        resident.set(peer, m.job)
        await sleep(options.runMs)
        const err = options.fail?.(m, peer)
        if (err !== undefined) throw err
        runs.set(`${m.job}/${m.opId}`, (runs.get(`${m.job}/${m.opId}`) ?? 0) + 1)
        return { ranks: [{ rank: 0, result: { peer, opId: m.opId }, startedAtMs: Date.now(), durationMs: options.runMs }], offloaded, onloaded: switching, offloadMs: offloaded.length > 0 ? options.switchMs / 2 : 0, onloadMs: switching ? options.switchMs / 2 : 0, switchMs: switching ? options.switchMs : 0, runMs: options.runMs, bytesMoved: 0 }
      } finally {
        busy.set(peer, busy.get(peer)! - 1)
      }
    },
  }
  return { dispatch, log, runs, resident, get maxBusy () { return maxBusy } }
}

t.test('one job: operations run in submission order, one at a time, each exactly once', async t => {
  const nodes = fakeNodes({ runMs: 5, switchMs: 5 })
  const table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('a', ['n1', 'n2'])] }
  const s = createOpScheduler({ scheduler: 'hrrs', epoch: 3 }, { logger, dispatch: nodes.dispatch, table: () => table })
  t.teardown(() => s.stop())
  const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => s.submit({ job: 'a', opId: `o${i}`, name: 'step', args: { i } })))
  const order = nodes.log.filter(e => e.peer === 'n1').map(e => (e.m as { opId: string }).opId)
  t.same(order, ['o0', 'o1', 'o2', 'o3', 'o4', 'o5'], 'dispatched in submission order')
  t.equal(nodes.maxBusy, 1, 'never two operations on a node at once')
  t.same(answers.map(a => a.ranks.length), [2, 2, 2, 2, 2, 2], 'every rank of the gang answered')
  t.ok(answers[0]!.switched, 'the first operation loads the job')
  t.notOk(answers[1]!.switched, 'the next ones find it resident')
  t.ok(nodes.log.every(e => e.m.epoch === 3), 'every dispatch carries the leader\'s epoch')
  t.ok([...nodes.runs.values()].every(n => n === 2), 'each ran once per node')
})

t.test('idempotency: a repeat joins or answers the same; another op under the id is refused', async t => {
  const nodes = fakeNodes({ runMs: 20, switchMs: 1 })
  const table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('a', ['n1'])] }
  const s = createOpScheduler({ scheduler: 'hrrs', epoch: 1 }, { logger, dispatch: nodes.dispatch, table: () => table })
  t.teardown(() => s.stop())
  const first = s.submit({ job: 'a', opId: 'x', name: 'step', args: { k: 1 } })
  const joined = s.submit({ job: 'a', opId: 'x', name: 'step', args: { k: 1 } })
  t.same(await joined, await first, 'the repeat in flight joined')
  t.same(await s.submit({ job: 'a', opId: 'x', name: 'step', args: { k: 1 } }), await first, 'the repeat after it answers the same')
  t.equal(nodes.runs.get('a/x'), 1, 'ran once')
  await t.rejects(s.submit({ job: 'a', opId: 'x', name: 'step', args: { k: 2 } }), { code: 'ERR_JOB_CONFLICT' })
  await t.rejects(s.submit({ job: 'nope', opId: 'x', name: 'step' }), { code: 'ERR_JOB_NOT_FOUND' })
})

t.test('jobs on disjoint nodes run at once; jobs sharing a node take turns, switching', async t => {
  const nodes = fakeNodes({ runMs: 30, switchMs: 10 })
  const table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('a', ['n1']), job('b', ['n2']), job('c', ['n1'])] }
  const s = createOpScheduler({ scheduler: 'hrrs', epoch: 1 }, { logger, dispatch: nodes.dispatch, table: () => table })
  t.teardown(() => s.stop())
  const began = Date.now()
  await Promise.all([s.submit({ job: 'a', opId: '1', name: 'f' }), s.submit({ job: 'b', opId: '1', name: 'f' })])
  const disjointMs = Date.now() - began
  t.ok(disjointMs < 75, `a and b (different nodes) ran at once: ${disjointMs} ms for two 40 ms operations`)
  await Promise.all([s.submit({ job: 'a', opId: '2', name: 'f' }), s.submit({ job: 'c', opId: '1', name: 'f' })])
  t.equal(nodes.maxBusy, 1, 'a and c never overlapped on n1')
  const top = s.top()
  t.match(top.nodes.find(n => n.node === 'n1'), { runningOp: null })
  t.ok(top.switches >= 2, `switches counted: ${top.switches}`)
})

t.test('a head operation waiting for devices another job holds prefetches its state there, once', async t => {
  const nodes = fakeNodes({ runMs: 40, switchMs: 5 })
  const table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('a', ['n1']), job('b', ['n1', 'n2'])] }
  const s = createOpScheduler({ scheduler: 'fcfs', epoch: 2 }, { logger, dispatch: nodes.dispatch, table: () => table })
  t.teardown(() => s.stop())
  await s.submit({ job: 'b', opId: '0', name: 'f' }) // b resident on n1 and n2
  const first = s.submit({ job: 'a', opId: '1', name: 'f' })
  await sleep(5)
  const waiting = s.submit({ job: 'b', opId: '1', name: 'f' })
  await sleep(5)
  const prefetches = (): Array<{ peer: string, m: DispatchMessage }> => nodes.log.filter(e => e.m.kind === 'prefetch')
  t.same(prefetches().map(e => [e.peer, e.m.job, e.m.epoch]), [['n1', 'b', 2]], 'b waits for n1 (a runs there): a prefetch to n1 only (b is still resident on n2)')
  const runOfB = nodes.log.findIndex(e => e.m.kind === 'run' && e.m.job === 'b' && (e.m as { opId: string }).opId === '1')
  t.equal(runOfB, -1, 'sent before b\'s run')
  await Promise.all([first, waiting])
  t.equal(prefetches().length, 1, 'once per waiting operation, however often the queue is pumped')
  await s.submit({ job: 'b', opId: '2', name: 'f' })
  t.equal(prefetches().length, 1, 'an operation that runs at once sends none')
})

t.test('HRRS batches a resident job\'s operations: fewer switches than FCFS on the same arrivals', async t => {
  const switchesOf = async (scheduler: 'hrrs' | 'fcfs'): Promise<number> => {
    const nodes = fakeNodes({ runMs: 4, switchMs: 40 })
    const table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('a', ['n1']), job('b', ['n1']), job('c', ['n1'])] }
    const s = createOpScheduler({ scheduler, epoch: 1 }, { logger, dispatch: nodes.dispatch, table: () => table })
    // Each job is a controller submitting its next step when the previous answered.
    const controller = async (id: string): Promise<void> => { for (let i = 0; i < 6; i++) await s.submit({ job: id, opId: `${i}`, name: 'f' }) }
    // Warm up the measured E and C, then run.
    await Promise.all(['a', 'b', 'c'].map(controller))
    const switches = s.top().switches
    s.stop()
    return switches
  }
  const hrrs = await switchesOf('hrrs')
  const fcfs = await switchesOf('fcfs')
  t.ok(hrrs < fcfs, `HRRS ${hrrs} switches < FCFS ${fcfs}`)
})

t.test('a rank lost: the caller gets ERR_WORKER_LOST, the other nodes roll back, the lock is free again', async t => {
  let failOnce = true
  const nodes = fakeNodes({
    runMs: 5,
    switchMs: 1,
    fail: (m, peer) => {
      if (peer === 'n2' && m.kind === 'run' && m.opId === 'bad' && failOnce) { failOnce = false; return new AgentError('ERR_WORKER_LOST', 'rank 1 of job a is gone') }
      return undefined
    },
  })
  const table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('a', ['n1', 'n2'])] }
  const s = createOpScheduler({ scheduler: 'hrrs', epoch: 1 }, { logger, dispatch: nodes.dispatch, table: () => table })
  t.teardown(() => s.stop())
  await s.submit({ job: 'a', opId: 'ok', name: 'f' })
  await t.rejects(s.submit({ job: 'a', opId: 'bad', name: 'f' }), { code: 'ERR_WORKER_LOST', message: /rank 1/ })
  await sleep(10)
  t.ok(nodes.log.some(e => e.peer === 'n1' && e.m.kind === 'versions'), 'asked which versions the ranks hold')
  t.ok(nodes.log.some(e => e.peer === 'n1' && e.m.kind === 'invalidate' && e.m.version === 0), 'n1 told to roll job a back to the version every rank holds')
  t.ok(nodes.log.some(e => e.peer === 'n2' && e.m.kind === 'invalidate' && e.m.version === 0), 'the node that lost the rank too (its restarted worker loads that version)')
  const next = await s.submit({ job: 'a', opId: 'after', name: 'f' })
  t.ok(next.switched, 'the next operation reloads the job\'s state')
  t.same(s.top().nodes.map(n => n.runningOp), [null, null], 'no lock left held')
})

t.test('a job requeued: its queued operations fail with ERR_JOB_NOT_RUNNING; stop fails the rest with ERR_NOT_LEADER', async t => {
  const nodes = fakeNodes({ runMs: 30, switchMs: 1 })
  let table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('a', ['n1'])] }
  const s = createOpScheduler({ scheduler: 'hrrs', epoch: 1 }, { logger, dispatch: nodes.dispatch, table: () => table })
  const running = s.submit({ job: 'a', opId: '1', name: 'f' })
  const queued = s.submit({ job: 'a', opId: '2', name: 'f' })
  table = { ...table, jobs: [job('a', [], 'QUEUED')] }
  s.tableChanged()
  await running
  await t.rejects(queued, { code: 'ERR_JOB_NOT_RUNNING' })
  await t.rejects(s.submit({ job: 'a', opId: '3', name: 'f' }), { code: 'ERR_JOB_NOT_RUNNING' })
  table = { ...table, jobs: [job('a', ['n1'])] }
  const pending = s.submit({ job: 'a', opId: '4', name: 'f' })
  s.stop()
  await t.rejects(pending, { code: 'ERR_NOT_LEADER' })
  await t.rejects(s.submit({ job: 'a', opId: '5', name: 'f' }), { code: 'ERR_NOT_LEADER' })
})
