/**
 * Items kept in the order of a string key (JavaScript's `<`, which is byte
 * order for ASCII), one item per key, stored in blocks of at most
 * 2 × `blockItems` items (a list of sorted blocks, as Python's
 * sortedcontainers does): insert and remove cost O(log n + blockItems)
 * plus O(n / blockItems) to shift the block list, seeking a key costs
 * O(log n), and the items after it come in order at O(1) each.
 *
 * Contracts: an item's key must not change while it is in the list; the list
 * must not change while an iterator of `from` is being consumed (event-loop
 * code reads a page in one tick).
 */
export interface SortedList<T> {
  readonly size: number
  /** Adds `item`, or replaces the item that has its key. */
  insert(item: T): void
  /** Removes the item with `key`; whether there was one. */
  remove(key: string): boolean
  /** The items with a key >= `key` (> `key` when `exclusive`), in key order. */
  from(key: string, exclusive?: boolean): IterableIterator<T>
}

export function createSortedList<T> (keyOf: (item: T) => string, blockItems = 512): SortedList<T> {
  const blocks: T[][] = []
  /** The last (largest) key of each block. */
  const maxes: string[] = []
  let size = 0

  /** The first index in `items` (ascending by `read`) whose key is >= `key` (> when `exclusive`); items.length when none. */
  const seek = <U>(items: readonly U[], read: (u: U) => string, key: string, exclusive: boolean): number => {
    let lo = 0
    let hi = items.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      const k = read(items[mid]!)
      if (k < key || (exclusive && k === key)) lo = mid + 1
      else hi = mid
    }
    return lo
  }
  const same = (k: string): string => k

  return {
    get size () { return size },
    insert (item) {
      const key = keyOf(item)
      if (blocks.length === 0) {
        blocks.push([item])
        maxes.push(key)
        size++
        return
      }
      const b = Math.min(seek(maxes, same, key, false), blocks.length - 1)
      const block = blocks[b]!
      const i = seek(block, keyOf, key, false)
      if (i < block.length && keyOf(block[i]!) === key) {
        block[i] = item
        return
      }
      block.splice(i, 0, item)
      size++
      if (i === block.length - 1) maxes[b] = key
      if (block.length > 2 * blockItems) {
        const upper = block.splice(blockItems)
        blocks.splice(b + 1, 0, upper)
        maxes.splice(b, 1, keyOf(block[block.length - 1]!), keyOf(upper[upper.length - 1]!))
      }
    },
    remove (key) {
      const b = seek(maxes, same, key, false)
      if (b === blocks.length) return false
      const block = blocks[b]!
      const i = seek(block, keyOf, key, false)
      if (i === block.length || keyOf(block[i]!) !== key) return false
      block.splice(i, 1)
      size--
      if (block.length === 0) {
        blocks.splice(b, 1)
        maxes.splice(b, 1)
      } else if (i === block.length) {
        maxes[b] = keyOf(block[i - 1]!)
      }
      return true
    },
    * from (key, exclusive = false) {
      let b = seek(maxes, same, key, exclusive)
      if (b === blocks.length) return
      let i = seek(blocks[b]!, keyOf, key, exclusive)
      for (; b < blocks.length; b++, i = 0) {
        const block = blocks[b]!
        for (; i < block.length; i++) yield block[i]!
      }
    },
  }
}
