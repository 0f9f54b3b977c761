/**
 * Runtime scheduling alone (PlexRL §4.4): jobs already pinned to nodes of one
 * group, each cycling through its GPU segments at its own cadence (a segment
 * becomes ready when the previous one ended plus the profile's idle gap), no
 * placement and no reservations. Running the same jobs, durations and jitter
 * seed under HRRS and under FCFS compares the two schedulers on the same
 * queue: context switches, task waits, per-job slowdown.
 */
import { createEventQueue } from '../../core/event-queue.ts'
import { createSeededRandom } from '../../core/seeded-random.ts'
import { createTaskExecutor } from './task-executor.ts'
import type { RuntimeSchedulerName } from '../policies/runtime/hrrs.ts'

export interface RuntimeSimJob {
  id: string
  /** Node indices (a gang). */
  nodes: number[]
  startS: number
  periodS: number
  iterations: number
  /** GPU-busy parts of one period, ordered, disjoint, within periodS; seconds. */
  segments: Array<{ offsetS: number, durationS: number }>
  /** Context-switch cost, seconds. */
  switchS: number
  /**
   * Concurrent request chains of the job on the same nodes and state (e.g.
   * PPO's actor and critic, PlexRL §7.1), each cycling through the segments.
   * Default 1.
   */
  streams?: number
}

export interface RuntimeSimOptions {
  nodes: number
  jobs: RuntimeSimJob[]
  scheduler: RuntimeSchedulerName
  /** Relative jitter of task durations. Default 0.05. */
  jitter?: number
  /** Seed of the jitter. Default 1. */
  seed?: number
}

export interface RuntimeSimResult {
  scheduler: RuntimeSchedulerName
  contextSwitches: number
  taskWaitS: { mean: number, max: number }
  makespanS: number
  /** Per job: elapsed over iterations × period. */
  slowdown: Record<string, number>
}

export function simulateRuntime (options: RuntimeSimOptions): RuntimeSimResult {
  const q = createEventQueue()
  const rnd = createSeededRandom(options.seed ?? 1)
  const jitter = options.jitter ?? 0.05
  const ends = new Map<string, number>()
  const executor = createTaskExecutor({ queue: q, nodes: options.nodes, scheduler: options.scheduler, isFinished: id => ends.has(id) })
  // Durations are drawn up front per job and stream so both schedulers see the same work.
  const chains = options.jobs.flatMap(job => Array.from({ length: job.streams ?? 1 }, (_, stream) => ({ job, stream })))
  const durations = chains.map(({ job }) => Array.from({ length: job.iterations * job.segments.length }, (_, i) =>
    job.segments[i % job.segments.length]!.durationS * (1 + (jitter > 0 ? rnd.uniform(-jitter, jitter) : 0))))
  const openChains = new Map(options.jobs.map(job => [job.id, job.streams ?? 1]))
  chains.forEach(({ job, stream }, c) => {
    let index = 0
    const next = (prevEndS: number): void => {
      if (index === job.iterations * job.segments.length) {
        const left = openChains.get(job.id)! - 1
        openChains.set(job.id, left)
        if (left === 0) ends.set(job.id, q.nowS)
        return
      }
      const s = index % job.segments.length
      const seg = job.segments[s]!
      const prev = job.segments[(s + job.segments.length - 1) % job.segments.length]!
      const gapS = index === 0 ? seg.offsetS : s === 0 ? job.periodS - prev.offsetS - prev.durationS + seg.offsetS : seg.offsetS - prev.offsetS - prev.durationS
      const readyS = prevEndS + gapS
      const i = index++
      q.at(readyS, () => executor.submit({ taskId: `${job.id}.${stream}#${i}`, jobId: job.id, nodes: job.nodes, readyS, execS: seg.durationS, setupS: job.switchS }, durations[c]![i]!, () => next(q.nowS)))
    }
    q.at(job.startS, () => next(job.startS))
  })
  q.runUntil()
  const stats = executor.stats
  return {
    scheduler: options.scheduler,
    contextSwitches: stats.contextSwitches,
    taskWaitS: { mean: stats.tasksStarted === 0 ? 0 : stats.waitSumS / stats.tasksStarted, max: stats.waitMaxS },
    makespanS: Math.max(0, ...ends.values()),
    slowdown: Object.fromEntries(options.jobs.map(j => [j.id, (ends.get(j.id)! - j.startS) / (j.iterations * j.periodS)])),
  }
}
