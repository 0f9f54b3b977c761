import t from 'tap'
import { createSeededRandom } from '../../../core/seeded-random.ts'
import { parseKey } from '../../../agent/state/keys.ts'
import { newStoredEntry, type StoredEntry } from '../../../agent/state/stored-entry.ts'
import {
  checkResidencyFilter, createResidencyIndex, decodeCursor, encodeCursor, maxKeysExamined, maxPageKeys, pageLimit, tierOf,
  type ResidencyFilter, type ResidencyIndex, type ResidencyTotals,
} from '../../../agent/state/residency-index.ts'
import { ResidencyQuerySchema } from '../../../agent/api/wire/state.ts'

const extent = { offset: 0, length: 4096 }
const entryOf = (ns: string, name: string, bytes = 4096, host = true): StoredEntry =>
  newStoredEntry(parseKey(`${ns}/${name}:param@[0]/[${bytes}]:u8#v1`), host ? extent : undefined, 0)
const add = (index: ResidencyIndex, e: StoredEntry): StoredEntry => { index.set(e.key.text, e); return e }

/** What summary() must answer, by walking every entry. */
function referenceTotals (index: ResidencyIndex, filter: ResidencyFilter): Omit<ResidencyTotals, 'dedupRatio'> {
  const rows = new Map<string, { keys: number, logicalBytes: number, storedBytes: number }>()
  const result = { logicalBytes: 0, storedBytes: 0, keyCounts: { host: 0, nvme: 0 } }
  for (const e of index.values()) {
    const ns = e.key.namespace
    if (!e.key.text.startsWith(filter.prefix ?? '') || (filter.namespace !== undefined && ns !== filter.namespace)) continue
    if (filter.job !== undefined && ns !== filter.job && !ns.startsWith(`${filter.job}/`)) continue
    if (filter.tier !== undefined && tierOf(e) !== filter.tier) continue
    const row = rows.get(ns) ?? { keys: 0, logicalBytes: 0, storedBytes: 0 }
    const logical = e.key.bytes * Math.max(1, e.replicas)
    row.keys++; row.logicalBytes += logical; row.storedBytes += e.key.bytes
    rows.set(ns, row)
    result.logicalBytes += logical; result.storedBytes += e.key.bytes; result.keyCounts[tierOf(e)]++
  }
  const namespaces = [...rows].sort(([a], [b]) => a < b ? -1 : 1).map(([namespace, row]) => ({ namespace, ...row, quotaBytes: null }))
  return { ...result, namespaces }
}

const filters: ResidencyFilter[] = [
  {}, { tier: 'nvme' }, { prefix: 'j1/' }, { prefix: 'j1/a' }, { prefix: 'j1/a/w1' }, { prefix: 'j1/a/' }, { namespace: 'j1/a' },
  { job: 'j1' }, { job: 'j1', tier: 'host' }, { job: 'j1', prefix: 'j1/a/w' }, { namespace: 'j2', prefix: 'j1/' }, { prefix: 'zz' },
]

t.test('the totals follow every change (store, drop, spill, promote, adopted shm, replicas) as a full walk would count them', async t => {
  const index = createResidencyIndex()
  const rng = createSeededRandom(11)
  const namespaces = ['j1', 'j1/a', 'j1/a/b', 'j1/ab', 'j2']
  for (let step = 0; step < 3000; step++) {
    const live = [...index.values()]
    const op = rng.int(0, 9)
    if (op < 4 || live.length === 0) {
      const e = entryOf(rng.pick(namespaces), `w${rng.int(0, 60)}`, 4096 * rng.int(1, 4), rng.next() < 0.5)
      if (!index.has(e.key.text)) add(index, e)
    } else if (op === 4) {
      index.delete(rng.pick(live).key.text)
    } else if (op === 5) {
      rng.pick(live).host = undefined
    } else if (op === 6) {
      rng.pick(live).host = extent
    } else if (op === 7) {
      const e = rng.pick(live)
      e.shm = e.shm === undefined ? { region: {} as never, offset: 0 } : undefined
    } else {
      rng.pick(live).replicas += rng.next() < 0.7 ? 1 : -1
    }
    if (step % 100 === 0 || step === 2999) {
      for (const filter of filters) {
        const { dedupRatio, ...totals } = index.summary(filter, {})
        t.same(totals, referenceTotals(index, filter), `step ${step}, ${JSON.stringify(filter)}`)
        t.equal(dedupRatio, totals.storedBytes > 0 ? totals.logicalBytes / totals.storedBytes : null)
      }
      t.same(index.namespaces(), [...new Set([...index.values()].map(e => e.key.namespace))].sort())
      for (const tier of ['host', 'nvme'] as const) {
        const expected = [...index.values()].filter(e => tierOf(e) === tier).map(e => e.key.text).sort()
        t.same(index.select({ tier }).map(e => e.key.text), expected, `step ${step}: the ${tier} keys in order`)
      }
    }
  }
  const dropped = [...index.values()][0]!
  index.delete(dropped.key.text)
  const before = index.summary({}, {})
  dropped.host = undefined
  dropped.replicas += 3
  t.same(index.summary({}, {}), before, 'an entry out of the index changes no total')
  t.same(index.summary({ namespace: 'j1/a' }, { 'j1/a': 1 << 20 }).namespaces.map(n => n.quotaBytes), [1 << 20], 'with the quota')
  add(index, entryOf('constructor', 'x'))
  t.same(index.summary({ namespace: 'constructor' }, {}).namespaces.map(n => n.quotaBytes), [null], 'a namespace named like an Object.prototype member has no quota (it showed a function)')
})

t.test('pages list the selected keys in key order, once each, whatever is stored and dropped between pages', async t => {
  const index = createResidencyIndex()
  const rng = createSeededRandom(3)
  const stable = new Set<string>()
  for (let i = 0; i < 500; i++) stable.add(add(index, entryOf(`j${i % 3}/a`, `s${i}`, 4096, i % 4 !== 0)).key.text)
  for (const filter of [{}, { job: 'j1' }, { namespace: 'j2/a', tier: 'nvme' as const }, { prefix: 'j0/a/s1' }]) {
    const expected = [...stable].filter(k => matches(index.get(k)!, filter)).sort()
    const seen: string[] = []
    let after: string | undefined
    let churn = 0
    do {
      const page = index.page(filter, after, 7)
      seen.push(...page.entries.map(e => e.key.text).filter(k => stable.has(k)))
      after = page.after
      // Between pages: keys come and go before and after the cursor.
      for (let i = 0; i < 5; i++) add(index, entryOf(`j${rng.int(0, 2)}/a`, `c${churn++}`, 4096, rng.next() < 0.5))
      for (const e of [...index.values()].filter(e => !stable.has(e.key.text)).slice(0, 3)) index.delete(e.key.text)
    } while (after !== undefined)
    t.same(seen, expected, `${JSON.stringify(filter)}: every stable key once, in order`)
  }
  t.same(index.page({ prefix: 'j1/', namespace: 'j2/a' }, undefined, 10), { entries: [], after: undefined }, 'filters no key can satisfy')
  const last = index.page({}, undefined, maxPageKeys)
  t.equal(last.after, undefined, 'a page holding the last key ends the walk')
})

function matches (e: StoredEntry, filter: ResidencyFilter): boolean {
  const ns = e.key.namespace
  return e.key.text.startsWith(filter.prefix ?? '') && (filter.namespace === undefined || ns === filter.namespace) &&
    (filter.job === undefined || ns === filter.job || ns.startsWith(`${filter.job}/`)) && (filter.tier === undefined || tierOf(e) === filter.tier)
}

t.test('at 100k keys a summary visits no key and a page only the keys it examines', async t => {
  const index = createResidencyIndex()
  const total = 100_000
  for (let i = 0; i < total; i++) add(index, entryOf(`job${i % 10}/actor`, `layer${String(i).padStart(6, '0')}`, 4096, i % 7 !== 0))
  const visits = (call: () => unknown): number => { const before = index.keysVisited; call(); return index.keysVisited - before }

  t.equal(visits(() => index.summary({}, {})), 0, 'summary: O(namespaces)')
  t.equal(visits(() => index.summary({ job: 'job3', tier: 'nvme' }, {})), 0, 'summary of a job on a tier')
  t.equal(visits(() => index.summary({ prefix: 'job3/' }, {})), 0, 'a prefix that ends at a namespace boundary')
  t.equal(index.summary({}, {}).keyCounts.nvme, Math.ceil(total / 7))
  t.equal(visits(() => index.summary({ prefix: 'job3/actor/layer0001' }, {})), 10, 'a prefix inside a namespace walks only the keys under it')

  const first = index.page({}, undefined, 1000)
  t.equal(first.entries.length, 1000)
  t.equal(visits(() => index.page({}, undefined, 1000)), 1000, 'the first page: its keys')
  const middleCursor = [...index.keys()].sort()[total / 2]!
  const middle = index.page({}, middleCursor, 1000)
  t.equal(middle.entries[0]!.key.text > middleCursor, true)
  t.equal(visits(() => index.page({}, middleCursor, 1000)), 1000, 'a middle page: its keys, after a seek')
  t.equal(visits(() => index.page({ namespace: 'job4/actor' }, undefined, 1000)), 1000, 'a namespace page seeks to the namespace')
  const nvmePage = index.page({ tier: 'nvme' }, undefined, 1000)
  t.equal(nvmePage.entries.length, 1000)
  t.equal(visits(() => index.page({ tier: 'nvme' }, undefined, 1000)), 1000, 'a tier page walks that tier\'s keys (one in seven is on NVMe)')
  const filter: ResidencyFilter = { job: 'job2', tier: 'nvme', prefix: 'job2/actor/layer000' }
  t.same(index.page(filter, undefined, 1000).entries.map(e => e.key.text), [...index.values()].filter(e => matches(e, filter)).map(e => e.key.text).sort())
  for (const e of index.values()) e.host = extent
  t.same(index.page({ tier: 'nvme' }, undefined, 1000), { entries: [], after: undefined }, 'nothing left on NVMe: nothing examined')

  // A namespace filter skips the keys of namespaces nested in it, and stops at the budget.
  for (let i = 0; i < total; i++) add(index, entryOf('deep/below', `k${i}`))
  let after: string | undefined
  let pages = 0
  let found = 0
  let visited = 0
  do {
    const before = index.keysVisited
    const page = index.page({ namespace: 'deep' }, after, 100)
    visited += index.keysVisited - before
    t.ok(index.keysVisited - before <= maxKeysExamined, `page ${pages} examines at most ${maxKeysExamined} keys`)
    found += page.entries.length
    after = page.after
    pages++
  } while (after !== undefined)
  t.equal(found, 0, 'no key of exactly "deep"')
  t.equal(visited, total, 'the walk examined each key once')
  t.equal(pages, Math.ceil(total / maxKeysExamined), 'in pages of the budget')
})

t.test('bad filters, limits and cursors are ERR_BAD_REQUEST; a cursor names the key it ends after', async t => {
  for (const filter of [{ tier: 'gpu' }, { namespace: 'a//b' }, { job: '' }, { job: 'x/' }, { namespace: 'a b' }, { prefix: 'x'.repeat(1025) }]) {
    t.throws(() => checkResidencyFilter(filter as ResidencyFilter), { code: 'ERR_BAD_REQUEST' }, JSON.stringify(filter).slice(0, 60))
  }
  checkResidencyFilter({ prefix: 'job1/a', tier: 'nvme', namespace: 'job1/a', job: 'job1' })
  for (const limit of [0, -1, 1.5, maxPageKeys + 1, Number.NaN]) t.throws(() => pageLimit(limit), { code: 'ERR_BAD_REQUEST' }, `limit ${limit}`)
  t.equal(pageLimit(undefined), 1000)
  t.equal(pageLimit(maxPageKeys), maxPageKeys)
  t.equal(ResidencyQuerySchema.properties.limit.anyOf === undefined && ResidencyQuerySchema.properties.limit.maximum, maxPageKeys, 'the wire schema has the same limit')
  const key = 'job1/a/w:param@[0]/[4096]:u8#v1'
  t.equal(decodeCursor(encodeCursor(key)), key)
  for (const cursor of ['', 'not a cursor', 'a=', encodeCursor('no key'), encodeCursor(key).slice(0, -1), 'x'.repeat(1401)]) {
    t.throws(() => decodeCursor(cursor), { code: 'ERR_BAD_REQUEST' }, `cursor ${JSON.stringify(cursor.slice(0, 20))}`)
  }
})
