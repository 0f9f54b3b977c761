/**
 * The leader's runtime schedule of RUNNING jobs (PlexRL §4.4, §5.2.2–5.2.3):
 * each job cycles through its GPU segments on its node group; a segment is a
 * task that becomes ready when the previous one ended plus the profile's idle
 * gap, but not before the time its placement planned (phase, stretched
 * period, micro-shifts); the simulators' task executor
 * (mesh/sim/task-executor.ts, HRRS or FCFS under per-node device locks)
 * starts it on the wall clock (wall-clock-queue.ts) and counts context
 * switches. A task takes its profiled duration: the leader has no view of
 * the workers' GPU work, so this schedule is the model of it, the same one
 * `agentctl sim placement` replays.
 *
 * A job completes (`onJobDone`) when its last iteration's last segment ends.
 * A job the leader takes over mid-run (failover) resumes at the first
 * iteration whose planned start has not passed: iterations planned in the
 * past count as done, so a job's completion never waits for the schedule of
 * a leader that is gone.
 */
import { createTaskExecutor } from '../../sim/task-executor.ts'
import type { RuntimeSchedulerName } from '../../policies/runtime/hrrs.ts'
import type { JobRecord } from './job-table.ts'
import { createWallClockQueue } from './wall-clock-queue.ts'

export interface JobRuntimeOptions {
  scheduler: RuntimeSchedulerName
  slotS: number
}

export interface JobRuntimeComponents {
  /** A tracked job ran its last segment. */
  onJobDone(jobId: string): void
  clockMs?: () => number
}

export interface JobRuntime {
  /** Tracks exactly the given RUNNING jobs: starts the new ones, forgets the others. */
  sync(running: readonly JobRecord[]): void
  /** Context switches since this runtime started. */
  readonly contextSwitches: number
  /** Stops every timer; idempotent. */
  stop(): void
}

/** Node slots of the executor (peer ids are mapped to indices on first use). */
const maxNodes = 4096

interface Chain {
  job: JobRecord
  iteration: number
  segment: number
  lastEndS: number
  done: boolean
  /** Nodes of its last task (a continuation keeps them; a re-placed job's next task queues anew). */
  lastNodes: readonly number[]
}

export function createJobRuntime (options: JobRuntimeOptions, components: JobRuntimeComponents): JobRuntime {
  const q = createWallClockQueue(components.clockMs)
  const chains = new Map<string, Chain>()
  const nodeIndex = new Map<string, number>()
  const executor = createTaskExecutor({ queue: q, nodes: maxNodes, scheduler: options.scheduler, isFinished: id => chains.get(id)?.done !== false })
  let taskSeq = 0
  const indexOf = (peerId: string): number => {
    let i = nodeIndex.get(peerId)
    if (i === undefined) {
      if (nodeIndex.size >= maxNodes) throw new RangeError(`the runtime schedule tracks at most ${maxNodes} nodes`)
      i = nodeIndex.size
      nodeIndex.set(peerId, i)
    }
    return i
  }

  /** Planned start of the chain's current segment, seconds since the epoch. */
  const plannedStartS = (c: Chain): number => {
    const p = c.job.placement!
    const seg = c.job.spec.segments[c.segment]!
    if (p.mode === 'dedicated') return p.startSlot * options.slotS + c.iteration * c.job.spec.periodS + seg.offsetS
    return (p.startSlot + c.iteration * p.periodSlots + (p.shiftSlots[c.segment] ?? 0)) * options.slotS + seg.offsetS
  }

  const naturalReadyS = (c: Chain): number => {
    const segs = c.job.spec.segments
    if (c.segment === 0) {
      const last = segs[segs.length - 1]!
      return c.lastEndS + (c.job.spec.periodS - last.offsetS - last.durationS) + segs[0]!.offsetS
    }
    const prev = segs[c.segment - 1]!
    return c.lastEndS + (segs[c.segment]!.offsetS - prev.offsetS - prev.durationS)
  }

  /** Queues the chain's current segment; from the previous one's completion, a segment within the switch cost keeps the locks (a block, task-executor.ts). */
  const next = (c: Chain, fromCompletion = false): void => {
    if (c.done) return
    if (c.iteration >= c.job.spec.iterations) {
      c.done = true
      components.onJobDone(c.job.id)
      return
    }
    const seg = c.job.spec.segments[c.segment]!
    const readyS = Math.max(naturalReadyS(c), plannedStartS(c), q.nowS)
    const nodes = c.job.nodes.map(indexOf)
    const sameNodes = nodes.length === c.lastNodes.length && nodes.every((n, i) => n === c.lastNodes[i])
    c.lastNodes = nodes
    const task = { taskId: `${c.job.id}#${taskSeq++}`, jobId: c.job.id, nodes, readyS, execS: seg.durationS, setupS: c.job.spec.switchS }
    const onDone = (): void => {
      c.lastEndS = q.nowS
      c.segment++
      if (c.segment === c.job.spec.segments.length) { c.segment = 0; c.iteration++ }
      next(c, true)
    }
    if (fromCompletion && sameNodes && c.segment > 0 && readyS - q.nowS < c.job.spec.switchS) executor.continueWith(task, seg.durationS, onDone)
    else {
      q.at(readyS, () => {
        if (!c.done) executor.submit(task, seg.durationS, onDone)
      })
    }
  }

  const start = (job: JobRecord): void => {
    const p = job.placement
    if (p === null) return
    const c: Chain = { job, iteration: 0, segment: 0, lastEndS: -Infinity, done: false, lastNodes: [] }
    // Iterations whose planned start has passed (a predecessor leader's schedule) count as done.
    const periodS = p.mode === 'dedicated' ? job.spec.periodS : p.periodSlots * options.slotS
    const firstS = p.startSlot * options.slotS
    if (q.nowS > firstS) c.iteration = Math.min(job.spec.iterations, Math.ceil((q.nowS - firstS) / periodS - 1e-9))
    chains.set(job.id, c)
    next(c)
  }

  return {
    sync (running) {
      const ids = new Set(running.map(j => j.id))
      for (const [id, c] of chains) {
        if (!ids.has(id)) { c.done = true; chains.delete(id) }
      }
      for (const job of running) {
        const c = chains.get(job.id)
        // Same placement: keep the chain; a new placement (requeued and placed again) restarts it.
        if (c !== undefined && c.job.placement?.startSlot === job.placement?.startSlot && c.job.nodes.join() === job.nodes.join()) continue
        if (c !== undefined) c.done = true
        start(job)
      }
    },
    get contextSwitches () { return executor.stats.contextSwitches },
    stop () {
      for (const c of chains.values()) c.done = true
      chains.clear()
      q.close()
    },
  }
}
