/**
 * The pool keys that can spill, kept in spill order (spill-order.ts) while
 * the index changes, so choosing a victim costs O(log n) instead of sorting
 * every key on each allocation (PlexRL §4.5: victims by the scheduler's
 * hints, then LRU).
 *
 * Contracts:
 * - A key is queued iff it is spillable: it has a pool copy (`host`), nothing
 *   pins it, and it is still the index's entry. `update(entry)` re-evaluates
 *   one key (queues it, moves it, or removes it); the owner calls it after
 *   anything that changes those or `lastUseMs`: stored, used, unpinned (from
 *   the pin's idle hook), spilled, promoted, dropped. A key pinned while
 *   queued stays queued until `shift` meets it and re-checks it (then it
 *   leaves until its unpin updates it), so pinning needs no hook.
 * - Order: compareSpill over (the hinted next use from the hints last given
 *   to setHints, lastUseMs), ties by creation order (StoredEntry.seq), which
 *   is what spillOrder's stable sort over the index's insertion order gives.
 *   Sort fields are read when a key is updated, not when it is compared.
 * - Costs, n queued keys: update and shift O(log n + hints); setHints
 *   re-ranks every queued key, O(n · hints).
 * All on the event loop.
 */
import { compareSpill, nextUseOf, type UseHint } from './spill-order.ts'
import type { StoredEntry } from './stored-entry.ts'

export interface SpillQueue {
  /** Queues, moves or removes `entry` after a change (see the contract). */
  update(entry: StoredEntry): void
  /** Replaces the hints (as the scheduler does) and re-ranks every queued key. */
  setHints(hints: readonly UseHint[]): void
  /**
   * Removes and returns the first spillable key in spill order for which
   * `skip` is false; the keys skipped stay queued. Undefined when none is left.
   */
  shift(skip?: (entry: StoredEntry) => boolean): StoredEntry | undefined
  /** Keys queued (including any pinned since they were queued). */
  readonly size: number
}

export interface SpillQueueComponents {
  /** The StateManager's index, key text → entry. */
  index: ReadonlyMap<string, StoredEntry>
}

interface Ranked {
  entry: StoredEntry
  lastUseMs: number
  nextUseMs: number | undefined
  /** Index in the heap array. */
  at: number
}

const before = (a: Ranked, b: Ranked): boolean => {
  const order = compareSpill(a, b)
  return order < 0 || (order === 0 && a.entry.seq < b.entry.seq)
}

export function createSpillQueue (components: SpillQueueComponents): SpillQueue {
  const { index } = components
  /** A binary min-heap in spill order; each element knows its position. */
  const heap: Ranked[] = []
  const queued = new Map<StoredEntry, Ranked>()
  let hints: readonly UseHint[] = []

  const spillable = (e: StoredEntry): boolean => e.host !== undefined && e.pins === 0 && index.get(e.key.text) === e

  function place (r: Ranked, at: number): void {
    heap[at] = r
    r.at = at
  }

  function siftUp (r: Ranked): void {
    let at = r.at
    while (at > 0) {
      const parent = heap[(at - 1) >> 1]!
      if (!before(r, parent)) break
      place(parent, at)
      at = (at - 1) >> 1
    }
    place(r, at)
  }

  function siftDown (r: Ranked): void {
    let at = r.at
    for (;;) {
      let child = 2 * at + 1
      if (child >= heap.length) break
      if (child + 1 < heap.length && before(heap[child + 1]!, heap[child]!)) child++
      if (!before(heap[child]!, r)) break
      place(heap[child]!, at)
      at = child
    }
    place(r, at)
  }

  function remove (r: Ranked): void {
    queued.delete(r.entry)
    const last = heap.pop()!
    if (last === r) return
    place(last, r.at)
    siftDown(last)
    siftUp(last)
  }

  function rank (r: Ranked): void {
    r.lastUseMs = r.entry.lastUseMs
    r.nextUseMs = nextUseOf(r.entry.key.text, hints)
  }

  return {
    update (entry) {
      const r = queued.get(entry)
      if (!spillable(entry)) {
        if (r !== undefined) remove(r)
        return
      }
      if (r === undefined) {
        const added: Ranked = { entry, lastUseMs: 0, nextUseMs: undefined, at: heap.length }
        rank(added)
        heap.push(added)
        queued.set(entry, added)
        siftUp(added)
        return
      }
      if (r.lastUseMs === entry.lastUseMs) return // hints unchanged since it was ranked: same place
      rank(r)
      siftDown(r)
      siftUp(r)
    },
    setHints (list) {
      hints = list
      for (const r of heap) rank(r)
      // Floyd's heap construction: O(n).
      for (let at = (heap.length >> 1) - 1; at >= 0; at--) siftDown(heap[at]!)
    },
    shift (skip) {
      let skipped: Ranked[] | undefined
      let found: StoredEntry | undefined
      while (heap.length > 0) {
        const r = heap[0]!
        remove(r)
        if (!spillable(r.entry)) continue // pinned since it was queued: back when unpinned
        if (skip?.(r.entry) === true) { (skipped ??= []).push(r); continue }
        found = r.entry
        break
      }
      for (const r of skipped ?? []) {
        r.at = heap.length
        heap.push(r)
        queued.set(r.entry, r)
        siftUp(r)
      }
      return found
    },
    get size () { return heap.length },
  }
}
