/**
 * A binary min-heap under a caller's strict order `before(a, b)` (a is served
 * first); push and pop are O(log n), peek O(1), not safe to mutate an item's
 * ordering fields while it is queued. The event queue of every simulator is
 * this heap under (time, insertion order); the replay simulator's stage queues
 * and the live reward proxy's are it under earliestBatchFirst or
 * firstComeFirstServed.
 */
export interface PriorityHeap<T> {
  readonly size: number
  push(item: T): void
  /** The first item under the order, or undefined when empty. */
  peek(): T | undefined
  pop(): T | undefined
  clear(): void
}

export function createPriorityHeap<T> (before: (a: T, b: T) => boolean): PriorityHeap<T> {
  const items: T[] = []
  return {
    get size () { return items.length },
    push (item) {
      items.push(item)
      let i = items.length - 1
      while (i > 0) {
        const parent = (i - 1) >> 1
        if (!before(items[i]!, items[parent]!)) break
        const x = items[i]!; items[i] = items[parent]!; items[parent] = x
        i = parent
      }
    },
    peek () { return items[0] },
    pop () {
      const top = items[0]
      const last = items.pop()
      if (items.length > 0 && last !== undefined) {
        items[0] = last
        let i = 0
        for (;;) {
          const l = 2 * i + 1
          const r = l + 1
          let m = i
          if (l < items.length && before(items[l]!, items[m]!)) m = l
          if (r < items.length && before(items[r]!, items[m]!)) m = r
          if (m === i) break
          const x = items[i]!; items[i] = items[m]!; items[m] = x
          i = m
        }
      }
      return top
    },
    clear () { items.length = 0 },
  }
}
