// The incremental spill order against the reference sort (spillOrder) over the same index, under random changes.
import t from 'tap'
import { parseKey } from '../../../agent/state/keys.ts'
import { createSpillQueue } from '../../../agent/state/spill-queue.ts'
import { nextUseOf, spillOrder, type UseHint } from '../../../agent/state/spill-order.ts'
import { newStoredEntry, pinEntry, type StoredEntry } from '../../../agent/state/stored-entry.ts'

const extent = { offset: 0, length: 4096 }
const entryOf = (ns: string, i: number, lastUseMs: number, host = true): StoredEntry =>
  newStoredEntry(parseKey(`${ns}/k${i}:param@[0]/[16]:u8#v1`), host ? extent : undefined, lastUseMs)

/** What spill() used to compute on every call: filter the index, look hints up, sort. */
function referenceOrder (index: Map<string, StoredEntry>, hints: UseHint[]): StoredEntry[] {
  const candidates = [...index.values()].filter(e => e.host !== undefined && e.pins === 0)
    .map(e => ({ entry: e, key: e.key.text, lastUseMs: e.lastUseMs, nextUseMs: nextUseOf(e.key.text, hints) }))
  return spillOrder(candidates).map(c => c.entry)
}

t.test('shift yields the reference order through stores, uses, pins, spills, promotions, drops and hint changes', async t => {
  const index = new Map<string, StoredEntry>()
  const queue = createSpillQueue({ index })
  let hints: UseHint[] = []
  let x = 4242
  const rand = (n: number): number => { x = (x * 1103515245 + 12345) % 2 ** 31; return x % n }
  const namespaces = ['job/a', 'job/b', 'job/c', 'other/x']
  const unpins: Array<() => void> = []
  let checks = 0
  for (let step = 0; step < 4000; step++) {
    const live = [...index.values()]
    const pick = (): StoredEntry | undefined => live[rand(live.length)]
    const op = rand(100)
    if (op < 30 || live.length === 0) {
      const e = entryOf(namespaces[rand(namespaces.length)]!, step, rand(50), rand(5) > 0)
      index.set(e.key.text, e)
      queue.update(e)
    } else if (op < 45) {
      const e = pick()!
      e.lastUseMs = 50 + step // used: most recent
      queue.update(e)
    } else if (op < 55) {
      const e = pick()!
      unpins.push(pinEntry(e, () => queue.update(e)))
    } else if (op < 65 && unpins.length > 0) {
      unpins.splice(rand(unpins.length), 1)[0]!()
    } else if (op < 75) {
      const e = pick()!
      if (e.pins === 0) { e.host = undefined; queue.update(e) } // spilled
    } else if (op < 82) {
      const e = pick()!
      if (e.host === undefined) { e.host = extent; queue.update(e) } // promoted
    } else if (op < 92) {
      const e = pick()!
      index.delete(e.key.text)
      queue.update(e) // dropped
    } else if (op < 96) {
      hints = namespaces.filter(() => rand(2) === 0).map(prefix => ({ prefix, atMs: rand(3) * 100 }))
      queue.setHints(hints)
    } else {
      // Drain the queue and compare, then queue everything again (update re-adds).
      const expected = referenceOrder(index, hints)
      const got: StoredEntry[] = []
      for (let e = queue.shift(); e !== undefined; e = queue.shift()) got.push(e)
      if (got.length !== expected.length || got.some((e, i) => e !== expected[i])) {
        t.fail(`step ${step}: order differs (${got.length} vs ${expected.length} keys)`)
        return
      }
      checks++
      for (const e of index.values()) queue.update(e)
    }
  }
  t.ok(checks > 50, `${checks} full comparisons`)
})

t.test('skipped keys stay queued; a key pinned after it was queued is passed over until unpinned', async t => {
  const index = new Map<string, StoredEntry>()
  const queue = createSpillQueue({ index })
  const [a, b, c] = [entryOf('job/a', 1, 1), entryOf('job/a', 2, 2), entryOf('job/a', 3, 3)]
  for (const e of [a, b, c]) { index.set(e.key.text, e); queue.update(e) }
  const unpin = pinEntry(b, () => queue.update(b))
  t.equal(queue.shift(e => e === a), c, 'a is kept, b pinned: c')
  t.equal(queue.size, 1, 'a stays queued; b left when shift met it pinned')
  unpin()
  t.equal(queue.shift(), a)
  t.equal(queue.shift(), b, 'back after its unpin')
  t.equal(queue.shift(), undefined)
})

t.test('hinted keys go after unhinted ones, the one needed latest first; re-ranked when hints change', async t => {
  const index = new Map<string, StoredEntry>()
  const queue = createSpillQueue({ index })
  const soon = entryOf('job/soon', 1, 0)
  const late = entryOf('job/late', 2, 0)
  const old = entryOf('job/none', 3, 1)
  const recent = entryOf('job/none', 4, 5)
  for (const e of [soon, late, old, recent]) { index.set(e.key.text, e); queue.update(e) }
  queue.setHints([{ prefix: 'job/soon', atMs: 100 }, { prefix: 'job/late', atMs: 900 }])
  const order: StoredEntry[] = []
  for (let e = queue.shift(); e !== undefined; e = queue.shift()) order.push(e)
  t.same(order.map(e => e.key.text), [old, recent, late, soon].map(e => e.key.text))
  for (const e of order) queue.update(e)
  queue.setHints([])
  t.same([queue.shift(), queue.shift()].map(e => e!.key.text), [soon, late].map(e => e.key.text), 'without hints: LRU, then creation order')
})

t.test('a queue of 100k keys: update and shift stay cheap as it grows (no sort per call)', async t => {
  const index = new Map<string, StoredEntry>()
  const queue = createSpillQueue({ index })
  /** Queues 2,000 new keys and spills half of the queue's first keys; per key, us. */
  const round = (): number => {
    const entries = Array.from({ length: 2000 }, (_, i) => entryOf('job/scale', index.size + i, index.size + i))
    const start = process.hrtime.bigint()
    for (const e of entries) {
      index.set(e.key.text, e)
      queue.update(e)
    }
    for (let i = 0; i < 1000; i++) {
      const e = queue.shift()!
      e.host = undefined
      queue.update(e)
    }
    return Number(process.hrtime.bigint() - start) / 1e3 / 3000
  }
  const times = Array.from({ length: 100 }, round)
  const early = Math.min(...times.slice(5, 15))
  const late = Math.min(...times.slice(-10))
  t.comment(`per operation: ${early.toFixed(2)} us at ~10k queued, ${late.toFixed(2)} us at ${queue.size} queued`)
  t.ok(queue.size >= 100_000)
  t.ok(late < 4 * early + 2, 'within a small factor')
})
