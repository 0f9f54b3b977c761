/**
 * The task executor of the simulators (PlexRL §5.2.3): GPU tasks queue on
 * their node gang, the runtime scheduler (HRRS or FCFS, runtime/hrrs.ts)
 * picks which start under the nodes' device locks, and each task walks the
 * FSM QUEUED → RUNNING → COMPLETED. A task whose nodes hold another job's
 * state first pays its setup cost (offload + onload), counted as a context
 * switch when the evicted job is still running.
 */
import type { EventQueue } from './event-queue.ts'
import { nextTaskState, selectRunnable, startOperations, type NodeRuntimeState, type RuntimeSchedulerName, type RuntimeTask, type TaskState } from '../policies/runtime/hrrs.ts'

export interface TaskExecutorOptions {
  queue: EventQueue
  nodes: number
  scheduler: RuntimeSchedulerName
  /** Whether a job has finished (evicting a finished job's state is not a context switch). */
  isFinished: (jobId: string) => boolean
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
  /** Context-switch setup paid before the run, seconds (0 when the job's state was resident). */
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
}

export function createTaskExecutor (options: TaskExecutorOptions): TaskExecutor {
  const { queue: q, scheduler, isFinished } = options
  const nodes: Array<{ lockHolder: string | undefined, residentJob: string | undefined, expectedFreeS: number | undefined }> =
    Array.from({ length: options.nodes }, () => ({ lockHolder: undefined, residentJob: undefined, expectedFreeS: undefined }))
  const pending: RuntimeTask[] = []
  const entries = new Map<string, { durationS: number, state: TaskState, onDone: (run: TaskRun) => void }>()
  const stats: TaskExecutorStats = { contextSwitches: 0, busyNodeSeconds: 0, tasksStarted: 0, waitSumS: 0, waitMaxS: 0 }

  function dispatch (): void {
    if (pending.length === 0) return
    for (const task of selectRunnable(pending, nodes as NodeRuntimeState[], q.nowS, scheduler)) {
      pending.splice(pending.indexOf(task), 1)
      const ops = startOperations(task, nodes as NodeRuntimeState[])
      const switched = ops.some(op => op.kind === 'onload')
      if (ops.some(op => op.kind === 'offload' && !isFinished(op.jobId))) stats.contextSwitches++
      // The scheduler sees the estimate (E + setup), not the jittered duration the simulation draws.
      const expectedFreeS = q.nowS + (switched ? task.setupS : 0) + task.execS
      for (const n of task.nodes) Object.assign(nodes[n]!, { lockHolder: task.taskId, residentJob: task.jobId, expectedFreeS })
      const entry = entries.get(task.taskId)!
      entry.state = nextTaskState(entry.state, 'start')
      const waitS = q.nowS - task.readyS
      stats.waitSumS += waitS
      stats.waitMaxS = Math.max(stats.waitMaxS, waitS)
      stats.tasksStarted++
      stats.busyNodeSeconds += entry.durationS * task.nodes.length
      const run: TaskRun = { startedS: q.nowS, setupS: switched ? task.setupS : 0 }
      q.after(run.setupS + entry.durationS, () => {
        entry.state = nextTaskState(entry.state, 'complete')
        entries.delete(task.taskId)
        for (const n of task.nodes) Object.assign(nodes[n]!, { lockHolder: undefined, expectedFreeS: undefined })
        entry.onDone(run)
        dispatch()
      })
    }
  }

  return {
    stats,
    submit (task, durationS, onDone) {
      if (entries.has(task.taskId)) throw new RangeError(`task ${task.taskId} already submitted`)
      entries.set(task.taskId, { durationS, state: 'QUEUED', onDone })
      pending.push(task)
      // A new task only adds claims: if it cannot start itself, nothing else can start now either.
      if (task.nodes.every(n => nodes[n]!.lockHolder === undefined)) dispatch()
    },
  }
}
