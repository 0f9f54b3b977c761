/**
 * Trace-driven simulation of cluster placement and runtime scheduling
 * (PlexRL §6.3) on the shared discrete-event engine (event-queue.ts).
 *
 * Model:
 * - Jobs arrive at `submitS` and wait in a FIFO queue. Placement
 *   (placement-policy.ts) runs on arrivals and whenever capacity is released.
 *   Without backfill the queue head blocks everything behind it; with
 *   `spread-backfill` queued jobs behind it start when they fit (backfill),
 *   EASY style: the oldest job that cannot start claims the nodes whose
 *   residents end soonest (placement-policy.ts claimNodes), and backfilled
 *   jobs may use those nodes only if they end before then.
 * - A placed job runs `iterations` periods. Each segment is a task on its
 *   node gang: it becomes ready when the previous segment has ended plus the
 *   idle gap of the profile (the job is serial), but not before the time its
 *   reservation planned (start phase and micro-shifts). The task executor
 *   (task-executor.ts: HRRS or FCFS under the nodes' device locks) runs it.
 * - A task runs for its profiled duration times (1 ± jitter) (seeded), plus
 *   the part of the context-switch cost (offload + onload) not prefetched in
 *   its nodes' idle time since the job started, when any node of its gang
 *   holds another job's state (task-executor.ts); counted in `contextSwitches`.
 * - A cold-start job runs one period on dedicated nodes, then is repacked:
 *   its reservation is released and it is placed again as a profiled job.
 * - Admission (§7.2) sees each resident job's observed slowdown (elapsed
 *   time over the isolated time of the iterations it completed).
 * - A job runs as it really does (`runScale`: its segments take that factor
 *   of the traced durations, the profile placement planned with being stale
 *   or optimistic); its isolated time, and so its slowdown, is measured
 *   against its real period.
 * - The slowdown guard (slowdown-guard.ts, unless `guard: false`): at every
 *   iteration boundary of a job its slowdown is projected (the time taken so
 *   far plus the remaining iterations at the pace of its last
 *   `guardWindowIterations`, over its isolated time); over its bound, the latest colocation on
 *   its nodes goes back to the queue at its next iteration boundary (its
 *   progress kept, its state offloaded) and is placed again from its
 *   measured profile. Time back in the queue counts as wait, not slowdown.
 * Outputs follow `agentctl sim placement`: per-job start/end/wait/slowdown,
 * normalized queue delay (wait / own duration, PlexRL Fig. 8) percentiles,
 * GPU busy fraction (useful task seconds over node-seconds of the makespan).
 */
import { createEventQueue } from '../../core/event-queue.ts'
import { createSeededRandom } from '../../core/seeded-random.ts'
import { defaultContextSwitchS, type PlacementTrace, type PlacementTraceJob } from './placement-trace.ts'
import { ClusterHorizon } from '../policies/placement/cluster-horizon.ts'
import { claimNodes, commitPlacement, planPlacement, type NodeClaim, type PlacementDecision, type PlacementJob, type PlacementPolicyName } from '../policies/placement/placement-policy.ts'
import type { RuntimeSchedulerName, RuntimeTask } from '../policies/runtime/hrrs.ts'
import { createTaskExecutor, type TaskRun } from './task-executor.ts'
import { guardEviction } from '../policies/placement/slowdown-guard.ts'

export interface PlacementSimOptions {
  policy: PlacementPolicyName
  /** Runtime scheduler on shared nodes. Default 'hrrs'. */
  runtime?: RuntimeSchedulerName
  /** Relative jitter of task durations: each runs d × U(1 - j, 1 + j). Default 0.05. */
  jitter?: number
  /** Seed of the jitter. Default 1. */
  seed?: number
  /** Horizon ring length, slots. Default 28,800. */
  horizonSlots?: number
  /** Seconds per slot. Default 1. */
  slotS?: number
  /**
   * Queued jobs considered per placement round with backfill (the head plus
   * the next ones in order), as HPC backfill schedulers bound their scan.
   * Default 32.
   */
  backfillDepth?: number
  /** Passed to the placement policy (κ, conflict cost in its slowdown prediction). Default the policy's (2.25). */
  conflictCostBlocks?: number
  /**
   * With backfill, whether the oldest waiting job claims the nodes it will
   * get (NodeClaim, EASY backfilling) so that later jobs cannot overtake it
   * forever. Default true; false = every job that fits starts.
   */
  backfillReservation?: boolean
  /** Whether the slowdown guard evicts the latest colocation of a job measured over its bound. Default true. */
  guard?: boolean
  /** Iterations per guard measurement window. Default 5. */
  guardWindowIterations?: number
}

export interface PlacementSimJob {
  id: string
  startS: number
  endS: number
  waitS: number
  /** Run time over the isolated run time (iterations × period). */
  slowdown: number
  /** The job's admission bound (trace). */
  maxSlowdown: number
  /**
   * Slowdown predicted by the placement the job ran its last iterations
   * under (1 for dedicated), raised by later jobs' admitted conflicts.
   */
  predictedSlowdown: number
  /** That placement: dedicated nodes, shared without overlap, or shared with admitted conflicts. */
  placement: 'dedicated' | 'strict' | 'conflicting'
  /**
   * Where the run time beyond the isolated one went, seconds summed over the
   * job's tasks: held back by its reservation (phase, stretched period,
   * micro-shifts), waiting for device locks held by other jobs, and
   * context-switch setup paid.
   */
  lostS: { reservation: number, lockWait: number, setup: number }
  /** Times the slowdown guard sent it back to the queue. */
  evictions: number
}

export interface PlacementSimResult {
  policy: PlacementPolicyName
  runtime: RuntimeSchedulerName
  makespanS: number
  jobs: PlacementSimJob[]
  normalizedQueueDelay: { p50: number, p90: number, p99: number, max: number }
  /** Distribution of the jobs' slowdowns (run time over isolated run time). */
  slowdown: { p50: number, p99: number, max: number }
  /** Jobs whose slowdown exceeded their maxSlowdown (beyond rounding). */
  jobsOverBound: number
  gpuBusyFraction: number
  contextSwitches: number
  /** Mean and largest wait of a GPU task from ready to start (runtime scheduling), seconds. */
  taskWaitS: { mean: number, max: number }
  /** Jobs that ever shared a node with another job. */
  sharedJobs: number
  /** Horizon slots over-committed when reservations were extended (left to the runtime scheduler). */
  overcommittedSlots: number
  /** The slowdown guard's evictions, in order: the time and its reason. */
  guardEvictions: Array<{ atS: number, reason: string }>
}

/** A job's period as it really runs (the trace's scaled by runScale: gaps kept, busy time scaled). */
interface RealPeriod { periodS: number, segments: Array<{ offsetS: number, durationS: number }> }

function realPeriod (spec: PlacementTraceJob): RealPeriod {
  const scale = spec.runScale ?? 1
  let added = 0
  const segments = spec.segments.map(s => {
    const out = { offsetS: s.offsetS + added, durationS: s.durationS * scale }
    added += s.durationS * (scale - 1)
    return out
  })
  return { periodS: spec.periodS + added, segments }
}

interface JobRun {
  spec: PlacementTraceJob
  /** How it really runs. */
  real: RealPeriod
  /** What placement plans it with: the trace's profile, its measured one after repacking or eviction. */
  job: PlacementJob
  switchS: number
  placedNodes: number[]
  decision: PlacementDecision | undefined
  /** Iteration index at which the current plan's period 0 starts. */
  planBaseIteration: number
  iteration: number
  segment: number
  lastEndS: number
  startS: number
  endS: number
  repacked: boolean
  shared: boolean
  /** Capacity version and claim under which placement last failed (not retried until either changes). */
  lastFailedKey: string
  lostS: { reservation: number, lockWait: number, setup: number }
  predictedSlowdown: number
  /** Order of its latest placement (the guard undoes the latest colocation). */
  placedSeq: number
  /** Start of the current period when it is the first after a (re)placement. */
  periodStartS: number | undefined
  /** The guard's sliding window: when the last iterations (at most guardWindowIterations + 1) ended, since its placement. */
  iterationEnds: number[]
  /** Set by the guard: back to the queue at the next iteration boundary, with this reason. */
  evictPending: string | undefined
  evictions: number
  /** When it last went back to the queue, and its total time there. */
  requeuedAtS: number
  requeuedS: number
}

export function simulatePlacement (trace: PlacementTrace, options: PlacementSimOptions): PlacementSimResult {
  const runtime = options.runtime ?? 'hrrs'
  const jitter = options.jitter ?? 0.05
  const rnd = createSeededRandom(options.seed ?? 1)
  const slotS = options.slotS ?? 1
  const q = createEventQueue()
  const horizon = new ClusterHorizon({ nodes: trace.cluster.nodes, slots: options.horizonSlots, slotS })
  const maxJobsPerNode = trace.cluster.maxJobsPerNode
  const backfill = options.policy === 'spread-backfill'
  const claimHead = backfill && (options.backfillReservation ?? true)
  const runs = new Map<string, JobRun>()
  const waiting: JobRun[] = []
  const running = new Set<JobRun>()
  let capacityVersion = 0
  /** With backfill, the oldest waiting job's claim on the nodes it will get (EASY backfilling). */
  let claim: NodeClaim | undefined
  let taskSeq = 0
  let placedSeq = 0
  const guard = (options.guard ?? true) && options.policy !== 'isolated'
  const guardWindow = options.guardWindowIterations ?? 5
  const guardEvictions: Array<{ atS: number, reason: string }> = []
  const executor = createTaskExecutor({ queue: q, nodes: trace.cluster.nodes, scheduler: runtime, isFinished: id => !Number.isNaN(runs.get(id)?.endS ?? 0) })

  for (const spec of trace.jobs) {
    const run: JobRun = {
      spec,
      real: realPeriod(spec),
      job: { id: spec.id, nodes: spec.nodes, periodS: spec.periodS, iterations: spec.iterations, segments: spec.segments, maxSlowdown: spec.maxSlowdown, profiled: spec.profiled ?? true, switchS: spec.switchS ?? trace.cluster.contextSwitchS ?? defaultContextSwitchS },
      switchS: spec.switchS ?? trace.cluster.contextSwitchS ?? defaultContextSwitchS,
      placedNodes: [],
      decision: undefined,
      planBaseIteration: 0,
      iteration: 0,
      segment: 0,
      lastEndS: 0,
      startS: NaN,
      endS: NaN,
      repacked: false,
      shared: false,
      lastFailedKey: '',
      lostS: { reservation: 0, lockWait: 0, setup: 0 },
      predictedSlowdown: 1,
      placedSeq: 0,
      periodStartS: undefined,
      iterationEnds: [],
      evictPending: undefined,
      evictions: 0,
      requeuedAtS: NaN,
      requeuedS: 0,
    }
    runs.set(spec.id, run)
    q.at(spec.submitS, () => { waiting.push(run); tryPlace() })
  }

  function observedSlowdown (): Map<string, number> {
    const out = new Map<string, number>()
    for (const run of running) {
      if (run.iteration === 0) continue
      out.set(run.spec.id, (q.nowS - run.startS - run.requeuedS) / (run.iteration * run.real.periodS))
    }
    return out
  }

  function tryPlace (): void {
    claim = undefined
    if (waiting.length === 0) return
    const nowSlot = Math.ceil(q.nowS / slotS - 1e-9)
    horizon.advanceTo(nowSlot)
    const observed = observedSlowdown()
    const depth = options.backfillDepth ?? 32
    /** The claim's part of a failure key, built when the claim is made. */
    let claimKey = ''
    for (let i = 0; i < waiting.length && i < depth;) {
      const run = waiting[i]!
      const key = `${capacityVersion}/${claimKey}`
      let decision: PlacementDecision | undefined
      if (run.lastFailedKey !== key) {
        decision = planPlacement(horizon, run.job, { policy: options.policy, nowSlot, observedSlowdown: observed, maxJobsPerNode, conflictCostBlocks: options.conflictCostBlocks, claim })
        if (decision === undefined) run.lastFailedKey = key
      }
      if (decision === undefined) {
        if (!backfill) return
        // The oldest job that cannot start claims the nodes it will get; later ones backfill around it.
        if (claim === undefined && claimHead) {
          claim = claimNodes(horizon, run.job, nowSlot)
          if (claim !== undefined) claimKey = `${claim.jobId}@${claim.fromSlot}:${claim.nodes.join(',')}`
        }
        i++
        continue
      }
      waiting.splice(i, 1)
      start(run, decision)
    }
  }

  function commit (run: JobRun, decision: PlacementDecision): void {
    commitPlacement(horizon, decision, run.job)
    run.decision = decision
    run.predictedSlowdown = decision.predictedSlowdown
    for (const c of decision.conflictCosts) {
      const other = runs.get(c.jobId)
      if (other !== undefined && other !== run) other.predictedSlowdown = Math.max(other.predictedSlowdown, horizon.predictedSlowdown(c.jobId))
    }
    run.placedNodes = decision.nodes
    run.planBaseIteration = run.iteration
    if (decision.nodes.some(n => horizon.jobsOn(n).size > 1)) run.shared = true
    for (const n of decision.nodes) for (const id of horizon.jobsOn(n)) { const other = runs.get(id); if (other !== undefined && other !== run) other.shared = true }
  }

  function start (run: JobRun, decision: PlacementDecision): void {
    commit(run, decision)
    const atS = decision.startSlot * slotS
    if (run.evictions === 0) run.startS = atS
    else run.requeuedS += atS - run.requeuedAtS
    run.periodStartS = atS
    run.placedSeq = ++placedSeq
    run.iterationEnds = [atS]
    executor.admit(run.spec.id)
    running.add(run)
    scheduleNextTask(run)
  }

  /** Planned start of the run's current segment (seconds), from its reservation. */
  function plannedStartS (run: JobRun): number {
    const d = run.decision!
    const seg = run.job.segments[run.segment]!
    if (d.mode === 'dedicated') return d.startSlot * slotS + (run.iteration - run.planBaseIteration) * run.job.periodS + seg.offsetS
    // Trace segments are validated to be in offset order, the order of shiftSlots.
    const shift = d.shiftSlots[run.segment] ?? 0
    return (d.startSlot + (run.iteration - run.planBaseIteration) * d.stretchedPeriodSlots + shift) * slotS + seg.offsetS
  }

  /** When the run's current segment is ready by its real period alone (the job is serial). */
  function naturalReadyS (run: JobRun): number {
    const segs = run.real.segments
    if (run.segment === 0 && run.periodStartS !== undefined) return run.periodStartS + segs[0]!.offsetS
    if (run.segment === 0) {
      const last = segs[segs.length - 1]!
      return run.lastEndS + (run.real.periodS - last.offsetS - last.durationS) + segs[0]!.offsetS
    }
    const prev = segs[run.segment - 1]!
    return run.lastEndS + (segs[run.segment]!.offsetS - prev.offsetS - prev.durationS)
  }

  /**
   * Queues the run's current segment. Called from the previous segment's
   * completion (`fromCompletion`), a segment that follows within less than
   * the job's switch cost keeps the nodes' locks through the gap (a block,
   * task-executor.ts), as its reservation is planned.
   */
  function scheduleNextTask (run: JobRun, fromCompletion = false): void {
    const naturalS = Math.max(naturalReadyS(run), q.nowS)
    const readyS = Math.max(naturalS, plannedStartS(run))
    run.lostS.reservation += readyS - naturalS
    run.periodStartS = undefined
    const durationS = run.real.segments[run.segment]!.durationS * (1 + (jitter > 0 ? rnd.uniform(-jitter, jitter) : 0))
    // The scheduler sees the planned duration; the task takes its real one.
    const task: RuntimeTask = { taskId: `${run.spec.id}#${taskSeq++}`, jobId: run.spec.id, nodes: run.placedNodes, readyS, execS: run.job.segments[run.segment]!.durationS, setupS: run.switchS }
    const onDone = ({ startedS, setupS }: TaskRun): void => {
      run.lostS.lockWait += startedS - readyS
      run.lostS.setup += setupS
      complete(run)
    }
    if (fromCompletion && run.segment > 0 && readyS - q.nowS < run.switchS) executor.continueWith(task, durationS, onDone)
    else q.at(readyS, () => executor.submit(task, durationS, onDone))
  }

  function complete (run: JobRun): void {
    run.lastEndS = q.nowS
    run.segment++
    if (run.segment === run.spec.segments.length) { run.segment = 0; run.iteration++ }
    if (run.iteration === run.spec.iterations) {
      run.endS = q.nowS
      running.delete(run)
      horizon.release(run.spec.id)
      // Capacity changed even when the reservation had already run out of the window.
      capacityVersion++
      tryPlace()
      return
    }
    if (run.segment === 0) {
      if (run.evictPending !== undefined) {
        evict(run)
        return
      }
      if (guard) checkSlowdown(run)
    }
    if (run.segment === 0 && !run.job.profiled && !run.repacked && options.policy !== 'isolated') repack(run)
    scheduleNextTask(run, true)
  }

  /** The guard, at an iteration boundary of `run`: measure its last window; over its bound, undo the latest colocation. */
  function checkSlowdown (run: JobRun): void {
    run.iterationEnds.push(q.nowS)
    if (run.iterationEnds.length <= guardWindow) return
    if (run.iterationEnds.length > guardWindow + 1) run.iterationEnds.shift()
    const P = run.real.periodS
    const recent = (q.nowS - run.iterationEnds[0]!) / (guardWindow * P)
    // The bound is on the whole run: what it has taken so far plus its remaining iterations at the recent pace.
    // A job whose recent pace is within its bound is recovering: nothing to undo.
    if (recent <= run.spec.maxSlowdown) return
    const slowdown = (q.nowS - run.startS - run.requeuedS + (run.spec.iterations - run.iteration) * recent * P) / (run.spec.iterations * P)
    const others = [...running].filter(o => o !== run && o.evictPending === undefined).map(o => ({ id: o.spec.id, nodes: o.placedNodes, placedSeq: o.placedSeq, overrun: overrunOf(o) }))
    const eviction = guardEviction({ id: run.spec.id, nodes: run.placedNodes, placedSeq: run.placedSeq, slowdown, maxSlowdown: run.spec.maxSlowdown }, others)
    if (eviction === undefined) return
    // The next verdict on this job waits for a whole window measured after this one.
    run.iterationEnds = [q.nowS]
    runs.get(eviction.evict)!.evictPending = eviction.reason
    guardEvictions.push({ atS: q.nowS, reason: eviction.reason })
  }

  /** Real over planned busy time per period, once it ran an iteration under its placement (undefined before). */
  function overrunOf (run: JobRun): number | undefined {
    if (run.iteration <= run.planBaseIteration) return undefined
    const busy = (segments: ReadonlyArray<{ durationS: number }>): number => segments.reduce((n, s) => n + s.durationS, 0)
    return busy(run.real.segments) / busy(run.job.segments)
  }

  /** Back to the queue (by submission order) with its progress; placed again from its measured (real) profile. */
  function evict (run: JobRun): void {
    run.evictPending = undefined
    run.evictions++
    run.requeuedAtS = q.nowS
    running.delete(run)
    releaseForMeasuredPlan(run)
    run.lastFailedKey = ''
    const at = waiting.findIndex(w => w.spec.submitS > run.spec.submitS)
    waiting.splice(at < 0 ? waiting.length : at, 0, run)
    tryPlace()
  }

  /** After one profiled period a cold-started job leaves its dedicated nodes for a packed placement (§4.3.2). */
  function repack (run: JobRun): void {
    // One period on dedicated nodes measured its real profile.
    releaseForMeasuredPlan(run)
    const decision = planPlacement(horizon, run.job, { policy: options.policy, nowSlot: horizon.windowStart, observedSlowdown: observedSlowdown(), maxJobsPerNode, conflictCostBlocks: options.conflictCostBlocks, claim })
      ?? planPlacement(horizon, { ...run.job, profiled: false }, { policy: options.policy, nowSlot: horizon.windowStart, maxJobsPerNode })
    if (decision !== undefined) commit(run, decision)
    tryPlace()
  }

  /** Releases the run's reservation; what is left of it is planned from now on with its measured (real) profile. */
  function releaseForMeasuredPlan (run: JobRun): void {
    run.repacked = true
    horizon.advanceTo(Math.ceil(q.nowS / slotS - 1e-9))
    horizon.release(run.spec.id)
    capacityVersion++
    run.job = { ...run.job, periodS: run.real.periodS, segments: run.real.segments, profiled: true, iterations: run.spec.iterations - run.iteration }
  }

  q.runUntil()

  const jobs: PlacementSimJob[] = trace.jobs.map(spec => {
    const run = runs.get(spec.id)!
    const waitS = run.startS - spec.submitS + run.requeuedS
    return {
      id: spec.id,
      startS: run.startS,
      endS: run.endS,
      waitS,
      slowdown: (run.endS - run.startS - run.requeuedS) / (spec.iterations * run.real.periodS),
      maxSlowdown: spec.maxSlowdown,
      predictedSlowdown: run.predictedSlowdown,
      placement: run.decision === undefined || run.decision.mode === 'dedicated' ? 'dedicated' : run.decision.strict ? 'strict' : 'conflicting',
      lostS: run.lostS,
      evictions: run.evictions,
    }
  })
  const makespanS = Math.max(...jobs.map(j => j.endS)) - Math.min(...trace.jobs.map(j => j.submitS))
  const delays = jobs.map(j => j.waitS / (j.endS - j.startS - runs.get(j.id)!.requeuedS)).sort((a, b) => a - b)
  const slowdowns = jobs.map(j => j.slowdown).sort((a, b) => a - b)
  return {
    policy: options.policy,
    runtime,
    makespanS,
    jobs,
    normalizedQueueDelay: { p50: quantile(delays, 0.5), p90: quantile(delays, 0.9), p99: quantile(delays, 0.99), max: delays[delays.length - 1]! },
    slowdown: { p50: quantile(slowdowns, 0.5), p99: quantile(slowdowns, 0.99), max: slowdowns[slowdowns.length - 1]! },
    jobsOverBound: jobs.filter(j => j.slowdown > j.maxSlowdown + 1e-9).length,
    gpuBusyFraction: executor.stats.busyNodeSeconds / (trace.cluster.nodes * makespanS),
    contextSwitches: executor.stats.contextSwitches,
    taskWaitS: { mean: executor.stats.tasksStarted === 0 ? 0 : executor.stats.waitSumS / executor.stats.tasksStarted, max: executor.stats.waitMaxS },
    sharedJobs: [...runs.values()].filter(r => r.shared).length,
    overcommittedSlots: horizon.overcommittedSlots,
    guardEvictions,
  }
}

/** Nearest-rank quantile of sorted values. */
function quantile (sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!
}
