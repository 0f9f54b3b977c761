/**
 * Capacity and quota accounting of the StateManager (DESIGN "Tiers":
 * capacity of each tier configured, accounted, reported): the checks that
 * refuse a request before any byte moves, and the shape of the per-namespace
 * totals residency reports (kept by residency-index.ts).
 *
 * Contracts:
 * - Units: bytes. Stored bytes count a key once; logical bytes count it once
 *   per replica that offloaded it (at least once).
 * - A namespace quota applies to the exact namespace (no prefix match) and
 *   bounds its stored bytes, whatever tier holds them (pool, adopted
 *   shared memory, NVMe).
 * - Pure over what the caller passes: reads entries, changes nothing, no
 *   clock. The caller keeps the index from changing during a call (event
 *   loop, no await inside).
 */
import { AgentError } from '../../core/errors.ts'
import type { StateKey } from './keys.ts'
import type { StoredEntry } from './stored-entry.ts'

export interface NamespaceUsage {
  namespace: string
  keys: number
  logicalBytes: number
  storedBytes: number
  /** The configured quota; null = unlimited. */
  quotaBytes: number | null
}

/** The namespace's own quota, null when none: a namespace named like an Object.prototype member ("constructor") has none unless configured. */
export function quotaOf (quotaBytes: Readonly<Record<string, number>>, namespace: string): number | null {
  return Object.hasOwn(quotaBytes, namespace) ? quotaBytes[namespace]! : null
}

/**
 * ERR_QUOTA_EXCEEDED when storing `newKeys` (keys not stored yet), plus
 * `pendingBytes` once in each of their namespaces, would take a namespace
 * over its quota. The first namespace of `newKeys` (in order) that is over
 * is named. Walks `stored` only when some namespace of `newKeys` has a quota.
 */
export function checkNamespaceQuotas (
  stored: Iterable<{ key: StateKey }>,
  newKeys: readonly StateKey[],
  quotaBytes: Readonly<Record<string, number>>,
  pendingBytes = 0,
): void {
  const adding = new Map<string, number>()
  for (const k of newKeys) adding.set(k.namespace, (adding.get(k.namespace) ?? pendingBytes) + k.bytes)
  const limited = [...adding.keys()].filter(namespace => quotaOf(quotaBytes, namespace) !== null)
  if (limited.length === 0) return
  const storedBytes = new Map(limited.map(namespace => [namespace, 0]))
  for (const e of stored) {
    const sum = storedBytes.get(e.key.namespace)
    if (sum !== undefined) storedBytes.set(e.key.namespace, sum + e.key.bytes)
  }
  for (const namespace of limited) {
    const quota = quotaOf(quotaBytes, namespace)!
    const total = storedBytes.get(namespace)! + adding.get(namespace)!
    if (total > quota) {
      throw new AgentError('ERR_QUOTA_EXCEEDED', `namespace ${namespace} would hold ${total} bytes, over its quota of ${quota}`)
    }
  }
}

/**
 * ERR_TIER_FULL (before any copy) when `bytes` more cannot fit anywhere:
 * free host bytes + pool copies already on NVMe (dropped from the pool for
 * free) + free NVMe bytes (what spilling can move there).
 */
export function checkRoomFor (
  bytes: number,
  stored: Iterable<StoredEntry>,
  tiers: { hostFreeBytes: number, nvmeCapacityBytes: number, nvmeUsedBytes: number },
): void {
  let alsoOnNvme = 0
  for (const e of stored) if (e.host !== undefined && e.onNvme) alsoOnNvme += e.key.bytes
  const nvmeFree = tiers.nvmeCapacityBytes - tiers.nvmeUsedBytes
  if (bytes > tiers.hostFreeBytes + alsoOnNvme + nvmeFree) {
    throw new AgentError('ERR_TIER_FULL', `no room for ${bytes} bytes: host pool ${tiers.hostFreeBytes} bytes free, NVMe ${nvmeFree} bytes free`)
  }
}
