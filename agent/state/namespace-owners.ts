/**
 * Who owns each namespace of the StateManager: the record behind the local
 * API's ownership check (agent/api/AUTHORIZATION.md). The StateManager only
 * records; who may do what with a namespace is the API's decision.
 *
 * Contracts:
 * - A namespace's owner is fixed when its record is created: by a claim
 *   (`claim`, the uid of the API caller about to store into it) or, without
 *   one, by the first key stored into it (`stored`): then the owner is the
 *   agent itself (`undefined`: keys an in-process producer stored for its own
 *   service, e.g. published and pulled weights).
 * - The record lasts while the namespace holds at least one key or a claim is
 *   held (a store under way), and is forgotten when both reach 0: a namespace
 *   that becomes empty has no owner, and the next store claims it afresh.
 * - The owner never changes while the record lasts. Each stored key carries
 *   its namespace's owner (StoredEntry.owner) into its NVMe journal record,
 *   so a restart rebuilds the records of the durable keys (`recovered`).
 * All on the event loop; no I/O.
 */

/** A namespace's owner: a uid, or 'agent' for the agent itself. */
export type NamespaceOwner = number | 'agent'

export interface NamespaceOwners {
  /** The owner of a namespace holding keys or claimed; undefined when it is neither. */
  ownerOf(namespace: string): NamespaceOwner | undefined
  /**
   * The namespaces above and below `namespace` ("a" and "a/b/c" for "a/b")
   * that hold keys or are claimed, with their owners. O(namespaces).
   */
  nested(namespace: string): Array<{ namespace: string, owner: NamespaceOwner }>
  /**
   * Holds a claim on each namespace for a store about to begin, creating the
   * record with `owner` (undefined: the agent) where there is none; an
   * existing record keeps its owner. Returns the release (call it once, when
   * the store settled).
   */
  claim(namespaces: Iterable<string>, owner: number | undefined): () => void
  /** A key of the namespace was stored; returns the owner it is stored under (uid, or undefined: the agent). */
  stored(namespace: string): number | undefined
  /** A key stored with `stored` (or `recovered`) was removed. */
  removed(namespace: string): void
  /**
   * A key found on NVMe at start, with the owner its journal record names.
   * Keys of one namespace that name different owners (a journal written
   * before owners were recorded, mixed with later records) leave the
   * namespace to the agent: nobody but an admin may use it.
   */
  recovered(namespace: string, owner: number | undefined): void
}

interface NamespaceRecord { owner: number | undefined, keys: number, claims: number }

export function createNamespaceOwners (): NamespaceOwners {
  const records = new Map<string, NamespaceRecord>()
  const forgetIfUnused = (namespace: string, record: NamespaceRecord): void => {
    if (record.keys === 0 && record.claims === 0 && records.get(namespace) === record) records.delete(namespace)
  }
  const recordOf = (namespace: string, owner: number | undefined): NamespaceRecord => {
    let record = records.get(namespace)
    if (record === undefined) {
      record = { owner, keys: 0, claims: 0 }
      records.set(namespace, record)
    }
    return record
  }

  return {
    ownerOf (namespace) {
      const record = records.get(namespace)
      if (record === undefined) return undefined
      return record.owner ?? 'agent'
    },
    nested (namespace) {
      const found: Array<{ namespace: string, owner: NamespaceOwner }> = []
      for (const [other, record] of records) {
        if (other.startsWith(`${namespace}/`) || namespace.startsWith(`${other}/`)) found.push({ namespace: other, owner: record.owner ?? 'agent' })
      }
      return found
    },
    claim (namespaces, owner) {
      const claimed = [...new Set(namespaces)].map(namespace => {
        const record = recordOf(namespace, owner)
        record.claims++
        return [namespace, record] as const
      })
      let released = false
      return () => {
        if (released) return
        released = true
        for (const [namespace, record] of claimed) {
          record.claims--
          forgetIfUnused(namespace, record)
        }
      }
    },
    stored (namespace) {
      const record = recordOf(namespace, undefined)
      record.keys++
      return record.owner
    },
    removed (namespace) {
      const record = records.get(namespace)
      if (record === undefined) return
      record.keys = Math.max(0, record.keys - 1)
      forgetIfUnused(namespace, record)
    },
    recovered (namespace, owner) {
      const existing = records.get(namespace)
      if (existing === undefined) {
        records.set(namespace, { owner, keys: 1, claims: 0 })
        return
      }
      if (existing.owner !== owner) existing.owner = undefined
      existing.keys++
    },
  }
}
