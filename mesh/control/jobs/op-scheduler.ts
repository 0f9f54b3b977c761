/**
 * The leader's live scheduler of function-level operations (PlexRL §5.2;
 * RLinf §3.3 for the device lock): admission by HRRS (or FCFS) over every
 * job's next operation, lock-gated and gang-wide across the job's devices,
 * with automatic context switching carried out by the nodes' executors.
 *
 * Contract:
 * - "Job" here is what executes (job-groups.ts): a table job, or a worker
 *   group of a placement-auto job. An operation submitted to a
 *   placement-auto job runs on the group of its `component` (none, or one
 *   the layout lacks: ERR_BAD_REQUEST); its answer names the group.
 * - A job's operations run strictly in submission order, one at a time; only
 *   a job's head operation is an admission candidate. Its ready time is when
 *   it was submitted or the job's previous operation ended, whichever is
 *   later (the W in HRRS counts from there).
 * - Locks are per device, as the node executors lock them (`gpu:k` of a
 *   node, or its `cpu`). A candidate starts when the lock of every device of
 *   its job is free (selectRunnable, mesh/policies/runtime/hrrs.ts — the
 *   simulator's code): then they are locked, each of its nodes is sent the
 *   run (op-dispatch.ts), and the locks are held until every node answered.
 *   E is the job's measured mean for the operation's name (the default until
 *   measured), C its measured mean switch cost (the spec's switchS until
 *   measured); a switch is needed where another job is resident on a device.
 * - Idempotency: (job, opId) names an operation. A repeat while it is queued
 *   or running joins it; a repeat after it finished gets the same answer (or
 *   error) from the retained results; a repeat with another name or args is
 *   ERR_JOB_CONFLICT. Across leaders, a new leader re-dispatches what its
 *   callers repeat, and the nodes answer repeats from their own cache: an
 *   operation never runs twice.
 * - Prefetch: a head operation that must wait for devices another job holds
 *   sends its nodes, once, a `prefetch` (where another job runs or is
 *   resident), so
 *   the node brings the job's stored state back from NVMe meanwhile.
 * - Residency: a node's resident job is the job of the last run it answered
 *   (the node offloaded every other job there first). Unknown residency
 *   (a failed node, a new leader) counts as "switch needed".
 * - Versions: a job a node offloaded under version v is stored under v on
 *   every other node of the job too (`store`), so every rank names each
 *   point of the job's history by the same version. The job is not admitted
 *   again until those stores settled (a store overtaken by the job's next
 *   run would name another state). Once every node stored v, they are told
 *   (`commit`) and drop older versions. A rank lost (ERR_WORKER_LOST) rolls
 *   the job back on all its nodes to the latest version every rank holds
 *   (asked with `versions`, named in `invalidate`); the job is admitted again
 *   once that settled. A store that fails leaves its node's versions behind:
 *   no commit, and a rollback goes to a version every rank has.
 * - stop() fails every waiting caller with ERR_NOT_LEADER (callers retry on
 *   the next leader with the same opId) and aborts the dispatches in flight
 *   (the nodes finish them and keep the answer for the repeat).
 */
import type { Logger } from 'pino'
import { AgentError } from '../../../core/errors.ts'
import { selectRunnable, type NodeRuntimeState, type RuntimeSchedulerName, type RuntimeTask } from '../../policies/runtime/hrrs.ts'
import type { JobRecord, JobTable } from './job-table.ts'
import type { OpDispatch } from './op-dispatch.ts'
import { createComponentProfile, type ComponentProfile } from './component-profile.ts'
import { devicesOnNode, executionJobs, findExecutionJob, gpuCountOf, groupId, type ExecutionJob } from './job-groups.ts'
import { createIterationClock, type IterationClock } from './iteration-clock.ts'
import type { DispatchAnswer, JobsTop, OpAnswer, OpRequest, RankResult, VersionsAnswer } from './op-wire.ts'

export interface OpSchedulerOptions {
  scheduler: RuntimeSchedulerName
  /** This leader's epoch: fences every dispatch, and makes versions it picks larger than any earlier leader's. */
  epoch: number
  /** E of an operation name not measured yet, seconds. Default 1. */
  defaultExecS?: number
  /** Finished operations whose answers are kept for repeats. Default 10000. */
  retainedResults?: number
  /** Most queued operations per job. Default 1024. */
  maxPendingPerJob?: number
}

export interface OpSchedulerComponents {
  logger: Logger
  dispatch: OpDispatch
  /** The leader's current job table. */
  table(): JobTable
  clockMs?: () => number
}

/** A job's figures measured on this leader. */
export interface MeasuredJob {
  ops: number
  failed: number
  switches: number
  runMs: number
  switchMs: number
  queuedMs: number
  /** Mean run time per operation name, ms. */
  byName: Map<string, { count: number, totalMs: number }>
  /** Run time per workflow component (operations submitted with one). */
  components: ComponentProfile
}

export interface OpScheduler {
  /** Resolves with the operation's answer (or rejects with its coded error) once every rank ran it. */
  submit(request: OpRequest): Promise<OpAnswer>
  /** Re-reads the table: fails the queued operations of jobs no longer RUNNING, admits what can start. */
  tableChanged(): void
  top(): JobsTop
  measured(): ReadonlyMap<string, MeasuredJob>
  stop(): void
}

interface Op {
  request: OpRequest
  key: string
  /** A prefetch was sent to the nodes where another job is resident. */
  prefetched: boolean
  submittedMs: number
  readyMs: number
  promise: Promise<OpAnswer>
  resolve(answer: OpAnswer): void
  reject(err: AgentError): void
}

type Finished = { request: OpRequest, answer: OpAnswer } | { request: OpRequest, error: AgentError }

const versionsPerEpoch = 1_000_000

export function createOpScheduler (options: OpSchedulerOptions, components: OpSchedulerComponents): OpScheduler {
  const clockMs = components.clockMs ?? Date.now
  const log = components.logger
  const defaultExecS = options.defaultExecS ?? 1
  const retained = options.retainedResults ?? 10_000
  const maxPending = options.maxPendingPerJob ?? 1024
  const abort = new AbortController()
  const queues = new Map<string, Op[]>()
  const running = new Map<string, Op>()
  const finished = new Map<string, Finished>()
  /** Per device (`<peer>/<device>`, devices as the node executor locks them: gpu:k, cpu). */
  const locks = new Map<string, string>()
  const resident = new Map<string, string>()
  const expectedFreeS = new Map<string, number>()
  const deviceIndex = new Map<string, number>()
  /** Per job with a workflow layout: its iterations' spans over all its groups. */
  const iterations = new Map<string, IterationClock>()
  const stats = new Map<string, MeasuredJob>()
  /** Per job: stores or a rollback in flight; the job is not admitted until they settle. */
  const settling = new Map<string, Promise<void>>()
  /** Per job and version: the nodes that stored it (a version every node stored is committed). */
  const acks = new Map<string, Map<number, Set<string>>>()
  let versionCounter = 0
  let stopped = false

  const indexOf = (device: string): number => {
    let i = deviceIndex.get(device)
    if (i === undefined) { i = deviceIndex.size; deviceIndex.set(device, i) }
    return i
  }
  /** The job's devices on `peer` (one of its nodes). */
  const devicesOn = (job: ExecutionJob, peer: string): string[] => devicesOnNode(job, job.nodes.indexOf(peer)).map(d => `${peer}/${d}`)
  const devicesOf = (job: ExecutionJob): string[] => job.nodes.flatMap(peer => devicesOn(job, peer))
  const statsOf = (job: string): MeasuredJob => {
    let s = stats.get(job)
    if (s === undefined) { s = { ops: 0, failed: 0, switches: 0, runMs: 0, switchMs: 0, queuedMs: 0, byName: new Map(), components: createComponentProfile() }; stats.set(job, s) }
    return s
  }
  const nextVersion = (): number => {
    versionCounter = (versionCounter + 1) % versionsPerEpoch
    return Math.max(options.epoch, 1) * versionsPerEpoch + versionCounter
  }
  const jobOf = (id: string): ExecutionJob | undefined => findExecutionJob(components.table().jobs, id)
  const clockOf = (parent: string): IterationClock => {
    let clock = iterations.get(parent)
    if (clock === undefined) { clock = createIterationClock(); iterations.set(parent, clock) }
    return clock
  }
  /** An operation for a job with a workflow layout goes to the group of its component. */
  const routed = (request: OpRequest): OpRequest => {
    const job = components.table().jobs.find(j => j.id === request.job)
    const layout = job?.spec.layout
    if (job === undefined || layout === undefined) return request
    const groups = layout.groups.map(g => g.component)
    if (request.component === undefined) throw new AgentError('ERR_BAD_REQUEST', `job ${job.id} runs its workflow as worker groups (${groups.join(', ')}): name the operation's component`)
    if (!groups.includes(request.component)) throw new AgentError('ERR_BAD_REQUEST', `job ${job.id} has no worker group for component ${request.component} (it has ${groups.join(', ')})`)
    return { ...request, job: groupId(job.id, request.component) }
  }
  const sameRequest = (a: OpRequest, b: OpRequest): boolean => a.name === b.name && JSON.stringify(a.args ?? null) === JSON.stringify(b.args ?? null)

  const remember = (key: string, f: Finished): void => {
    finished.set(key, f)
    if (finished.size > retained) finished.delete(finished.keys().next().value!)
  }

  const execS = (job: JobRecord, name: string): number => {
    const m = stats.get(job.id)?.byName.get(name)
    return m !== undefined && m.count > 0 ? m.totalMs / m.count / 1000 : defaultExecS
  }
  const setupS = (job: JobRecord): number => {
    const s = stats.get(job.id)
    return s !== undefined && s.switches > 0 ? s.switchMs / s.switches / 1000 : job.spec.switchS
  }

  const failQueued = (jobId: string, err: AgentError): void => {
    for (const op of queues.get(jobId) ?? []) { remember(op.key, { request: op.request, error: err }); op.reject(err) }
    queues.delete(jobId)
  }

  const pump = (): void => {
    if (stopped) return
    const nowMs = clockMs()
    const candidates: Array<{ op: Op, job: JobRecord }> = []
    for (const [jobId, queue] of queues) {
      if (running.has(jobId) || settling.has(jobId) || queue.length === 0) continue
      const job = jobOf(jobId)
      if (job === undefined || job.state !== 'RUNNING') {
        failQueued(jobId, job === undefined
          ? new AgentError('ERR_JOB_NOT_FOUND', `job ${jobId} is no longer in the job table`)
          : new AgentError('ERR_JOB_NOT_RUNNING', `job ${jobId} is ${job.state} (${whyNotRunning(job)}); resubmit once it runs again`))
        continue
      }
      candidates.push({ op: queue[0]!, job })
    }
    if (candidates.length === 0) return
    const tasks: RuntimeTask[] = candidates.map(({ op, job }) => ({
      taskId: op.key, jobId: job.id, nodes: devicesOf(job).map(indexOf), readyS: op.readyMs / 1000, execS: Math.max(execS(job, op.request.name), 1e-6), setupS: setupS(job),
    }))
    const nodes: NodeRuntimeState[] = []
    for (const [device, i] of deviceIndex) {
      const holder = locks.get(device)
      nodes[i] = { lockHolder: holder, residentJob: resident.get(device), ...(holder !== undefined ? { expectedFreeS: expectedFreeS.get(device) } : {}) }
    }
    const byKey = new Map(candidates.map(c => [c.op.key, c]))
    for (const task of selectRunnable(tasks, nodes, nowMs / 1000, options.scheduler)) {
      const { op, job } = byKey.get(task.taskId)!
      byKey.delete(task.taskId)
      queues.get(job.id)!.shift()
      void start(op, job, task)
    }
    // Heads left waiting: their state comes back from NVMe while the devices are busy.
    for (const { op, job } of byKey.values()) {
      if (op.prefetched) continue
      op.prefetched = true
      // Where another job runs now, or is resident, this one is switched in next.
      for (const peer of job.nodes) if (devicesOn(job, peer).some(d => locks.has(d) || resident.get(d) !== job.id)) background(peer, { kind: 'prefetch', epoch: options.epoch, job: job.id })
    }
  }

  const start = async (op: Op, job: ExecutionJob, task: RuntimeTask): Promise<void> => {
    const admittedMs = clockMs()
    running.set(job.id, op)
    const devices = devicesOf(job)
    for (const d of devices) { locks.set(d, op.key); expectedFreeS.set(d, admittedMs / 1000 + task.execS + task.setupS) }
    const clock = job.group !== undefined && op.request.iteration !== undefined ? clockOf(job.group.parent) : undefined
    clock?.started(op.request.iteration!, admittedMs)
    const version = nextVersion()
    const message = { kind: 'run' as const, epoch: options.epoch, job: job.id, opId: op.request.opId, name: op.request.name, args: op.request.args ?? null, version }
    const settled = await Promise.allSettled(job.nodes.map(peer => components.dispatch.send(peer, message, abort.signal) as Promise<DispatchAnswer>))
    for (const d of devices) { locks.delete(d); expectedFreeS.delete(d) }
    running.delete(job.id)
    const endMs = clockMs()
    clock?.ended(op.request.iteration!, endMs)
    const next = queues.get(job.id)?.[0]
    if (next !== undefined) next.readyMs = Math.max(next.submittedMs, endMs)
    if (stopped) return
    const s = statsOf(job.id)
    const failures = settled.flatMap((r, i) => r.status === 'rejected' ? [{ peer: job.nodes[i]!, err: asAgentError(r.reason) }] : [])
    if (failures.length > 0) {
      s.failed++
      for (const f of failures) for (const d of devicesOn(job, f.peer)) resident.delete(d)
      const lost = failures.find(f => f.err.code === 'ERR_WORKER_LOST')
      if (lost !== undefined) {
        for (const d of devices) if (resident.get(d) === job.id) resident.delete(d)
        settle(job.id, rollBack(job))
      } else {
        settled.forEach((r, i) => { if (r.status === 'fulfilled') for (const d of devicesOn(job, job.nodes[i]!)) resident.set(d, job.id) })
      }
      // The most telling error: a rank's own failure before a transport one.
      const err = failures.find(f => f.err.code !== 'ERR_NODE_LOST')?.err ?? failures[0]!.err
      log.warn({ job: job.id, opId: op.request.opId, name: op.request.name, code: err.code, err: err.message }, 'jobs: operation failed')
      remember(op.key, { request: op.request, error: err })
      op.reject(err)
      pump()
      return
    }
    const answers = settled.map(r => (r as PromiseFulfilledResult<DispatchAnswer>).value)
    const ranks: RankResult[] = answers.flatMap((a, i) => a.ranks.map(r => ({ rank: r.rank, node: job.nodes[i]!, result: r.result, startedAtMs: r.startedAtMs, durationMs: r.durationMs })))
      .sort((a, b) => a.rank - b.rank)
    const offloadMs = Math.max(0, ...answers.map(a => a.offloadMs))
    const onloadMs = Math.max(0, ...answers.map(a => a.onloadMs))
    const switchMs = Math.max(0, ...answers.map(a => a.switchMs))
    const runMs = Math.max(0, ...answers.map(a => a.runMs))
    const switched = answers.some(a => a.onloaded || a.offloaded.length > 0)
    for (const d of devices) resident.set(d, job.id)
    // Jobs offloaded here are stored under the same version on their other nodes too.
    const offloaded = new Map<string, { version: number, by: string[] }>()
    answers.forEach((a, i) => {
      for (const o of a.offloaded) {
        const entry = offloaded.get(o.job) ?? { version: o.version, by: [] }
        entry.by.push(job.nodes[i]!)
        offloaded.set(o.job, entry)
      }
    })
    for (const [other, { version, by }] of offloaded) {
      for (const peer of by) stored(other, version, peer)
      const rest = (jobOf(other)?.nodes ?? []).filter(peer => !by.includes(peer))
      if (rest.length > 0) settle(other, storeOn(other, version, rest))
    }
    const queuedMs = Math.max(0, admittedMs - op.readyMs)
    s.ops++
    s.runMs += runMs
    s.queuedMs += queuedMs
    if (switched) { s.switches++; s.switchMs += switchMs }
    const byName = s.byName.get(op.request.name) ?? { count: 0, totalMs: 0 }
    byName.count++
    byName.totalMs += runMs
    s.byName.set(op.request.name, byName)
    const { component, iteration, granularity } = op.request
    if (component !== undefined) s.components.record({ component, ...(iteration !== undefined ? { iteration } : {}), ...(granularity !== undefined ? { granularity } : {}) }, gpuCountOf(job), runMs)
    const answer: OpAnswer = { job: job.id, opId: op.request.opId, name: op.request.name, ranks, switched, offloadMs, onloadMs, switchMs, runMs, queuedMs, totalMs: endMs - op.submittedMs }
    remember(op.key, { request: op.request, answer })
    op.resolve(answer)
    pump()
  }

  /** Holds `jobId` back from admission until `work` settled. */
  const settle = (jobId: string, work: Promise<void>): void => {
    const before = settling.get(jobId) ?? Promise.resolve()
    const all = Promise.all([before, work]).then(() => {}, () => {})
    settling.set(jobId, all)
    void all.then(() => { if (settling.get(jobId) === all) { settling.delete(jobId); pump() } })
  }

  /** `peer` stored `version` of `jobId`: once every node of the job did, they are told to commit it. */
  const stored = (jobId: string, version: number, peer: string): void => {
    const nodes = jobOf(jobId)?.nodes ?? []
    let byVersion = acks.get(jobId)
    if (byVersion === undefined) { byVersion = new Map(); acks.set(jobId, byVersion) }
    const peers = byVersion.get(version) ?? new Set<string>()
    peers.add(peer)
    byVersion.set(version, peers)
    if (nodes.length > 0 && nodes.every(n => peers.has(n))) {
      for (const v of [...byVersion.keys()]) if (v <= version) byVersion.delete(v)
      for (const n of nodes) background(n, { kind: 'commit', epoch: options.epoch, job: jobId, version })
    }
    while (byVersion.size > 64) byVersion.delete(Math.min(...byVersion.keys()))
  }

  const storeOn = async (jobId: string, version: number, peers: readonly string[]): Promise<void> => {
    await Promise.all(peers.map(async peer => {
      try {
        await components.dispatch.send(peer, { kind: 'store', epoch: options.epoch, job: jobId, version }, abort.signal)
        stored(jobId, version, peer)
      } catch (err) {
        if (!stopped) log.warn({ peer, job: jobId, version, err: (err as Error).message }, 'jobs: storing a job\'s state on one of its nodes failed; its versions there stay behind (no commit) until the next store')
      }
    }))
  }

  /**
   * Rolls the job back on all its nodes to the latest version every rank
   * holds (ranks a node cannot answer for are left out: that node is lost and
   * the job requeued). With no version common to all, the oldest point every
   * rank can reach is taken, and an error logged.
   */
  const rollBack = async (job: JobRecord): Promise<void> => {
    const held = await Promise.allSettled(job.nodes.map(peer => components.dispatch.send(peer, { kind: 'versions', epoch: options.epoch, job: job.id }, abort.signal) as Promise<VersionsAnswer>))
    const ranks = held.flatMap(r => r.status === 'fulfilled' ? r.value.ranks : [])
    if (ranks.length === 0) { if (!stopped) log.warn({ job: job.id }, 'jobs: no node of the job answered with its stored versions; nothing rolled back'); return }
    const common = ranks.slice(1).reduce((set, r) => new Set(r.versions.filter(v => set.has(v))), new Set(ranks[0]!.versions))
    let target = Math.max(-1, ...common)
    if (target < 0) {
      target = Math.max(0, ...ranks.map(r => Math.min(...r.versions)))
      log.error({ job: job.id, ranks: ranks.map(r => ({ rank: r.rank, versions: r.versions })), target }, 'jobs: the job\'s ranks share no stored version; rolling back to the oldest point each can reach (they may differ)')
    }
    acks.delete(job.id)
    await Promise.all(job.nodes.map(async peer => {
      try {
        await components.dispatch.send(peer, { kind: 'invalidate', epoch: options.epoch, job: job.id, version: target }, abort.signal)
      } catch (err) {
        if (!stopped) log.warn({ peer, job: job.id, version: target, err: (err as Error).message }, 'jobs: rolling a job back on one of its nodes failed')
      }
    }))
  }

  /** A dispatch nobody waits for (commit, prefetch): logged when it fails. */
  const background = (peer: string, message: Parameters<OpDispatch['send']>[1]): void => {
    components.dispatch.send(peer, message, abort.signal)
      .catch(err => { if (!stopped) log.warn({ peer, kind: message.kind, job: message.job, err: (err as Error).message }, 'jobs: background dispatch failed') })
  }

  return {
    submit (asked) {
      if (stopped) return Promise.reject(new AgentError('ERR_NOT_LEADER', 'this agent stopped acting as leader'))
      let request: OpRequest
      try { request = routed(asked) } catch (err) { return Promise.reject(err) }
      const key = `${request.job}/${request.opId}`
      const done = finished.get(key)
      if (done !== undefined) {
        if (!sameRequest(done.request, request)) return Promise.reject(conflict(request, done.request))
        return 'answer' in done ? Promise.resolve(done.answer) : Promise.reject(done.error)
      }
      const live = running.get(request.job)?.key === key ? running.get(request.job) : queues.get(request.job)?.find(o => o.key === key)
      if (live !== undefined) {
        if (!sameRequest(live.request, request)) return Promise.reject(conflict(request, live.request))
        return live.promise
      }
      const job = jobOf(request.job)
      if (job === undefined) return Promise.reject(new AgentError('ERR_JOB_NOT_FOUND', `no job ${request.job}`))
      if (job.state !== 'RUNNING') return Promise.reject(new AgentError('ERR_JOB_NOT_RUNNING', `job ${request.job} is ${job.state} (${whyNotRunning(job)}): operations run only while it is placed`))
      const queue = queues.get(request.job) ?? []
      if (queue.length >= maxPending) return Promise.reject(new AgentError('ERR_JOBS_FULL', `job ${request.job} already has ${queue.length} operations queued`))
      const nowMs = clockMs()
      let resolve!: (a: OpAnswer) => void
      let reject!: (e: AgentError) => void
      const promise = new Promise<OpAnswer>((res, rej) => { resolve = res; reject = rej })
      promise.catch(() => {})
      const readyMs = queue.length === 0 && !running.has(request.job) ? nowMs : Infinity
      queue.push({ request, key, submittedMs: nowMs, readyMs: Number.isFinite(readyMs) ? readyMs : nowMs, prefetched: false, promise, resolve, reject })
      queues.set(request.job, queue)
      pump()
      return promise
    },
    tableChanged () {
      for (const jobId of [...acks.keys()]) if (jobOf(jobId)?.state !== 'RUNNING') acks.delete(jobId)
      pump()
    },
    top () {
      let switches = 0; let switchMs = 0; let runMs = 0
      const jobIds = new Set([...queues.keys(), ...running.keys(), ...stats.keys()])
      const jobs = [...jobIds].sort().map(id => {
        const s = stats.get(id)
        switches += s?.switches ?? 0; switchMs += s?.switchMs ?? 0; runMs += s?.runMs ?? 0
        return {
          job: id, pending: queues.get(id)?.length ?? 0, running: running.get(id)?.key ?? null,
          ops: s?.ops ?? 0, failed: s?.failed ?? 0, switches: s?.switches ?? 0, runMs: s?.runMs ?? 0, switchMs: s?.switchMs ?? 0, queuedMs: s?.queuedMs ?? 0,
          measuredSlowdown: s !== undefined && s.runMs > 0 ? (s.runMs + s.switchMs + s.queuedMs) / s.runMs : null,
          components: s?.components.samples() ?? [],
        }
      })
      const table = components.table().jobs
      const devices = new Set([...deviceIndex.keys(), ...executionJobs(table).filter(j => j.state === 'RUNNING' && j.spec.layout === undefined).flatMap(devicesOf)])
      const nodes = [...devices].sort().map(d => {
        const cut = d.lastIndexOf('/')
        return { node: d.slice(0, cut), device: d.slice(cut + 1), residentJob: resident.get(d) ?? null, runningOp: locks.get(d) ?? null }
      })
      const workflows = table.flatMap(j => {
        if (j.spec.layout === undefined || (j.state !== 'RUNNING' && !iterations.has(j.id))) return []
        const busy = j.spec.layout.groups.some(g => running.has(groupId(j.id, g.component)) || (queues.get(groupId(j.id, g.component))?.length ?? 0) > 0)
        const measured = iterations.get(j.id)?.measured(!busy) ?? null
        return [{
          job: j.id,
          mode: j.spec.layout.mode,
          groups: j.spec.layout.groups.map(g => ({ component: g.component, job: groupId(j.id, g.component), gpus: g.gpus })),
          predictedIterationS: j.spec.layout.iterationS,
          measuredIterationS: measured === null ? null : measured.meanMs / 1000,
          iterations: measured?.iterations ?? 0,
        }]
      })
      return { scheduler: options.scheduler, epoch: options.epoch, nodes, jobs, workflows, switches, switchMs, runMs }
    },
    measured: () => stats,
    stop () {
      if (stopped) return
      stopped = true
      abort.abort(new AgentError('ERR_NOT_LEADER', 'this agent stopped acting as leader'))
      const err = new AgentError('ERR_NOT_LEADER', 'this agent stopped acting as leader; the operation is resumed by the next one (same opId)')
      for (const op of running.values()) op.reject(err)
      for (const queue of queues.values()) for (const op of queue) op.reject(err)
      running.clear()
      queues.clear()
    },
  }
}

function conflict (request: OpRequest, first: OpRequest): AgentError {
  return new AgentError('ERR_JOB_CONFLICT', `operation ${request.opId} of job ${request.job} was already submitted as ${first.name} with other args; use a new opId`)
}

function asAgentError (err: unknown): AgentError {
  return err instanceof AgentError ? err : new AgentError('ERR_INTERNAL', (err as Error)?.message ?? String(err))
}

/** Why a job is not RUNNING, for its controller: the leader's latest event about it, else its state's usual cause. */
function whyNotRunning (job: JobRecord): string {
  if (job.state === 'COMPLETED') return 'completed'
  return job.events?.[job.events.length - 1]?.message ?? (job.requeues > 0 ? 'requeued: a node of its group is gone' : 'not placed yet')
}
