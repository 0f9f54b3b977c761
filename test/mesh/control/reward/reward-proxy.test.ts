/**
 * The leader's reward proxy from stub components (a settable clock, no
 * network): EBF order across batches, idempotent submits, stage timeouts,
 * lost leases retried once then failed, a repeated fetch and a delayed
 * heartbeat, results and acknowledgements, and bad input refused without
 * partial state.
 */
import t from 'tap'
import pino from 'pino'
import { setTimeout as sleep } from 'node:timers/promises'
import { createRewardProxy, type RewardProxy } from '../../../../mesh/control/reward/reward-proxy.ts'
import { createRewardScalingPolicy } from '../../../../mesh/policies/reward-scaling/policies.ts'
import type { RewardStageSpec } from '../../../../mesh/control/reward/reward-config.ts'
import { requestDigest, type RewardLease } from '../../../../mesh/control/reward/reward-messages.ts'
import type { TaskHistory } from '../../../../mesh/control/reward/planner-history.ts'

const stages: RewardStageSpec[] = [
  { name: 'verify', resource: 'cpu', command: ['true'], coresPerWorker: 1, timeoutMs: 10_000 },
  { name: 'judge', resource: 'gpu', command: ['true'], coresPerWorker: 1, timeoutMs: 80 },
]

function proxyWith (overrides: { now?: () => number, maxPendingRequests?: number, history?: ReadonlyMap<string, TaskHistory> } = {}): { proxy: RewardProxy, boundaries: string[] } {
  const boundaries: string[] = []
  const proxy = createRewardProxy({
    stages, timeoutReward: -1, maxPayloadBytes: 1024, maxPendingRequests: overrides.maxPendingRequests ?? 100, leaseTimeoutMs: 1000, resultRetentionMs: 60_000, maxExtraDelayMs: 1000,
    policy: createRewardScalingPolicy('distrs'), ...(overrides.history !== undefined ? { history: overrides.history } : {}),
  }, { logger: pino({ level: 'silent' }), now: overrides.now ?? (() => performance.now()), onBatchBoundary: (r, task, b) => boundaries.push(`${r} ${task}#${b}`), plan: () => null, leaderId: 'leader' })
  return { proxy, boundaries }
}

const never = new AbortController().signal
const fetch = async (proxy: RewardProxy, stage: string, workerId = 'n1/w/0', node = 'n1'): Promise<RewardLease | null> =>
  (await proxy.fetch({ node, workerId, stage, waitMs: 0 }, never)).lease

t.test('earliest batch first: a later batch whose estimated completion is earlier goes first', async t => {
  let clock = 0
  const { proxy, boundaries } = proxyWith({ now: () => clock })
  // Task slow has history of a 10 s batch; task fast of a 1 s batch.
  for (const [task, ms] of [['slow', 10_000], ['fast', 1000]] as const) {
    proxy.batchStart({ task, batch: 0, size: 1 })
    proxy.submit({ task, batch: 0, requestId: `${task}-0`, payload: {} }, 'agent')
    const lease = (await fetch(proxy, 'verify'))!
    clock += ms
    proxy.complete({ workerId: 'n1/w/0', leaseId: lease.leaseId, reward: 1 })
  }
  t.same(boundaries.filter(b => b.startsWith('batch-complete')), ['batch-complete slow#0', 'batch-complete fast#0'])
  proxy.batchStart({ task: 'slow', batch: 1, size: 2 })
  clock += 100
  proxy.batchStart({ task: 'fast', batch: 1, size: 2 })
  proxy.submit({ task: 'slow', batch: 1, requestId: 'slow-1a', payload: {} }, 'agent')
  proxy.submit({ task: 'fast', batch: 1, requestId: 'fast-1a', payload: {} }, 'agent')
  proxy.submit({ task: 'slow', batch: 1, requestId: 'slow-1b', payload: {} }, 'agent')
  proxy.submit({ task: 'fast', batch: 1, requestId: 'fast-1b', payload: {} }, 'agent')
  const order = []
  for (let i = 0; i < 4; i++) order.push((await fetch(proxy, 'verify', `n1/w/${i}`))!.requestId)
  t.same(order, ['fast-1a', 'fast-1b', 'slow-1a', 'slow-1b'], 'EBF, FCFS within a batch')
  t.equal(await fetch(proxy, 'verify', 'n1/w/9'), null, 'queue empty')
  proxy.stop()
})

t.test('a duplicate is a request submitted before by another call: the same call asked again is not one', async t => {
  const { proxy } = proxyWith({})
  proxy.submit({ task: 't', batch: 9, batchSize: 1, requestId: 's', payload: 1, submission: 'call-1' }, 'x')
  t.match(proxy.submit({ task: 't', batch: 9, requestId: 's', payload: 1, submission: 'call-1' }, 'x'), { duplicate: false }, 'the same submit call asked again (answer lost) is not a duplicate')
  t.match(proxy.submit({ task: 't', batch: 9, requestId: 's', payload: 1, submission: 'call-2' }, 'x'), { duplicate: true }, 'another call of the same agent is')
  t.match(proxy.submit({ task: 't', batch: 9, requestId: 's', payload: 1, submission: 'call-1' }, 'y'), { duplicate: true }, 'and so is the same id from another agent')
  t.throws(() => proxy.submit({ task: 't', batch: 9, requestId: 's', payload: 1, submission: 'bad id!' }, 'x'), { code: 'ERR_BAD_REQUEST', message: /submission/ })
})

t.test('idempotent submit; conflicts, bad input and a full proxy are refused without state', async t => {
  const { proxy } = proxyWith({ maxPendingRequests: 5 })
  t.throws(() => proxy.submit({ task: 't', batch: 0, requestId: 'a', payload: 1 }, 'x'), { code: 'ERR_BAD_REQUEST', message: /batch-start hint/ })
  t.same(proxy.submit({ task: 't', batch: 0, batchSize: 3, requestId: 'a', payload: 1 }, 'x'), { requestId: 'a', state: 'queued', duplicate: false }, 'batchSize starts the batch')
  t.same(proxy.submit({ task: 't', batch: 0, requestId: 'a', payload: 1 }, 'x'), { requestId: 'a', state: 'queued', duplicate: true })
  t.throws(() => proxy.submit({ task: 't', batch: 0, requestId: 'a', payload: 2 }, 'x'), { code: 'ERR_REWARD_CONFLICT' })
  t.throws(() => proxy.submit({ task: 't', batch: 0, requestId: 'b', payload: 'x'.repeat(2000) }, 'x'), { code: 'ERR_BODY_TOO_LARGE', message: /maxPayloadBytes/ })
  t.throws(() => proxy.submit({ task: 'bad task', batch: -1, requestId: '', payload: 1, extra: 1 }, 'x'), { code: 'ERR_BAD_REQUEST', message: /task.*\n.*batch/s })
  await t.rejects(proxy.fetch({ node: 'n', workerId: 'w', stage: 'nope', waitMs: 0 }, never), { code: 'ERR_BAD_REQUEST', message: /unknown stage "nope"; the stages are verify, judge/ })
  proxy.submit({ task: 't', batch: 0, requestId: 'b', payload: 1 }, 'x')
  proxy.submit({ task: 't', batch: 0, requestId: 'c', payload: 1 }, 'x')
  t.throws(() => proxy.submit({ task: 't', batch: 0, requestId: 'd', payload: 1 }, 'x'), { message: /already has its 3 requests/ })
  proxy.batchStart({ task: 'u', batch: 0, size: 9 })
  proxy.submit({ task: 'u', batch: 0, requestId: 'u1', payload: 1 }, 'x')
  proxy.submit({ task: 'u', batch: 0, requestId: 'u2', payload: 1 }, 'x')
  t.throws(() => proxy.submit({ task: 'u', batch: 0, requestId: 'u3', payload: 1 }, 'x'), { code: 'ERR_REWARD_FULL' })
  t.equal(proxy.status().requests.held, 5, 'nothing half-stored by the refusals')
  proxy.stop()
})

t.test('stages in order; the last stage needs a reward; a timeout gives the timeout reward', async t => {
  const { proxy } = proxyWith()
  proxy.batchStart({ task: 't', batch: 0, size: 2 })
  proxy.submit({ task: 't', batch: 0, requestId: 'r1', payload: { p: 1 } }, 'x')
  proxy.submit({ task: 't', batch: 0, requestId: 'r2', payload: { p: 2 } }, 'x')
  const a = (await fetch(proxy, 'verify'))!
  proxy.complete({ workerId: 'n1/w/0', leaseId: a.leaseId, output: { checked: true } })
  t.throws(() => proxy.complete({ workerId: 'n1/w/0', leaseId: a.leaseId, reward: 1 }), { code: 'ERR_REWARD_LEASE_LOST' }, 'a lease completes once')
  const b = (await fetch(proxy, 'judge', 'n1/g/0'))!
  t.same([b.requestId, b.stage, b.input, b.lastStage], ['r1', 'judge', { checked: true }, true])
  t.throws(() => proxy.complete({ workerId: 'n1/g/0', leaseId: b.leaseId, output: 1 }), { code: 'ERR_BAD_REQUEST', message: /needs a reward/ })
  t.throws(() => proxy.complete({ workerId: 'other', leaseId: b.leaseId, reward: 1 }), { code: 'ERR_REWARD_LEASE_LOST' }, 'only its holder completes it')
  proxy.complete({ workerId: 'n1/g/0', leaseId: b.leaseId, reward: 0.5, output: 'ok' })
  const c = (await fetch(proxy, 'verify'))!
  proxy.complete({ workerId: 'n1/w/0', leaseId: c.leaseId, output: null })
  await fetch(proxy, 'judge', 'n1/g/0') // held past the 80 ms stage timeout
  await sleep(150)
  const all = (await proxy.awaitResults({ ids: ['r1', 'r2'], ack: [], waitMs: 0 }, never)).results
  const byId = Object.fromEntries(all.map(r => [r.requestId, r]))
  t.match(byId.r1, { status: 'ok', reward: 0.5, output: 'ok' })
  t.match(byId.r2, { status: 'timeout', reward: -1, stage: 'judge', message: /longer than 80 ms/ })
  t.same(proxy.status().batches, [], 'the batch completed')
  proxy.stop()
})

t.test('a lost worker\'s request is retried once on another worker, then fails', async t => {
  const { proxy } = proxyWith()
  proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 0, stages: ['verify'], workers: [{ workerId: 'w1', stage: 'verify', pid: 1 }, { workerId: 'w2', stage: 'verify', pid: 2 }] })
  proxy.batchStart({ task: 't', batch: 0, size: 1 })
  proxy.submit({ task: 't', batch: 0, requestId: 'r', payload: {} }, 'x')
  const first = (await fetch(proxy, 'verify', 'w1'))!
  t.equal(first.attempt, 1)
  proxy.workerLost({ node: 'n1', workerId: 'w1', why: 'exit code 3' })
  t.equal(await fetch(proxy, 'verify', 'w1'), null, 'not given back to the worker that lost it while another one runs')
  const second = (await fetch(proxy, 'verify', 'w2'))!
  t.equal(second.attempt, 2)
  // w2 vanishes from its agent's report: lost again → failed.
  proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 0, stages: ['verify'], workers: [{ workerId: 'w1', stage: 'verify', pid: 3 }] })
  const { results } = await proxy.awaitResults({ ids: ['r'], ack: [], waitMs: 0 }, never)
  t.match(results, [{ requestId: 'r', status: 'failed', reward: -1, message: /lost its worker twice/ }])
  proxy.stop()
})

t.test('a result is kept until the trainer fetched it (through any agent), then resultRetentionMs more', async t => {
  let clock = 0
  const { proxy } = proxyWith({ now: () => clock })
  proxy.batchStart({ task: 't', batch: 0, size: 3 })
  for (const id of ['a', 'b', 'c']) proxy.submit({ task: 't', batch: 0, requestId: id, payload: { id } }, 'n1')
  for (const id of ['a', 'b', 'c']) {
    const lease = (await fetch(proxy, 'verify', `w-${id}`))!
    proxy.complete({ workerId: `w-${id}`, leaseId: lease.leaseId, output: 1 })
    const judged = (await fetch(proxy, 'judge', `g-${id}`))!
    proxy.complete({ workerId: `g-${id}`, leaseId: judged.leaseId, reward: 0.5 })
  }
  // The submitting agent stored all three (it used to acknowledge them on storing, and the leader forgot them).
  const stored = await proxy.awaitResults({ ids: ['a', 'b', 'c'], ack: [], waitMs: 0 }, never)
  t.equal(stored.results.length, 3)
  // The trainer fetched a through the submitting agent, which reports it.
  await proxy.awaitResults({ ids: [], ack: ['a'], waitMs: 0 }, never)
  clock += 30_000
  proxy.tick()
  t.match(await proxy.result({ requestId: 'b', waitMs: 0 }, never), { state: 'done', result: { requestId: 'b', reward: 0.5 } }, 'b through another agent (the submitting agent may be gone)')
  t.match(proxy.submit({ task: 't', batch: 0, requestId: 'c', payload: { id: 'c' } }, 'n2'), { duplicate: true, state: 'done', result: { requestId: 'c', reward: 0.5 } }, 'c resubmitted through another agent: its result')
  t.throws(() => proxy.submit({ task: 't', batch: 0, requestId: 'c', payload: { id: 'other' } }, 'n2'), { code: 'ERR_REWARD_CONFLICT' })
  clock += 30_001
  proxy.tick()
  t.same((await proxy.awaitResults({ ids: ['a', 'b', 'c'], ack: [], waitMs: 0 }, never)).unknown, ['a'], 'a forgotten resultRetentionMs (60 s) after its fetch; b (fetched 30 s ago) and c (never fetched) kept')
  clock += 3_600_000
  proxy.tick()
  t.same((await proxy.awaitResults({ ids: ['b', 'c'], ack: [], waitMs: 0 }, never)).unknown, ['b', 'c'], 'c forgotten after unfetchedResultRetentionMs (default 1 h)')
  await t.rejects(proxy.result({ requestId: 'c', waitMs: 0 }, never), { code: 'ERR_NOT_FOUND' })
  await t.rejects(proxy.result({ requestId: 'c', waitMs: '1' }, never), { code: 'ERR_BAD_REQUEST' }, 'bad input: a coded error')
  proxy.stop()
})

t.test('a new leader keeps the results a submitting agent hands it (resync), for fetches and resubmissions through any agent', async t => {
  const { proxy } = proxyWith()
  const result = { requestId: 'r', task: 't', batch: 4, status: 'ok' as const, reward: 0.25, output: { x: 1 }, stageS: [0.1, 0.2] }
  proxy.resync({ batches: [{ task: 't', batch: 4, size: 1, doneIds: ['r'] }], results: [{ result, digest: requestDigest({ task: 't', batch: 4, payload: { p: 1 } }) }] })
  t.same(await proxy.result({ requestId: 'r', waitMs: 0 }, never), { requestId: 'r', state: 'done', result })
  t.match(proxy.submit({ task: 't', batch: 4, requestId: 'r', payload: { p: 1 } }, 'n2'), { duplicate: true, state: 'done', result })
  t.throws(() => proxy.submit({ task: 't', batch: 4, requestId: 's', payload: {}, batchSize: 1 }, 'n2'), { code: 'ERR_BAD_REQUEST', message: /already completed/ }, 'the batch is known to have completed')
  t.throws(() => proxy.resync({ batches: [], results: [{ result: { ...result, status: 'great' }, digest: 'x' }] }), { code: 'ERR_BAD_REQUEST' }, 'a malformed result is refused')
  proxy.stop()
})

t.test('a fetch repeated by the same worker process gets its lease again; a restarted process loses it', async t => {
  const { proxy } = proxyWith()
  proxy.batchStart({ task: 't', batch: 0, size: 2 })
  proxy.submit({ task: 't', batch: 0, requestId: 'r', payload: {} }, 'x')
  proxy.submit({ task: 't', batch: 0, requestId: 's', payload: {} }, 'x')
  const ask = async (pid: number): Promise<RewardLease | null> => (await proxy.fetch({ node: 'n1', workerId: 'w1', stage: 'verify', waitMs: 0, pid }, never)).lease
  const first = (await ask(100))!
  t.same(await ask(100), first, 'the answer to the first fetch was lost: the same lease again, no second lease')
  t.same(proxy.status().requests, { held: 2, queued: 1, running: 1, done: 0 })
  const restarted = (await ask(101))!
  t.not(restarted.leaseId, first.leaseId, 'a new process of the worker gets a new lease')
  t.throws(() => proxy.complete({ workerId: 'w1', leaseId: first.leaseId, reward: 1 }), { code: 'ERR_REWARD_LEASE_LOST' }, 'the old process\'s lease is gone')
  t.same(proxy.status().requests, { held: 2, queued: 1, running: 1, done: 0 }, 'its request is queued again')
  const again = (await proxy.fetch({ node: 'n1', workerId: 'w2', stage: 'verify', waitMs: 0 }, never)).lease!
  t.equal(again.requestId, first.requestId)
  t.equal(again.attempt, 2, 'retried once')
  proxy.stop()
})

t.test('a worker\'s new fetch ends its earlier one still waiting: the lease goes to the caller that is there', async t => {
  const { proxy } = proxyWith()
  proxy.batchStart({ task: 't', batch: 0, size: 1 })
  const earlier = proxy.fetch({ node: 'n1', workerId: 'w1', stage: 'verify', waitMs: 5000 }, never)
  const later = proxy.fetch({ node: 'n1', workerId: 'w1', stage: 'verify', waitMs: 5000 }, never)
  t.same(await earlier, { lease: null }, 'the earlier fetch ends with no lease')
  proxy.submit({ task: 't', batch: 0, requestId: 'r', payload: {} }, 'x')
  t.equal((await later).lease?.requestId, 'r')
  t.same(proxy.status().requests, { held: 1, queued: 0, running: 1, done: 0 }, 'one lease')
  proxy.stop()
})

t.test('a heartbeat built before a fetch does not cost that fetch its lease; an older heartbeat is ignored', async t => {
  const { proxy } = proxyWith()
  const report = (seq: number, workers: string[]): unknown => proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 0, stages: ['verify'], seq, workers: workers.map((workerId, i) => ({ workerId, stage: 'verify', pid: i + 1 })) })
  report(10, [])
  proxy.batchStart({ task: 't', batch: 0, size: 1 })
  proxy.submit({ task: 't', batch: 0, requestId: 'r', payload: {} }, 'x')
  const lease = (await proxy.fetch({ node: 'n1', workerId: 'w1', stage: 'verify', waitMs: 0, reportSeq: 11 }, never)).lease!
  report(11, []) // built before the worker started, delivered after its fetch
  t.equal(proxy.status().requests.running, 1, 'the lease stands')
  report(13, ['w1'])
  report(12, []) // overtaken by seq 13
  t.equal(proxy.status().requests.running, 1, 'an out-of-order report changes nothing')
  t.same(proxy.status().nodes.map(n => n.workers), [{ verify: 1 }], 'the newer report stays')
  report(14, [])
  t.equal(proxy.status().requests.queued, 1, 'a report built after the fetch without the worker: the lease is lost, the request queued again')
  t.equal(lease.attempt, 1)
  proxy.stop()
})

t.test('an agent that stops reporting loses its leases; long-polls wake and end', async t => {
  let clock = 0
  const { proxy } = proxyWith({ now: () => clock })
  proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 0, stages: ['verify'], workers: [{ workerId: 'w1', stage: 'verify', pid: 1 }] })
  proxy.batchStart({ task: 't', batch: 0, size: 2 })
  const waiting = proxy.fetch({ node: 'n2', workerId: 'w9', stage: 'verify', waitMs: 5000 }, never)
  proxy.submit({ task: 't', batch: 0, requestId: 'r', payload: {} }, 'x')
  t.equal((await waiting).lease?.requestId, 'r', 'a waiting fetch gets the request at once')
  proxy.submit({ task: 't', batch: 0, requestId: 's', payload: {} }, 'x')
  t.equal((await fetch(proxy, 'verify', 'w1'))?.requestId, 's')
  clock += 1500
  proxy.tick()
  t.equal(proxy.status().stages[0]!.queued, 2, 'both leases lost: n1 went silent, n2 never reported')
  t.same(proxy.nodes(), [], 'a silent agent offers no capacity')
  const abort = new AbortController()
  const poll = proxy.awaitResults({ ids: ['r'], ack: [], waitMs: 10_000 }, abort.signal)
  await sleep(10)
  abort.abort()
  t.same(await poll, { results: [], unknown: [], retried: ['r'] }, 'an aborted wait answers what there is (r lost its worker once)')
  proxy.stop()
})

t.test('resync after a leader change: done ids count toward the batch, which completes', async t => {
  const { proxy, boundaries } = proxyWith()
  proxy.resync({ batches: [{ task: 't', batch: 4, size: 2, doneIds: ['a'] }] })
  proxy.submit({ task: 't', batch: 4, requestId: 'b', payload: {} }, 'x')
  t.throws(() => proxy.submit({ task: 't', batch: 4, requestId: 'c', payload: {} }, 'x'), { message: /already has its 2/ })
  const lease = (await fetch(proxy, 'verify'))!
  proxy.complete({ workerId: 'n1/w/0', leaseId: lease.leaseId, reward: 1, output: 'early' })
  t.same(boundaries, ['batch-start t#4', 'batch-arrival t#4', 'batch-complete t#4'])
  t.throws(() => proxy.batchStart({ task: 't', batch: 4, size: 2 }), { message: /already completed/ })
  t.throws(() => proxy.resync({ batches: [{ task: 't' }] }), { code: 'ERR_BAD_REQUEST' })
  proxy.stop()
})

t.test('a batch spanning a leader change keeps its start, its priority and every request in its history (resync)', async t => {
  let clock = 100_000
  // The desired state's history: task t's batch 3, whose last request ended 3 s after its start.
  const history = new Map<string, TaskHistory>([['t', { batch: 3, requests: [{ offsetS: 0, stageS: [0.5, 0] }, { offsetS: 1, stageS: [2, 0] }] }]])
  const { proxy } = proxyWith({ now: () => clock, history })
  t.same(proxy.history(), [{ task: 't', history: history.get('t') }], 'a new epoch starts from the history it is given')
  // Batch 4 started 5 s ago under the old leader, where request a finished (arrived 0.2 s in, 0.3 s at verify).
  proxy.resync({ batches: [{ task: 't', batch: 4, size: 2, doneIds: ['a'], ageMs: 5000, finished: [{ requestId: 'a', offsetMs: 200, stageS: [0.3, 0] }] }] })
  t.match(proxy.plannerSnapshot(1).batches, [{ task: 't', index: 4, startS: 95, priorityS: 98, completed: 1 }], 'its start as the agent saw it, its priority from the history (Eq. 1–2)')
  proxy.submit({ task: 't', batch: 4, requestId: 'b', payload: {} }, 'x')
  const lease = (await fetch(proxy, 'verify'))!
  clock += 1000
  proxy.complete({ workerId: 'n1/w/0', leaseId: lease.leaseId, reward: 1 })
  t.same(proxy.history(), [{ task: 't', history: { batch: 4, requests: [{ offsetS: 0.2, stageS: [0.3, 0] }, { offsetS: 5, stageS: [1, 0] }] } }],
    'the history of batch 4 holds the request finished before the change, not only the one finished after')
  // A submitting agent hands over results of an older completed batch: the history stays batch 4.
  proxy.resync({ batches: [{ task: 't', batch: 2, size: 1, doneIds: ['z'], ageMs: 1, finished: [{ requestId: 'z', offsetMs: 0, stageS: [9, 0] }] }] })
  t.equal(proxy.history()[0]!.history.batch, 4, 'an older batch completed again by a resync does not replace it')
  t.match(proxy.status().tasks, [{ task: 't', historyRequests: 2, historyBatch: 4, historyStageMs: [650, null] }], 'the status names the history\'s batch and its mean stage times (verify: none ran it)')
  proxy.stop()
})

t.test('decision points: the hint (workers warm up), the first request of a batch, its completion', async t => {
  const { proxy, boundaries } = proxyWith()
  proxy.batchStart({ task: 't', batch: 0, size: 2 })
  t.same(boundaries, ['batch-start t#0'])
  proxy.submit({ task: 't', batch: 0, requestId: 'a', payload: {} }, 'x')
  proxy.submit({ task: 't', batch: 0, requestId: 'b', payload: {} }, 'x')
  proxy.submit({ task: 't', batch: 0, requestId: 'a', payload: {} }, 'x')
  t.same(boundaries, ['batch-start t#0', 'batch-arrival t#0'], 'one arrival decision per batch, at its first request')
  proxy.submit({ task: 'u', batch: 3, batchSize: 1, requestId: 'c', payload: {} }, 'x')
  t.same(boundaries.slice(2), ['batch-start u#3', 'batch-arrival u#3'], 'a batch started by its first request: both')
  proxy.stop()
})

t.test('a worker lost after its stage timeout ran out: the request gets the timeout result, not a retry', async t => {
  let clock = 0
  const { proxy } = proxyWith({ now: () => clock })
  const report = (workers: string[]): unknown => proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 1, stages: ['verify', 'judge'], workers: workers.map((workerId, i) => ({ workerId, stage: 'judge', pid: i + 1 })) })
  report(['g1', 'g2'])
  proxy.batchStart({ task: 't', batch: 0, size: 3 })
  for (const id of ['r', 's', 'u']) {
    proxy.submit({ task: 't', batch: 0, requestId: id, payload: {} }, 'x')
    proxy.complete({ workerId: 'n1/w/0', leaseId: (await fetch(proxy, 'verify'))!.leaseId, output: id })
  }
  // judge's timeout is 80 ms (the timer is unref'd and the clock is ours: it never fires here).
  t.equal((await fetch(proxy, 'judge', 'g1'))?.requestId, 'r')
  clock += 80
  proxy.workerLost({ node: 'n1', workerId: 'g1', why: 'killed' })
  t.equal((await fetch(proxy, 'judge', 'g2'))?.requestId, 's', 'r is not queued again')
  clock += 2000 // past leaseTimeoutMs (1000) and s's stage timeout: its agent went silent
  proxy.tick()
  t.equal((await fetch(proxy, 'judge', 'g3'))?.requestId, 'u', 's is not queued again either')
  clock += 10
  proxy.workerLost({ node: 'n1', workerId: 'g3', why: 'exit code 1' })
  const { results } = await proxy.awaitResults({ ids: ['r', 's', 'u'], ack: [], waitMs: 0 }, never)
  t.match(results, [
    { requestId: 'r', status: 'timeout', reward: -1, stage: 'judge', message: /longer than 80 ms/ },
    { requestId: 's', status: 'timeout', reward: -1, stage: 'judge' },
  ])
  t.equal(proxy.status().stages[1]!.queued, 1, 'u, lost within its timeout, is retried')
  proxy.stop()
})

t.test('the one retry after a lost worker survives a leader change: a resubmission marked retried starts at attempt 2', async t => {
  const { proxy } = proxyWith()
  proxy.batchStart({ task: 't', batch: 0, size: 2 })
  proxy.submit({ task: 't', batch: 0, requestId: 'r', payload: {}, retried: true }, 'x')
  proxy.submit({ task: 't', batch: 0, requestId: 's', payload: {} }, 'x')
  t.same((await proxy.awaitResults({ ids: ['r', 's'], ack: [], waitMs: 0 }, never)).retried, ['r'], 'await lists it for the submitting agent')
  const lease = (await fetch(proxy, 'verify', 'w1'))!
  t.same([lease.requestId, lease.attempt], ['r', 2])
  proxy.workerLost({ node: 'n1', workerId: 'w1', why: 'segfault' })
  const { results } = await proxy.awaitResults({ ids: ['r'], ack: [], waitMs: 0 }, never)
  t.match(results, [{ requestId: 'r', status: 'failed', message: /lost its worker twice/ }])
  t.throws(() => proxy.submit({ task: 't', batch: 0, requestId: 'x', payload: {}, retried: 'yes' }, 'x'), { code: 'ERR_BAD_REQUEST' })
  proxy.stop()
})

t.test('a request queued at a stage the plan gives no worker asks for a plan, and waits no longer than the stage timeout', async t => {
  const starved: string[] = []
  const plan = { workers: { n1: { verify: 1 } }, wanted: { verify: 1, judge: 0 }, unplaced: {} }
  const proxy = createRewardProxy({
    stages, timeoutReward: -1, maxPayloadBytes: 1024, maxPendingRequests: 100, leaseTimeoutMs: 1000, resultRetentionMs: 60_000, maxExtraDelayMs: 1000,
    policy: createRewardScalingPolicy('distrs'),
  }, {
    logger: pino({ level: 'silent' }), now: () => performance.now(), onBatchBoundary: () => {}, plan: () => plan, leaderId: 'leader',
    onStageWithoutWorkers: (stage, queued) => starved.push(`${stage}:${queued}`),
  })
  proxy.batchStart({ task: 'a', batch: 0, size: 1 })
  proxy.submit({ task: 'a', batch: 0, requestId: 'r', payload: {} }, 'agent')
  t.same(starved, [], 'verify has a planned worker: nothing asked')
  const lease = (await fetch(proxy, 'verify'))!
  proxy.complete({ workerId: 'n1/w/0', leaseId: lease.leaseId, output: { parsed: true } })
  t.same(starved, ['judge:1'], 'queued at judge, which the plan gives no worker: a plan is asked for')
  proxy.tick()
  t.same(starved, ['judge:1', 'judge:1'], 'and again at every tick while it waits')
  t.same((await proxy.awaitResults({ ids: ['r'], ack: [], waitMs: 0 }, never)).results, [], 'still waiting within judge\'s 80 ms timeout')
  // judge's timeout is 80 ms: the request ends with the timeout result although no worker ever took it.
  await sleep(100)
  proxy.tick()
  const { results } = await proxy.awaitResults({ ids: ['r'], ack: [], waitMs: 0 }, never)
  t.match(results, [{ requestId: 'r', status: 'timeout', reward: -1, stage: 'judge', message: /waited longer than the 80 ms timeout of stage judge in its queue, with no worker planned/ }])
  t.equal(proxy.status().stages[1]!.queued, 0, 'no longer queued')

  // A stage with a planned worker: waiting (for it to start, or behind others) is not cut short.
  plan.workers.n1 = { verify: 1, judge: 1 } as typeof plan.workers.n1
  proxy.batchStart({ task: 'a', batch: 1, size: 1 })
  proxy.submit({ task: 'a', batch: 1, requestId: 's', payload: {} }, 'agent')
  const s1 = (await fetch(proxy, 'verify'))!
  proxy.complete({ workerId: 'n1/w/0', leaseId: s1.leaseId, output: 1 })
  await sleep(100)
  proxy.tick()
  t.same((await proxy.awaitResults({ ids: ['s'], ack: [], waitMs: 0 }, never)).results, [], 'queued past the timeout at a stage with a planned worker: still queued')
  proxy.stop()
})

t.test('cancel: queued and running requests end as cancelled, a whole batch ends, bad input changes nothing', async t => {
  let clock = 0
  const { proxy, boundaries } = proxyWith({ now: () => clock })
  proxy.batchStart({ task: 'c', batch: 0, size: 4 })
  for (const id of ['c0', 'c1', 'c2']) proxy.submit({ task: 'c', batch: 0, requestId: id, payload: {} }, 'agent')
  const lease = (await fetch(proxy, 'verify'))! // c0 runs
  clock += 50
  const second = (await fetch(proxy, 'verify', 'n1/w/1'))! // c1 runs and finishes
  proxy.complete({ workerId: 'n1/w/1', leaseId: second.leaseId, output: 'x' })
  const judged = (await fetch(proxy, 'judge', 'n1/g/0'))!
  proxy.complete({ workerId: 'n1/g/0', leaseId: judged.leaseId, reward: 0.5 })

  // Bad input: nothing cancelled.
  for (const bad of [{ task: 'c' }, { task: 'c', batch: 0, requestIds: [] }, { task: 'c', batch: 0, requestIds: ['c0', 'c0'] }, { task: 'c', batch: 0, extra: 1 }, { task: 'c', batch: '0' }]) {
    t.throws(() => proxy.cancel(bad), { code: 'ERR_BAD_REQUEST' }, JSON.stringify(bad))
  }
  t.throws(() => proxy.cancel({ task: 'c', batch: 7 }), { code: 'ERR_NOT_FOUND', message: /no batch 7 of task c/ })
  t.equal(proxy.status().requests.held, 3, 'nothing changed by the refusals')

  t.same(proxy.cancel({ task: 'c', batch: 0, requestIds: ['c0', 'c1', 'zz'] }), { cancelled: ['c0'], finished: ['c1'], unknown: ['zz'] })
  t.throws(() => proxy.complete({ workerId: 'n1/w/0', leaseId: lease.leaseId, reward: 1 }), { code: 'ERR_REWARD_LEASE_LOST', message: /cancelled/ }, 'the cancelled request\'s worker is refused')
  const c0 = await proxy.result({ requestId: 'c0', waitMs: 0 }, never)
  t.match(c0, { state: 'done', result: { status: 'cancelled', reward: -1, stage: 'verify', message: /cancelled by the trainer/ } })
  t.match(await proxy.result({ requestId: 'c1', waitMs: 0 }, never), { state: 'done', result: { status: 'ok', reward: 0.5 } }, 'a finished request keeps its result')

  // The whole batch: c2 (queued) is cancelled, and the batch ends though its 4th request never came.
  t.same(proxy.cancel({ task: 'c', batch: 0 }), { cancelled: ['c2'], finished: ['c0', 'c1'], unknown: [] })
  t.ok(boundaries.includes('batch-complete c#0'), 'the batch completed')
  t.equal(await fetch(proxy, 'verify', 'n1/w/2'), null, 'nothing of it is queued')
  t.same(proxy.history().filter(h => h.task === 'c'), [], 'a cancelled batch is not the task\'s history')
  t.throws(() => proxy.submit({ task: 'c', batch: 0, requestId: 'c3', payload: {} }, 'agent'), { message: /has already completed/ }, 'nothing more is taken for it')
  t.same(proxy.cancel({ task: 'c', batch: 0, requestIds: ['c2', 'c9'] }), { cancelled: [], finished: ['c2'], unknown: ['c9'] }, 'cancelling again changes nothing')
  t.same(proxy.cancel({ task: 'c', batch: 0 }), { cancelled: [], finished: ['c0', 'c1', 'c2'], unknown: [] }, 'the whole batch again: every request has its result')

  // A batch whose every request was submitted: cancelling the rest completes it, and still not into the history.
  proxy.batchStart({ task: 'd', batch: 0, size: 2 })
  for (const id of ['d0', 'd1']) proxy.submit({ task: 'd', batch: 0, requestId: id, payload: {} }, 'agent')
  const d0 = (await fetch(proxy, 'verify', 'n1/w/3'))!
  proxy.complete({ workerId: 'n1/w/3', leaseId: d0.leaseId, output: 'x' })
  const d0judged = (await fetch(proxy, 'judge', 'n1/g/1'))!
  proxy.complete({ workerId: 'n1/g/1', leaseId: d0judged.leaseId, reward: 1 })
  t.same(proxy.cancel({ task: 'd', batch: 0 }), { cancelled: ['d1'], finished: ['d0'], unknown: [] })
  t.same(proxy.history().filter(h => h.task === 'd'), [], 'its one finished request is not the task\'s history')
  proxy.stop()
})

t.test('external workers: counted per stage from fresh reports, planned as the stage\'s workers', async t => {
  let clock = 0
  const { proxy } = proxyWith({ now: () => clock })
  proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 0, stages: ['verify', 'judge'], seq: 1, workers: [
    { workerId: 'a/verify/0', stage: 'verify', pid: 10 },
    { workerId: 'a/verify/ext-77-0', stage: 'verify', pid: 77, external: true },
    { workerId: 'a/verify/ext-77-1', stage: 'verify', pid: 77, external: true },
  ] })
  proxy.heartbeat({ node: 'n2', nodeName: 'b', cpuCores: 4, gpus: 1, stages: ['verify', 'judge'], seq: 1, workers: [{ workerId: 'b/judge/ext-5-0', stage: 'judge', pid: 5, external: true }] })
  t.same(proxy.externalWorkers(), [2, 1], 'two external verify slots, one judge')
  t.equal(proxy.status().stages[0]!.workers, 3, 'and they are live workers of their stage')
  t.throws(() => proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 0, stages: [], seq: 2, workers: [{ workerId: 'x', stage: 'verify', pid: 1, external: 'yes' }] }), { code: 'ERR_BAD_REQUEST' })
  clock += 1500 // past leaseTimeoutMs: n2's report is stale
  proxy.heartbeat({ node: 'n1', nodeName: 'a', cpuCores: 4, gpus: 0, stages: ['verify', 'judge'], seq: 3, workers: [{ workerId: 'a/verify/ext-77-0', stage: 'verify', pid: 77, external: true }] })
  t.same(proxy.externalWorkers(), [1, 0], 'a slot left; a silent agent\'s externals do not count')
  proxy.stop()
})
