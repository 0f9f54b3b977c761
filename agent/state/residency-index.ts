/**
 * The StateManager's key index (key text → entry) that also answers
 * residency at any key count without walking every key:
 *
 * - Totals per namespace and tier (keys, stored bytes, logical bytes) are
 *   kept as entries come and go (`set`, `delete`) and change tier or
 *   replica count (stored-entry.ts reports every such change to the index
 *   holding the entry), so a summary costs O(namespaces). A `prefix` that
 *   ends inside a namespace's key names (`job42/actor/model.layers.3`) adds
 *   a walk of the keys under it (in key order, from a seek).
 * - Entries are also kept in key order (core/sorted-list.ts), all of them
 *   and each tier's apart, so a page is a seek to its start plus one step per
 *   key examined: the start is after the cursor (the last key the previous
 *   page examined) and at the filters' common prefix, in the list of the
 *   filter's tier if it names one. Only a namespace filter skips keys (those
 *   of namespaces nested in it); a page examines at most `maxKeysExamined`
 *   keys and answers a short (even empty) page with a cursor to go on from
 *   when it had to skip more. Keys added or removed between pages do not disturb a walk:
 *   a key present from the first page to the last is returned exactly once.
 *
 * Units: bytes. Logical bytes count a key once per replica (at least once),
 * stored bytes once (capacity-accounting.ts). Event-loop only.
 */
import { AgentError } from '../../core/errors.ts'
import { createSortedList, type SortedList } from '../../core/sorted-list.ts'
import { quotaOf, type NamespaceUsage } from './capacity-accounting.ts'
import { isNamespace, parseKey } from './keys.ts'
import { hasHostCopy, type EntryObserver, type StoredEntry } from './stored-entry.ts'

export type StoredTier = 'host' | 'nvme'
export const storedTiers: readonly StoredTier[] = ['host', 'nvme']

/** Which keys a residency summary or page covers; absent fields select everything. */
export interface ResidencyFilter {
  /** Keys whose text starts with this. */
  prefix?: string
  /** Keys whose tier residency reports as this (host: a pool or adopted shared-memory copy). */
  tier?: StoredTier
  /** Keys of exactly this namespace (not the namespaces under it), as quotas count them. */
  namespace?: string
  /** Keys of the namespace `job` and of those under it (`job/…`): a live job's keys. */
  job?: string
}

/** The totals of the keys a filter selects. */
export interface ResidencyTotals {
  logicalBytes: number
  storedBytes: number
  /** logical / stored bytes; null when no key is selected. */
  dedupRatio: number | null
  /** Per namespace holding selected keys, sorted by namespace. */
  namespaces: NamespaceUsage[]
  /** Selected keys by tier. */
  keyCounts: Record<StoredTier, number>
}

export interface ResidencyIndexPage {
  /** Selected entries in key order. */
  entries: StoredEntry[]
  /** The last key examined when keys may follow (the next page starts after it); undefined at the end. */
  after: string | undefined
}

export interface ResidencyIndex extends Map<string, StoredEntry> {
  /** Totals of the keys `filter` selects, with each namespace's configured quota. O(namespaces) (see the module comment for `prefix`). */
  summary(filter: ResidencyFilter, quotaBytes: Readonly<Record<string, number>>): ResidencyTotals
  /** Up to `limit` selected entries with a key after `after` (from the first key when undefined), in key order. */
  page(filter: ResidencyFilter, after: string | undefined, limit: number): ResidencyIndexPage
  /** Every selected entry in key order (O(selected keys + keys skipped in its range): in-process readers and tests). */
  select(filter: ResidencyFilter): StoredEntry[]
  /** Namespaces holding keys, sorted. O(namespaces). */
  namespaces(): string[]
  /** Entries examined one by one so far (pages, walks under a prefix): how tests check what a call costs. */
  readonly keysVisited: number
}

/**
 * A page holds 1..maxPageKeys keys, pageKeys when the caller does not say.
 * The largest page is what bounds a request's time on the event loop: about
 * 4 us a key with its JSON, so some 10 ms for 2000 (test/bench/state-residency.bench.ts).
 */
export const pageKeys = 1000
export const maxPageKeys = 2000
/** The most keys one page examines (keys its filters skip included). */
export const maxKeysExamined = 20_000

export const tierOf = (e: StoredEntry): StoredTier => hasHostCopy(e) ? 'host' : 'nvme'
const byKey = (e: StoredEntry): string => e.key.text

export function createResidencyIndex (): ResidencyIndex {
  return new IndexWithResidency()
}

interface Totals { keys: number, storedBytes: number, logicalBytes: number }
const noTotals = (): Totals => ({ keys: 0, storedBytes: 0, logicalBytes: 0 })

class IndexWithResidency extends Map<string, StoredEntry> implements ResidencyIndex, EntryObserver {
  readonly #ordered = createSortedList<StoredEntry>(byKey)
  readonly #byTier: Record<StoredTier, SortedList<StoredEntry>> = { host: createSortedList(byKey), nvme: createSortedList(byKey) }
  readonly #byNamespace = new Map<string, Record<StoredTier, Totals>>()
  /** The tier of the entry being changed, from retract() to account() (they come in pairs, in one tick). */
  #tierBefore: StoredTier | undefined
  #visited = 0

  get keysVisited (): number { return this.#visited }

  override set (key: string, entry: StoredEntry): this {
    const old = super.get(key)
    if (old === entry) return this
    if (entry.key.text !== key) throw new TypeError(`an entry of ${entry.key.text} indexed as ${key}`)
    if (old !== undefined) this.delete(key)
    super.set(key, entry)
    this.#ordered.insert(entry)
    this.#byTier[tierOf(entry)].insert(entry)
    entry.observer = this
    this.#add(entry, 1)
    return this
  }

  override delete (key: string): boolean {
    const entry = super.get(key)
    if (entry === undefined) return false
    super.delete(key)
    this.#ordered.remove(key)
    this.#byTier[tierOf(entry)].remove(key)
    this.#add(entry, -1)
    entry.observer = undefined
    return true
  }

  override clear (): void {
    for (const key of [...this.keys()]) this.delete(key)
  }

  retract (entry: StoredEntry): void {
    this.#tierBefore = tierOf(entry)
    this.#add(entry, -1)
  }

  account (entry: StoredEntry): void {
    const tier = tierOf(entry)
    if (this.#tierBefore !== undefined && this.#tierBefore !== tier) {
      this.#byTier[this.#tierBefore].remove(entry.key.text)
      this.#byTier[tier].insert(entry)
    }
    this.#tierBefore = undefined
    this.#add(entry, 1)
  }

  #add (entry: StoredEntry, sign: 1 | -1): void {
    const { namespace, bytes } = entry.key
    let totals = this.#byNamespace.get(namespace)
    if (totals === undefined) {
      totals = { host: noTotals(), nvme: noTotals() }
      this.#byNamespace.set(namespace, totals)
    }
    const t = totals[tierOf(entry)]
    t.keys += sign
    t.storedBytes += sign * bytes
    t.logicalBytes += sign * bytes * Math.max(1, entry.replicas)
    if (totals.host.keys === 0 && totals.nvme.keys === 0) this.#byNamespace.delete(namespace)
  }

  summary (filter: ResidencyFilter, quotaBytes: Readonly<Record<string, number>>): ResidencyTotals {
    const prefix = filter.prefix ?? ''
    const rows = new Map<string, Record<StoredTier, Totals>>()
    /** Namespaces the prefix ends inside of: only some of their keys are under it. */
    const partial = new Set<string>()
    for (const [namespace, totals] of this.#byNamespace) {
      if (!inJob(namespace, filter)) continue
      const keyStart = `${namespace}/`
      if (keyStart.startsWith(prefix)) rows.set(namespace, totals)
      else if (prefix.startsWith(keyStart)) partial.add(namespace)
    }
    if (partial.size > 0) {
      for (const e of this.#ordered.from(prefix)) {
        if (!e.key.text.startsWith(prefix)) break
        this.#visited++
        if (!partial.has(e.key.namespace)) continue
        let totals = rows.get(e.key.namespace)
        if (totals === undefined) {
          totals = { host: noTotals(), nvme: noTotals() }
          rows.set(e.key.namespace, totals)
        }
        const t = totals[tierOf(e)]
        t.keys++
        t.storedBytes += e.key.bytes
        t.logicalBytes += e.key.bytes * Math.max(1, e.replicas)
      }
    }
    const result: ResidencyTotals = { logicalBytes: 0, storedBytes: 0, dedupRatio: null, namespaces: [], keyCounts: { host: 0, nvme: 0 } }
    for (const [namespace, totals] of rows) {
      const row = { namespace, keys: 0, logicalBytes: 0, storedBytes: 0, quotaBytes: quotaOf(quotaBytes, namespace) }
      for (const tier of filter.tier !== undefined ? [filter.tier] : storedTiers) {
        const t = totals[tier]
        row.keys += t.keys
        row.logicalBytes += t.logicalBytes
        row.storedBytes += t.storedBytes
        result.keyCounts[tier] += t.keys
      }
      if (row.keys === 0) continue
      result.namespaces.push(row)
      result.logicalBytes += row.logicalBytes
      result.storedBytes += row.storedBytes
    }
    result.namespaces.sort((a, b) => a.namespace < b.namespace ? -1 : 1)
    if (result.storedBytes > 0) result.dedupRatio = result.logicalBytes / result.storedBytes
    return result
  }

  page (filter: ResidencyFilter, after: string | undefined, limit: number): ResidencyIndexPage {
    const range = rangeOf(filter)
    const entries: StoredEntry[] = []
    if (range === undefined) return { entries, after: undefined }
    const fromCursor = after !== undefined && after >= range
    let examined = 0
    let last: string | undefined
    const list = filter.tier !== undefined ? this.#byTier[filter.tier] : this.#ordered
    for (const e of list.from(fromCursor ? after : range, fromCursor)) {
      if (!e.key.text.startsWith(range)) return { entries, after: undefined }
      // Full, or examined enough: keys may follow, the next page starts after the last one examined.
      if (entries.length === limit || examined === maxKeysExamined) return { entries, after: last }
      this.#visited++
      examined++
      last = e.key.text
      if (selects(e, filter)) entries.push(e)
    }
    return { entries, after: undefined }
  }

  select (filter: ResidencyFilter): StoredEntry[] {
    const range = rangeOf(filter)
    const entries: StoredEntry[] = []
    if (range === undefined) return entries
    for (const e of (filter.tier !== undefined ? this.#byTier[filter.tier] : this.#ordered).from(range)) {
      if (!e.key.text.startsWith(range)) break
      this.#visited++
      if (selects(e, filter)) entries.push(e)
    }
    return entries
  }

  namespaces (): string[] {
    return [...this.#byNamespace.keys()].sort()
  }
}

/** Whether `namespace` passes the filter's namespace and job. */
function inJob (namespace: string, filter: ResidencyFilter): boolean {
  if (filter.namespace !== undefined && namespace !== filter.namespace) return false
  return filter.job === undefined || namespace === filter.job || namespace.startsWith(`${filter.job}/`)
}

/** Whether an entry in the filter's range (rangeOf) is selected. */
const selects = (e: StoredEntry, filter: ResidencyFilter): boolean =>
  (filter.namespace === undefined || e.key.namespace === filter.namespace) && (filter.tier === undefined || tierOf(e) === filter.tier)

/**
 * The prefix every selected key starts with: the longest of `prefix`,
 * `job/` and `namespace/`; undefined when they contradict each other (no key
 * can start with all of them).
 */
function rangeOf (filter: ResidencyFilter): string | undefined {
  const parts = [filter.prefix ?? '', filter.job !== undefined ? `${filter.job}/` : '', filter.namespace !== undefined ? `${filter.namespace}/` : '']
  const longest = parts.reduce((a, b) => b.length > a.length ? b : a)
  return parts.every(p => longest.startsWith(p)) ? longest : undefined
}

/**
 * ERR_BAD_REQUEST unless `filter` is one residency accepts: a tier of
 * storedTiers, a namespace and a job in the key grammar's namespace form, a
 * prefix of at most 1024 characters.
 */
export function checkResidencyFilter (filter: ResidencyFilter): void {
  if (filter.prefix !== undefined && (typeof filter.prefix !== 'string' || filter.prefix.length > 1024)) throw badRequest('prefix must be a string of at most 1024 characters')
  if (filter.tier !== undefined && !storedTiers.includes(filter.tier)) throw badRequest(`tier must be ${storedTiers.join(' or ')}, got ${JSON.stringify(filter.tier)}`)
  for (const field of ['namespace', 'job'] as const) {
    const value = filter[field]
    if (value !== undefined && !isNamespace(value)) throw badRequest(`${field} must be a namespace (letters, digits, "_", "-", "." in "/"-separated parts), got ${JSON.stringify(value)}`)
  }
}

/** ERR_BAD_REQUEST unless `limit` is an integer in 1..maxPageKeys; the default when undefined. */
export function pageLimit (limit: number | undefined): number {
  if (limit === undefined) return pageKeys
  if (!Number.isInteger(limit) || limit < 1 || limit > maxPageKeys) throw badRequest(`limit must be an integer from 1 to ${maxPageKeys}, got ${JSON.stringify(limit)}`)
  return limit
}

/** The cursor handed out for a page that ends after `key`; opaque to callers (base64url of the key today). */
export const encodeCursor = (key: string): string => Buffer.from(key).toString('base64url')

/** The key a cursor of encodeCursor names; ERR_BAD_REQUEST for anything else. */
export function decodeCursor (cursor: string): string {
  const malformed = (): AgentError => badRequest('cursor is malformed: pass the nextCursor of a previous page unchanged')
  if (typeof cursor !== 'string' || cursor.length === 0 || cursor.length > 1400 || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw malformed()
  const key = Buffer.from(cursor, 'base64url').toString()
  if (encodeCursor(key) !== cursor) throw malformed()
  try {
    return parseKey(key).text
  } catch {
    throw malformed()
  }
}

const badRequest = (message: string): AgentError => new AgentError('ERR_BAD_REQUEST', message)
