/**
 * The orders of a stage queue (DistRS §5.2, "Scheduling policy").
 * Earliest-Batch-First: the request whose batch has the earliest estimated
 * completion goes first; within one priority (one batch), first come first
 * served by the time it entered this stage's queue, then by a sequence number
 * so that ties are deterministic.
 */
import type { QueueDiscipline } from './types.ts'

export interface QueueKey {
  /** The batch's estimated completion, seconds (EBF priority). */
  readonly priorityS: number
  /** When the request entered this stage's queue, seconds. */
  readonly enqueuedS: number
  /** Global enqueue counter: the last tie-break. */
  readonly seq: number
}

export function earliestBatchFirst (a: QueueKey, b: QueueKey): boolean {
  if (a.priorityS !== b.priorityS) return a.priorityS < b.priorityS
  return firstComeFirstServed(a, b)
}

export function firstComeFirstServed (a: QueueKey, b: QueueKey): boolean {
  if (a.enqueuedS !== b.enqueuedS) return a.enqueuedS < b.enqueuedS
  return a.seq < b.seq
}

export function queueOrder (discipline: QueueDiscipline): (a: QueueKey, b: QueueKey) => boolean {
  return discipline === 'ebf' ? earliestBatchFirst : firstComeFirstServed
}
