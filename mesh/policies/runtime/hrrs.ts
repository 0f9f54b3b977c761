/**
 * Runtime scheduling on shared node groups (PlexRL §4.4, §5.2.2–5.2.3): which
 * queued GPU operation runs next once a node's device lock is free.
 *
 * HRRS (Highest Response Ratio with Setup), Eq. (3)–(4) as reconstructed from
 * the text (the equations were lost): for a queued task with wait w (seconds
 * since it became ready) and estimated execution time E,
 *   S_eff = E + 1[switch] · C                                         (3)
 *   priority = (w + S_eff) / S_eff                                    (4)
 * where C is the setup cost (offload the resident job's state, onload this
 * job's) and 1[switch] = 1 when any node of the task holds another job's
 * state. A fresh task has priority 1; priority grows linearly and without
 * bound in w, so no task starves; a task needing a switch grows more slowly,
 * which batches a resident job's consecutive operations. FCFS, the baseline,
 * orders by ready time.
 *
 * Lock-gated dispatch (§5.2.3): tasks are considered in priority order; a
 * task starts only when the device lock of every node of its gang is free.
 * A task that cannot start claims its free nodes until its shadow time (the
 * latest expected release among its locked nodes; unknown = never): a
 * lower-priority task may use a claimed node only if it is expected to end
 * by then (EASY-style backfill at the lock level), so the highest-priority
 * task is never delayed by one behind it and is never overtaken
 * indefinitely. Ties break by ready time, then task id (deterministic).
 *
 * Task FSM: QUEUED → RUNNING → COMPLETED. Starting a task that needs a switch
 * expands into offload/onload operations for the StateManager before the run
 * (§5.2.2 "automatic context switching").
 */

export const runtimeSchedulerNames = ['hrrs', 'fcfs'] as const
export type RuntimeSchedulerName = typeof runtimeSchedulerNames[number]

export type TaskState = 'QUEUED' | 'RUNNING' | 'COMPLETED'

export interface RuntimeTask {
  readonly taskId: string
  readonly jobId: string
  /** Node indices of the task's gang. */
  readonly nodes: readonly number[]
  /** When the task became ready, seconds. */
  readonly readyS: number
  /** Estimated execution time E, seconds (> 0). */
  readonly execS: number
  /** Setup cost C of a context switch to this job, seconds. */
  readonly setupS: number
}

export interface NodeRuntimeState {
  /** Task holding the node's device lock, if any. */
  readonly lockHolder: string | undefined
  /** Job whose state is resident on the node's GPUs, if any. */
  readonly residentJob: string | undefined
  /** When the lock holder is expected to release the node, seconds (unknown: never). */
  readonly expectedFreeS?: number
}

export type TaskOperation =
  | { readonly kind: 'offload', readonly node: number, readonly jobId: string }
  | { readonly kind: 'onload', readonly node: number, readonly jobId: string }
  | { readonly kind: 'run', readonly taskId: string }

export function needsContextSwitch (task: RuntimeTask, nodes: readonly NodeRuntimeState[]): boolean {
  return task.nodes.some(n => nodes[n]?.residentJob !== task.jobId)
}

/** Eq. (3). */
export function effectiveServiceS (task: RuntimeTask, switchNeeded: boolean): number {
  return task.execS + (switchNeeded ? task.setupS : 0)
}

/** Eq. (4). */
export function hrrsPriority (task: RuntimeTask, nowS: number, switchNeeded: boolean): number {
  const service = Math.max(effectiveServiceS(task, switchNeeded), 1e-9)
  return (Math.max(0, nowS - task.readyS) + service) / service
}

/**
 * The queued tasks to start now, in start order. Pure: the caller applies
 * the returned starts (locks, residency) itself.
 */
export function selectRunnable (queue: readonly RuntimeTask[], nodes: readonly NodeRuntimeState[], nowS: number, scheduler: RuntimeSchedulerName): RuntimeTask[] {
  // A task whose nodes are all locked can neither start nor claim a free node this round.
  const relevant = queue.filter(task => task.nodes.some(n => nodes[n]?.lockHolder === undefined))
  const keyed = relevant.map(task => ({ task, key: scheduler === 'hrrs' ? hrrsPriority(task, nowS, needsContextSwitch(task, nodes)) : nowS - task.readyS }))
  keyed.sort((x, y) => y.key - x.key || x.task.readyS - y.task.readyS || (x.task.taskId < y.task.taskId ? -1 : x.task.taskId > y.task.taskId ? 1 : 0))
  // Node -> deadline: a lower-priority task may use a claimed node only if it ends by then
  // (-Infinity: taken by a task started in this round).
  const deadline = new Map<number, number>()
  const starts: RuntimeTask[] = []
  for (const { task } of keyed) {
    const endS = nowS + effectiveServiceS(task, needsContextSwitch(task, nodes))
    const locked = task.nodes.filter(n => nodes[n]?.lockHolder !== undefined)
    if (locked.length === 0 && task.nodes.every(n => endS <= (deadline.get(n) ?? Infinity))) {
      starts.push(task)
      for (const n of task.nodes) deadline.set(n, -Infinity)
      continue
    }
    // Shadow time: when every node could be free; unknown (no estimate, or claimed/taken in this round) = never.
    let shadowS = nowS
    for (const n of task.nodes) {
      const free = nodes[n]?.lockHolder === undefined ? (deadline.has(n) ? Infinity : nowS) : (nodes[n]!.expectedFreeS ?? Infinity)
      shadowS = Math.max(shadowS, free)
    }
    const claim = shadowS === Infinity ? nowS : shadowS
    for (const n of task.nodes) deadline.set(n, Math.min(deadline.get(n) ?? Infinity, claim))
  }
  return starts
}

/** The operations that start a task: offload/onload per node whose resident state belongs to another job, then the run. */
export function startOperations (task: RuntimeTask, nodes: readonly NodeRuntimeState[]): TaskOperation[] {
  const ops: TaskOperation[] = []
  for (const n of task.nodes) {
    const resident = nodes[n]?.residentJob
    if (resident === task.jobId) continue
    if (resident !== undefined) ops.push({ kind: 'offload', node: n, jobId: resident })
    ops.push({ kind: 'onload', node: n, jobId: task.jobId })
  }
  ops.push({ kind: 'run', taskId: task.taskId })
  return ops
}

/** The FSM: QUEUED -start-> RUNNING -complete-> COMPLETED; anything else throws. */
export function nextTaskState (state: TaskState, event: 'start' | 'complete'): TaskState {
  if (state === 'QUEUED' && event === 'start') return 'RUNNING'
  if (state === 'RUNNING' && event === 'complete') return 'COMPLETED'
  throw new RangeError(`task cannot ${event} from ${state}`)
}
