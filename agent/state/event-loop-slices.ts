/**
 * Loops over every key of a large store (NVMe recovery: journal replay, the
 * key index) run in slices of `sliceItems` items with the event loop running
 * between them, so the local API keeps answering (status, ERR_STARTING) and
 * timers keep firing while they run.
 */
import { setImmediate as nextTurn } from 'node:timers/promises'

/** Items handled between two yields: a few ms of per-key work (recovery costs ~10 µs a key). */
export const sliceItems = 1024

/** Resolves on the event loop's next turn (after pending I/O callbacks). */
export const yieldToEventLoop = (): Promise<void> => nextTurn()

/** A counter for one loop: call it once per item and await it; it yields after every `every` items. */
export function createSlicer (every = sliceItems): () => Promise<void> | undefined {
  let items = 0
  return () => ++items % every === 0 ? nextTurn() : undefined
}
