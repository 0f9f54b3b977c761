/**
 * The task executor of the simulators (PlexRL §5.2.3): GPU tasks queue on
 * their node gang, the runtime scheduler (HRRS or FCFS, runtime/hrrs.ts)
 * picks which start under the nodes' device locks, and each task walks the
 * FSM QUEUED → RUNNING → COMPLETED. A task whose nodes hold another job's
 * state needs a context switch (offload + onload, setup cost C), counted when
 * the evicted job is still running.
 *
 * Prefetch (§5.2.2, the StateManager's hinted prefetch): the switch overlaps
 * the nodes' idle time before the task. The reservation tells the node which
 * job comes next, so offload and onload start when the node's lock was last
 * released, but not before the job's state exists (`admit`, else its first
 * submit); the task pays only what is left of C at its start:
 *   setup = max(0, C − min over switching nodes of (start − max(released, admitted)))
 * Without `prefetch` it pays C.
 *
 * Blocks (the device lock held across a job's close operations, RLinf §3.3):
 * a job whose next task follows within less than a switch cost (log-prob,
 * update and sync back to back) keeps its nodes' locks across the gap
 * (`continueWith`), as the placement planner reserves such segments as one
 * block. Releasing them would hand the nodes to a waiting job for a gap that
 * cannot even hold the switch, and the job would then wait a whole foreign
 * task plus two switches for its next segment.
 */
import type { EventQueue } from '../../core/event-queue.ts'
import { nextTaskState, selectRunnable, startOperations, type NodeRuntimeState, type RuntimeSchedulerName, type RuntimeTask, type TaskOperation, type TaskState } from '../policies/runtime/hrrs.ts'

export interface TaskExecutorOptions {
  queue: EventQueue
  nodes: number
  scheduler: RuntimeSchedulerName
  /** Whether a job has finished (evicting a finished job's state is not a context switch). */
  isFinished: (jobId: string) => boolean
  /** Whether switches overlap the nodes' idle time before the task (see above). Default true. */
  prefetch?: boolean
}

export interface TaskExecutorStats {
  contextSwitches: number
  /** Seconds of task execution times nodes (setup excluded). */
  busyNodeSeconds: number
  tasksStarted: number
  /** Sum and maximum of ready-to-start waits, seconds. */
  waitSumS: number
  waitMaxS: number
}

/** How a completed task ran: when it started (after its wait for the device locks) and the setup it paid. */
export interface TaskRun {
  /** Start time, seconds (>= the task's readyS). */
  startedS: number
  /** Context-switch setup paid before the run, seconds (0 when the job's state was resident or prefetched in time). */
  setupS: number
}

export interface TaskExecutor {
  readonly stats: TaskExecutorStats
  /**
   * Queues a ready task (its readyS must be now). It runs for `durationS`
   * (plus the setup cost when it switches) once scheduled; `onDone` runs at
   * completion, after its locks are released, with how the task ran.
   */
  submit(task: RuntimeTask, durationS: number, onDone: (run: TaskRun) => void): void
  /**
   * The job's state exists from now (its placement): its switches may be
   * prefetched from here on. A job never admitted counts from its first submit.
   */
  admit(jobId: string): void
  /**
   * The next task of the job whose task just completed, called from that
   * task's `onDone`, on the same nodes: the nodes stay locked for it through
   * the gap and it starts at its readyS without waiting or a switch (at once
   * when readyS has passed: on the wall clock, now moves between the
   * caller's reading and this call). Throws RangeError when called anywhere
   * else or for other nodes.
   */
  continueWith(task: RuntimeTask, durationS: number, onDone: (run: TaskRun) => void): void
}

export function createTaskExecutor (options: TaskExecutorOptions): TaskExecutor {
  const { queue: q, scheduler, isFinished } = options
  const prefetch = options.prefetch ?? true
  const nodes: Array<{ lockHolder: string | undefined, residentJob: string | undefined, expectedFreeS: number | undefined, releasedS: number }> =
    Array.from({ length: options.nodes }, () => ({ lockHolder: undefined, residentJob: undefined, expectedFreeS: undefined, releasedS: -Infinity }))
  const pending: RuntimeTask[] = []
  const entries = new Map<string, { durationS: number, state: TaskState, onDone: (run: TaskRun) => void }>()
  /** When each unfinished job was admitted, seconds (the earliest its state can be prefetched). */
  const admittedS = new Map<string, number>()
  const stats: TaskExecutorStats = { contextSwitches: 0, busyNodeSeconds: 0, tasksStarted: 0, waitSumS: 0, waitMaxS: 0 }
  /** The task whose onDone is running (the only one a continuation may follow). */
  let completing: RuntimeTask | undefined

  function dispatch (): void {
    if (pending.length === 0) return
    for (const task of selectRunnable(pending, nodes as NodeRuntimeState[], q.nowS, scheduler)) {
      pending.splice(pending.indexOf(task), 1)
      begin(task)
    }
  }

  /** Starts a task whose nodes' locks are free or already its own. */
  function begin (task: RuntimeTask): void {
    const ops = startOperations(task, nodes as NodeRuntimeState[])
    if (ops.some(op => op.kind === 'offload' && !isFinished(op.jobId))) stats.contextSwitches++
    const setupS = setupPaid(task, ops)
    // The scheduler sees the estimate (E + setup), not the jittered duration the simulation draws.
    const expectedFreeS = q.nowS + setupS + task.execS
    for (const n of task.nodes) Object.assign(nodes[n]!, { lockHolder: task.taskId, residentJob: task.jobId, expectedFreeS })
    const entry = entries.get(task.taskId)!
    entry.state = nextTaskState(entry.state, 'start')
    const waitS = q.nowS - task.readyS
    stats.waitSumS += waitS
    stats.waitMaxS = Math.max(stats.waitMaxS, waitS)
    stats.tasksStarted++
    stats.busyNodeSeconds += entry.durationS * task.nodes.length
    const run: TaskRun = { startedS: q.nowS, setupS }
    q.after(run.setupS + entry.durationS, () => {
      entry.state = nextTaskState(entry.state, 'complete')
      entries.delete(task.taskId)
      for (const n of task.nodes) Object.assign(nodes[n]!, { lockHolder: undefined, expectedFreeS: undefined, releasedS: q.nowS })
      completing = task
      try {
        entry.onDone(run)
      } finally {
        completing = undefined
      }
      if (isFinished(task.jobId)) admittedS.delete(task.jobId)
      dispatch()
    })
  }

  /** Setup the task pays now: C less the idle time its switching nodes had to prefetch in (see above). */
  function setupPaid (task: RuntimeTask, ops: readonly TaskOperation[]): number {
    const onloads = ops.filter(op => op.kind === 'onload')
    if (onloads.length === 0) return 0
    if (!prefetch) return task.setupS
    const knownS = admittedS.get(task.jobId) ?? q.nowS
    const idleS = Math.min(...onloads.map(op => q.nowS - Math.max(nodes[op.node]!.releasedS, knownS)))
    return Math.max(0, task.setupS - idleS)
  }

  return {
    stats,
    admit (jobId) {
      if (!admittedS.has(jobId)) admittedS.set(jobId, q.nowS)
    },
    submit (task, durationS, onDone) {
      if (entries.has(task.taskId)) throw new RangeError(`task ${task.taskId} already submitted`)
      entries.set(task.taskId, { durationS, state: 'QUEUED', onDone })
      if (!admittedS.has(task.jobId)) admittedS.set(task.jobId, q.nowS)
      pending.push(task)
      // A new task only adds claims: if it cannot start itself, nothing else can start now either.
      if (task.nodes.every(n => nodes[n]!.lockHolder === undefined)) dispatch()
    },
    continueWith (task, durationS, onDone) {
      const prev = completing
      if (prev === undefined || prev.jobId !== task.jobId) throw new RangeError(`task ${task.taskId} continues no task of job ${task.jobId} completing now`)
      if (task.nodes.length !== prev.nodes.length || task.nodes.some((n, i) => n !== prev.nodes[i])) throw new RangeError(`task ${task.taskId} continues ${prev.taskId} on other nodes`)
      if (entries.has(task.taskId)) throw new RangeError(`task ${task.taskId} already submitted`)
      entries.set(task.taskId, { durationS, state: 'QUEUED', onDone })
      // Held through the gap: expected free once the continuation has run.
      for (const n of task.nodes) Object.assign(nodes[n]!, { lockHolder: task.taskId, expectedFreeS: task.readyS + task.execS })
      q.at(Math.max(task.readyS, q.nowS), () => begin(task))
    },
  }
}
