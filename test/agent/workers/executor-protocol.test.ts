// The protocol between the leader's scheduler and the nodes' executors (mesh/control/jobs/op-scheduler.ts,
// agent/workers/node-executor.ts): the leader's real scheduler drives two nodes' real executors and
// worker registries; the workers and the StateManager are small doubles that keep each rank's state as
// a step counter under its stored keys (a dropped key is gone), the workers answering as the Python
// worker does (an allocate with no room on the device is ERR_DEVICE_FULL); the agent copies the state
// out of and into the memory a worker names.
// 1. A job's stored versions agree across its nodes ("Versions"). The faults are the ones that made the
//    ranks of a job spanning nodes restore different points of its history: a `store` that fails on one
//    node, a `store` that arrives after the job's next run, then a rank lost mid-run.
// 2. A switch overlaps the incoming job's onload with the outgoing one's offload, and where the device
//    has no room for both, loads after the offload.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { AgentError } from '../../../core/errors.ts'
import { createWorkerRegistry, type WorkerRegistry } from '../../../agent/workers/worker-registry.ts'
import { createNodeExecutor, type NodeExecutor } from '../../../agent/workers/node-executor.ts'
import { createOpScheduler } from '../../../mesh/control/jobs/op-scheduler.ts'
import type { OpDispatch } from '../../../mesh/control/jobs/op-dispatch.ts'
import type { DispatchMessage } from '../../../mesh/control/jobs/op-wire.ts'
import type { JobRecord, JobTable, JobsView } from '../../../mesh/control/jobs/job-table.ts'

const logger = pino({ level: 'silent' })

function job (id: string, nodes: string[]): JobRecord {
  return {
    id, state: 'RUNNING', nodes, nodeNames: nodes, placement: null, submittedAtMs: 0, startedAtMs: 0, completedAtMs: null, completedBy: null, requeues: 0,
    spec: { id, nodes: nodes.length, gpusPerNode: 1, periodS: 10, iterations: 10, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2, profiled: true, switchS: 0.02, live: true },
  }
}

/** Job x spans nodes A and B (rank 0 on A, rank 1 on B); job k runs on A only, on the same GPU as x's rank 0. */
function cluster () {
  const table: JobTable = { slotS: 1, revision: 1, contextSwitches: 0, jobs: [job('x', ['A', 'B']), job('k', ['A'])] }
  const view = (): JobsView => ({ decision: null, leaderId: 'A', ...table, local: [] })
  /** The StateManager double: stored key → the step counter it holds. */
  const keys = new Map<string, number>()
  /** The workers' memory: a shared-memory name → the step counter it holds, its owner, how long copying it out takes. */
  const memory = new Map<string, { counter: number, worker: string, offloadMs: number }>()
  /** What the agent copied (out of / into a worker's memory), when. */
  const events: Array<{ worker: string, type: string, phase: 'start' | 'end' }> = []
  /** The stops the agent sent its workers, and why. */
  const stops: Array<{ worker: string, reason: string | undefined }> = []
  const cellOf = (spec: { kind: string, name?: string }): { counter: number, worker: string, offloadMs: number } => {
    const cell = spec.kind === 'shm' ? memory.get(spec.name!) : undefined
    if (cell === undefined) throw new AgentError('ERR_SOURCE_NOT_FOUND', `no memory ${JSON.stringify(spec)}`)
    return cell
  }
  const nodes = new Map<string, { registry: WorkerRegistry, executor: NodeExecutor }>()
  for (const peer of ['A', 'B']) {
    let executor!: NodeExecutor
    const registry = createWorkerRegistry({ selfPeerId: peer }, {
      logger,
      stateManager: {
        offload: async items => {
          for (const i of items) {
            const cell = cellOf(i.source)
            events.push({ worker: cell.worker, type: 'offload', phase: 'start' })
            await sleep(cell.offloadMs)
            keys.set(i.key, cell.counter)
            events.push({ worker: cell.worker, type: 'offload', phase: 'end' })
          }
          return { results: [] } as never
        },
        onload: async items => {
          for (const i of items) {
            const cell = cellOf(i.target)
            events.push({ worker: cell.worker, type: 'onload', phase: 'start' })
            const stored = keys.get(i.key)
            if (stored === undefined) throw new AgentError('ERR_KEY_NOT_FOUND', `no ${i.key}`)
            cell.counter = stored
            events.push({ worker: cell.worker, type: 'onload', phase: 'end' })
          }
          return { results: [] } as never
        },
        drop: async ({ keys: dropped = [] }) => { for (const k of dropped) keys.delete(k); return { dropped: dropped.length } as never },
      },
      jobs: view,
      onWorkerLost: (w, why) => executor.workerLost(w, why),
    })
    executor = createNodeExecutor({ selfPeerId: peer }, { logger, registry })
    nodes.set(peer, { registry, executor })
  }
  /** Faults injected on the next dispatch of a kind to a node: fail it, or hold it back. */
  const faults: Array<{ peer: string, kind: DispatchMessage['kind'], fail?: boolean, delayMs?: number }> = []
  const log: Array<{ peer: string, kind: string, job: string, version?: number }> = []
  const dispatch: OpDispatch = {
    async send (peer, message) {
      const m = JSON.parse(JSON.stringify(message)) as DispatchMessage
      const i = faults.findIndex(f => f.peer === peer && f.kind === m.kind)
      const fault = i >= 0 ? faults.splice(i, 1)[0] : undefined
      if (fault?.delayMs !== undefined) await sleep(fault.delayMs)
      if (fault?.fail === true) throw new AgentError('ERR_NODE_LOST', `node ${peer} did not answer the ${m.kind}`)
      log.push({ peer, kind: m.kind, job: m.job, ...('version' in m ? { version: m.version } : {}) })
      return JSON.parse(JSON.stringify(await nodes.get(peer)!.executor.handle(m)))
    },
  }
  const scheduler = createOpScheduler({ scheduler: 'fcfs', epoch: 1 }, { logger, dispatch, table: () => table })

  /**
   * A worker double: its state is a step counter in its memory (a `memory` cell; a new one at each
   * allocate, freed at release), which the agent's copies read and write. `dieOn`: the worker's process
   * dies when it receives this operation (its stream closes, no reply); `offloadMs`: copying its state
   * out takes that long; `fullWhileOthersHold`: its device has no room while another job holds it.
   */
  /** Runs under way per node, and the most at once. */
  const running = new Map<string, number>()
  const mostRunning = new Map<string, number>()
  const startWorker = async (jobId: string, rank: number, dieOn?: string, o: { offloadMs?: number, fullWhileOthersHold?: boolean, peer?: string, gpu?: number, runMs?: number } = {}): Promise<void> => {
    const peer = o.peer ?? table.jobs.find(j => j.id === jobId)!.nodes[rank === 0 ? 0 : 1]!
    const { registry } = nodes.get(peer)!
    const name = `${jobId}/${rank}`
    let generation = 0
    const allocateCell = (): string => {
      const shm = `agentd-test-${jobId}-${rank}-${generation++}`
      memory.set(shm, { counter: 0, worker: name, offloadMs: o.offloadMs ?? 0 })
      return shm
    }
    let cell = allocateCell()
    const key = `${jobId}/r${rank}/w:param@[0]/[1]:f32#v0`
    const answer = await registry.register({ job: jobId, rank, gpu: o.gpu ?? 0, ops: ['step'], tensors: [{ name: 'w', key, memory: { kind: 'shm', name: cell, offset: 0 } }] }, 1000 + rank)
    const detach = registry.attach(answer.workerId, (type, data) => {
      const d = data as { requestId: string, opId?: string }
      setTimeout(() => {
        if (type === 'run' && d.opId === dieOn) { detach(); return }
        if (type === 'stop') { stops.push({ worker: name, reason: (data as { reason?: string }).reason }); return }
        const reply = (body: Record<string, unknown>): void => registry.reply(answer.workerId, { requestId: d.requestId, ...body })
        events.push({ worker: name, type, phase: 'start' })
        if (type === 'allocate' && o.fullWhileOthersHold === true && registry.liveWorkers().some(w => w.job !== jobId && w.holds && w.gpu === 0)) {
          reply({ ok: false, error: { code: 'ERR_DEVICE_FULL', message: 'no room on the device for the state' } })
          return
        }
        let result: unknown
        if (type === 'allocate') { cell = allocateCell(); result = { tensors: [{ name: 'w', memory: { kind: 'shm', name: cell, offset: 0 } }] } }
        if (type === 'release') memory.delete(cell)
        if (type === 'run') { const c = memory.get(cell)!; c.counter++; result = { counter: c.counter } }
        if (type !== 'run' || o.runMs === undefined) { reply({ ok: true, result }); return }
        running.set(peer, (running.get(peer) ?? 0) + 1)
        mostRunning.set(peer, Math.max(mostRunning.get(peer) ?? 0, running.get(peer)!))
        setTimeout(() => { running.set(peer, running.get(peer)! - 1); reply({ ok: true, result }) }, o.runMs)
      }, 0)
    })
  }
  /** Submits operation `opId` (`step`) of a job to the leader's scheduler. */
  const step = async (jobId: string, opId: string) => await scheduler.submit({ job: jobId, opId, name: 'step' })
  return { table, scheduler, nodes, keys, memory, faults, log, startWorker, events, stops, step, mostRunning }
}

t.test('a store that failed on one node, then a rank lost: every rank rolls back to the same version', async t => {
  const c = cluster()
  t.teardown(() => c.scheduler.stop())
  for (const [j, r] of [['x', 0], ['k', 0]] as const) await c.startWorker(j, r)
  await c.startWorker('x', 1, 's3')
  const { step } = c
  t.same((await step('x', 's1')).ranks.map(r => r.result), [{ counter: 1 }, { counter: 1 }], 'x step 1 on both ranks')
  c.faults.push({ peer: 'B', kind: 'store', fail: true })
  await step('k', 'k1') // x offloaded on A under a new version; storing it on B fails
  await sleep(20)
  t.same((await step('x', 's2')).ranks.map(r => r.result), [{ counter: 2 }, { counter: 2 }], 'x step 2 (A loads the version B lacks)')
  // Rank 1 dies in step 3: x is rolled back.
  await t.rejects(step('x', 's3'), { code: 'ERR_WORKER_LOST', message: /rank 1/ })
  await sleep(20)
  const invalidations = c.log.filter(e => e.kind === 'invalidate')
  t.same(invalidations.map(e => e.peer).sort(), ['A', 'B'], 'both nodes told to roll x back, the one that lost the rank too')
  t.equal(new Set(invalidations.map(e => e.version)).size, 1, 'to one named version')
  t.same(invalidations[0]!.version, 0, 'the latest version both ranks hold: the registered state (B never stored the later one)')
  await c.startWorker('x', 1)
  const after = await step('x', 's3.retry')
  const counters = after.ranks.map(r => (r.result as { counter: number }).counter)
  t.equal(counters[0], counters[1], `both ranks resume from the same point (counters ${counters.join(', ')})`)
  t.same(counters, [1, 1], 'the point both ranks stored: step 0, so the replayed step is step 1')
})

t.test('a store held back in the network: the job does not run again before it settled', async t => {
  const c = cluster()
  t.teardown(() => c.scheduler.stop())
  for (const [j, r] of [['x', 1], ['k', 0]] as const) await c.startWorker(j, r)
  await c.startWorker('x', 0, 's3')
  const { step } = c
  await step('x', 's1')
  c.faults.push({ peer: 'B', kind: 'store', delayMs: 80 })
  await step('k', 'k1')
  await step('x', 's2') // submitted while the store to B is still on its way
  const order = c.log.filter(e => e.peer === 'B' && e.job === 'x').map(e => e.kind)
  t.ok(order.indexOf('store') >= 0 && order.indexOf('store') < order.lastIndexOf('run'), `B stored x before x ran again (B saw: ${order.join(', ')})`)
  const version = c.log.find(e => e.kind === 'store')!.version!
  t.equal(c.nodes.get('A')!.registry.keyVersion('x', 0, version), version, 'A holds the version with its own bytes')
  t.equal(c.nodes.get('B')!.registry.storedVersions('x', 1).includes(version), true, 'B names the same version')
  await sleep(20)
  t.ok(c.log.some(e => e.kind === 'commit' && e.job === 'x' && e.version === version && e.peer === 'A') && c.log.some(e => e.kind === 'commit' && e.job === 'x' && e.version === version && e.peer === 'B'), 'both nodes stored it: both told to commit it')
  t.same(c.nodes.get('A')!.registry.storedVersions('x', 0), [version], 'A keeps only the committed version')
  t.same(c.nodes.get('B')!.registry.storedVersions('x', 1), [version], 'B too')
  // A rank lost now rolls back to the committed point, the state after step 1, on both ranks.
  await t.rejects(step('x', 's3'), { code: 'ERR_WORKER_LOST', message: /rank 0/ })
  await sleep(20)
  await c.startWorker('x', 0)
  t.same((await step('x', 's3.retry')).ranks.map(r => r.result), [{ counter: 2 }, { counter: 2 }], 'both ranks replay step 2 from the committed state')
})

t.test('a rank that is not current names a stored version by alias; a rank that lost effects refuses to', async t => {
  const c = cluster()
  t.teardown(() => c.scheduler.stop())
  for (const [j, r] of [['x', 0], ['x', 1], ['k', 0]] as const) await c.startWorker(j, r)
  const b = c.nodes.get('B')!
  await b.executor.handle({ kind: 'store', epoch: 1, job: 'x', version: 5 })
  t.same(b.registry.storedVersions('x', 1), [0, 5], 'a current rank stores the version')
  t.equal(b.registry.keyVersion('x', 1, 5), 5, 'with its own bytes')
  await b.executor.handle({ kind: 'invalidate', epoch: 1, job: 'x', version: 0 })
  t.same(b.registry.storedVersions('x', 1), [0], 'a rollback drops what was stored after its target')
  t.notOk(c.keys.has('x/r1/w:param@[0]/[1]:f32#v5'), 'and its keys')
  await b.executor.handle({ kind: 'store', epoch: 1, job: 'x', version: 6 })
  t.equal(b.registry.keyVersion('x', 1, 6), 0, 'a rank not current (rolled back) names version 6 by the bytes of version 0')
  await t.rejects(b.executor.handle({ kind: 'invalidate', epoch: 1, job: 'x', version: -1 }), { code: 'ERR_STATE_MISMATCH' }, 'a target before anything stored is refused')
  await t.rejects(b.executor.handle({ kind: 'store', epoch: 0, job: 'x', version: 7 }), { code: 'ERR_STALE_EPOCH' })
})

t.test('a switch: the onload overlaps the offload; with no room on the device it waits for the offload', async t => {
  for (const full of [false, true]) {
    const c = cluster()
    t.teardown(() => c.scheduler.stop())
    await c.startWorker('x', 0, undefined, { offloadMs: 60, fullWhileOthersHold: full })
    await c.startWorker('x', 1)
    await c.startWorker('k', 0, undefined, { offloadMs: 60, fullWhileOthersHold: full })
    const { step } = c
    await step('x', 's1')
    await step('k', 'k1') // k loaded while x is offloaded
    c.events.length = 0
    const answer = await step('x', 's2') // x loaded while k is offloaded
    const at = (worker: string, type: string, phase: 'start' | 'end', nth = 0): number => c.events.map((e, i) => ({ e, i })).filter(({ e }) => e.worker === worker && e.type === type && e.phase === phase)[nth]?.i ?? -1
    const offloadEnd = at('k/0', 'offload', 'end')
    t.ok(offloadEnd >= 0, 'k offloaded')
    if (!full) {
      t.ok(at('x/0', 'onload', 'start') < offloadEnd && at('x/0', 'onload', 'end') < offloadEnd, 'with room, x was loaded while k was being offloaded')
      t.ok(answer.switchMs < answer.offloadMs + answer.onloadMs, `the switch took the longer phase, not their sum (${answer.switchMs.toFixed(1)} ms; offload ${answer.offloadMs.toFixed(1)}, onload ${answer.onloadMs.toFixed(1)} from the switch's start)`)
    } else {
      t.ok(at('x/0', 'allocate', 'start', 0) >= 0 && at('x/0', 'allocate', 'start', 0) < offloadEnd, 'without room, x\'s first allocate was refused while k held the device')
      t.ok(at('x/0', 'allocate', 'start', 1) > at('k/0', 'release', 'start'), 'x allocated again once k released its memory')
      t.ok(at('x/0', 'onload', 'start') > offloadEnd, 'and was loaded after k was offloaded')
    }
    t.same(answer.ranks.map(r => r.result), [{ counter: 2 }, { counter: 2 }], 'x resumed from its state either way')
    // The offload's reply is a 60 ms timer; timers may fire a fraction of a millisecond early against performance.now().
    t.ok(answer.switched && answer.switchMs >= 55, `the switch is reported with its wall time (${answer.switchMs.toFixed(1)} ms)`)
  }
})

t.test('an allocate reply that does not name every state tensor once is refused and adopts nothing', async t => {
  const c = cluster()
  t.teardown(() => c.scheduler.stop())
  await c.startWorker('k', 0)
  const registry = c.nodes.get('A')!.registry
  const w = registry.live('k', 0)!
  const before = w.memory
  const shm = (name: string): unknown => ({ kind: 'shm', name, offset: 0 })
  const bad: Array<[string, unknown]> = [
    ['no result', undefined],
    ['not an object', 'memory'],
    ['no tensors', { tensors: [] }],
    ['a name twice', { tensors: [{ name: 'w', memory: shm('a') }, { name: 'w', memory: shm('b') }] }],
    ['an unregistered name', { tensors: [{ name: 'w', memory: shm('a') }, { name: 'v', memory: shm('b') }] }],
    ['another name', { tensors: [{ name: 'v', memory: shm('a') }] }],
    ['memory that is not a spec', { tensors: [{ name: 'w', memory: { kind: 'file', path: '/etc/passwd' } }] }],
    ['a negative offset', { tensors: [{ name: 'w', memory: { kind: 'shm', name: 'a', offset: -1 } }] }],
    ['an unknown field', { tensors: [{ name: 'w', memory: shm('a') }], extra: 1 }],
  ]
  for (const [what, reply] of bad) {
    t.throws(() => registry.adoptMemory(w, reply), { code: 'ERR_OPERATION_FAILED', message: /rank 0 of job k/ }, what)
    t.same(w.memory, before, `${what}: the memory the agent knew is kept`)
  }
  registry.adoptMemory(w, { tensors: [{ name: 'w', memory: shm('agentd-test-k-0-new') }] })
  t.same(w.memory, [shm('agentd-test-k-0-new')], 'a reply naming every tensor once is adopted')
  registry.forgetMemory(w)
  t.equal(w.memory, null, 'forgotten before the worker frees it')
  await t.rejects(registry.copyOut(w, 9), { code: 'ERR_STATE_MISMATCH', message: /holds no memory/ }, 'nothing is copied out of memory the agent let go of')
})

t.test('an allocate reply for a large state is not held to the 64 KiB of an operation result', async t => {
  const c = cluster()
  t.teardown(() => c.scheduler.stop())
  const registry = c.nodes.get('A')!.registry
  // A 70B model's rank: ~800 tensors, each with two optimizer states.
  const names = Array.from({ length: 2400 }, (_, i) => `optim.exp_avg_sq:model.layers.${i}.mlp.down_proj.weight`)
  const shm = (i: number): unknown => ({ kind: 'shm', name: `agentd-test-big-${i}`, offset: 0 })
  for (let i = 0; i < names.length; i++) c.memory.set(`agentd-test-big-${i}`, { counter: 0, worker: 'k/0', offloadMs: 0 })
  const answer = await registry.register({ job: 'k', rank: 0, gpu: 0, ops: ['step'], tensors: names.map((name, i) => ({ name, key: `k/r0/t${i}:param@[0]/[1]:f32#v0`, memory: shm(i) })) }, 7)
  registry.attach(answer.workerId, (_type, data) => {
    const { requestId } = data as { requestId: string }
    registry.reply(answer.workerId, { requestId, ok: true, result: { tensors: names.map((name, i) => ({ name, memory: shm(i + 10_000) })) } })
  })
  const w = registry.live('k', 0)!
  const reply = await registry.request(w, 'allocate', {})
  t.ok(Buffer.byteLength(JSON.stringify(reply.result)) > 64 * 1024, 'the reply is larger than an operation result may be')
  registry.adoptMemory(w, reply.result)
  t.same(w.memory![2399], shm(12_399), 'and adopted whole')
})

t.test('a worker whose job left its node is stopped with the leader\'s reason (the job\'s latest event)', async t => {
  const c = cluster()
  await c.startWorker('k', 0)
  const k = c.table.jobs.find(j => j.id === 'k')!
  c.table.jobs = c.table.jobs.map(j => j === k ? { ...k, state: 'QUEUED', nodes: [], nodeNames: [], events: [{ atMs: 1, message: 'evicted by the slowdown guard: job x over its bound' }] } : j)
  await c.nodes.get('A')!.registry.sweep()
  for (let i = 0; i < 100 && c.stops.length === 0; i++) await sleep(5) // the double reads its messages on the next tick
  t.same(c.stops, [{ worker: 'k/0', reason: 'job k no longer runs on this node (evicted by the slowdown guard: job x over its bound)' }])
  t.same(c.nodes.get('A')!.registry.list().map(w => w.job), [], 'and dropped')
})

t.test('a workflow job over two nodes: each group registers and runs on its own GPUs, the groups side by side', async t => {
  const c = cluster()
  t.teardown(() => c.scheduler.stop())
  // 2 nodes × 2 GPUs: rollout on A's GPU 0; actor on A's GPU 1 and B's GPUs 0-1.
  const base = job('w', ['A', 'B'])
  c.table.jobs.push({ ...base, spec: { ...base.spec, gpusPerNode: 2, layout: { mode: 'disaggregated', iterationS: 1, groups: [{ component: 'rollout', gpus: [0, 1] }, { component: 'actor', gpus: [1, 4] }] } } })
  const a = c.nodes.get('A')!.registry
  await t.rejects(a.register({ job: 'w.actor', rank: 0, gpu: 0, ops: ['step'], tensors: [] }, 1), { code: 'ERR_BAD_REQUEST', message: /GPU 1 of this node/ })
  await t.rejects(a.register({ job: 'w.actor', rank: 1, gpu: 0, ops: ['step'], tensors: [] }, 1), { code: 'ERR_BAD_REQUEST', message: /not hosted on this node \(ranks 0 are\)/ })
  await c.startWorker('w.rollout', 0, undefined, { peer: 'A', gpu: 0, runMs: 40 })
  for (const [rank, peer, gpu] of [[0, 'A', 1], [1, 'B', 0], [2, 'B', 1]] as const) await c.startWorker('w.actor', rank, undefined, { peer, gpu, runMs: 40 })
  const submit = (component: string, i: number) => c.scheduler.submit({ job: 'w', opId: `${component}-${i}`, name: 'step', component, iteration: 0 })
  const answers = await Promise.all([0, 1, 2].flatMap(i => [submit('rollout', i), submit('actor', i)]))
  t.same(answers.filter(x => x.job === 'w.actor').map(x => x.ranks.map(r => [r.rank, r.node, r.result])), [1, 2, 3].map(n => [[0, 'A', { counter: n }], [1, 'B', { counter: n }], [2, 'B', { counter: n }]]), 'actor ranks 0 on A, 1-2 on B, each op once, in order')
  t.same(answers.filter(x => x.job === 'w.rollout').map(x => x.ranks.map(r => [r.rank, r.node])), [[[0, 'A']], [[0, 'A']], [[0, 'A']]])
  t.equal(c.mostRunning.get('A'), 2, 'on node A the rollout and the actor ran at the same time (GPU 0 and GPU 1)')
  t.notOk(answers.some(x => x.offloadMs > 0), 'neither group offloaded the other')
  t.same([...new Set(c.log.filter(e => e.kind === 'run' && e.job === 'w.rollout').map(e => e.peer))], ['A'], 'the rollout group\'s runs go to A only')
  await t.rejects(c.scheduler.submit({ job: 'w', opId: 'x', name: 'step' }), { code: 'ERR_BAD_REQUEST', message: /name the operation's component/ })
  const top = c.scheduler.top()
  t.same(top.nodes.filter(n => n.node === 'A').map(n => [n.device, n.residentJob]), [['gpu:0', 'w.rollout'], ['gpu:1', 'w.actor']])
})
