/**
 * The neighbors of this agent: the members it keeps a connection to, a
 * bounded random partial view of the cluster (HyParView's active view, kept
 * symmetric). Gossipsub's mesh, the failure detector's probes and the
 * connection monitor run over these connections only, so an agent's idle cost
 * depends on `maxPeers`, not on the cluster's size. No I/O: peer-dialer.ts
 * dials, asks and closes.
 *
 * - Outbound neighbors are chosen by this agent: `outboundTarget` =
 *   ceil(maxPeers / 3) members drawn uniformly from the live ones. As members
 *   join, each is taken in with probability outboundTarget / (live others),
 *   replacing a random outbound neighbor (reservoir sampling), so the choice
 *   stays uniform as the cluster grows and a healed partition's other side is
 *   drawn into the view like any newcomer.
 * - Inbound neighbors chose this agent; one is accepted while fewer than
 *   `inboundLimit` = maxPeers − outboundTarget are held (a peer already an
 *   outbound neighbor is always accepted: the link is one, whoever asked).
 *   A rejected asker draws another member; an asker with no neighbor at all
 *   asks with priority, and a full agent then evicts a random inbound
 *   neighbor for it (which draws again) — at most `priorityEvictions` times
 *   per `priorityWindowMs`, so a peer that keeps asking with priority (a bug,
 *   or a holder of the cluster key churning the overlay) cannot strip an
 *   agent of its inbound neighbors; beyond that a priority ask is rejected
 *   like any other.
 * So an agent never holds more than maxPeers neighbors. With maxPeers ≥ 3 ×
 * (cluster size − 1) every agent draws every other: the full mesh.
 */

export interface NeighborSetOptions {
  /** Most neighbors, inbound and outbound together (>= 2). */
  maxPeers: number
  /** Priority evictions allowed per priorityWindowMs. Default 4. */
  priorityEvictions?: number
  /** The window of priorityEvictions, ms. Default 10000. */
  priorityWindowMs?: number
  random?(): number
  /** Monotonic clock, ms. Default performance.now. */
  now?(): number
}

export interface NeighborSet {
  readonly outboundTarget: number
  readonly inboundLimit: number
  has(peer: string): boolean
  /** Every neighbor, each once. */
  list(): string[]
  outbound(): string[]
  inbound(): string[]
  /** Inbound neighbors that are not outbound ones too (what inboundLimit bounds). */
  inboundOnlyCount(): number
  /** Priority asks refused because priorityEvictions were used up in the window. */
  readonly priorityRefused: number
  /**
   * `peer` asked to be a neighbor: records and returns whether it is accepted,
   * and, for a `priority` ask (the asker has no neighbor at all) that found the
   * inbound side full, the inbound neighbor evicted to make room (HyParView's
   * high-priority join: no agent stays cut off because every other is full).
   */
  acceptInbound(peer: string, priority?: boolean): { accepted: boolean, evicted?: string }
  /** `peer`, asked by this agent, accepted. */
  addOutbound(peer: string): void
  /** Forgets `peer` both ways (its connection closed, it died, it left the view); returns whether it was a neighbor. */
  remove(peer: string): boolean
  /** `peer` said it no longer keeps this agent: forgets the inbound side only. */
  removeInbound(peer: string): void
  /** Outbound neighbors still to find, given how many other members are live and how many asks are in flight. */
  missing(liveOthers: number, pending: number): number
  /**
   * A member joined (newly learned, or back from dead) while `liveOthers`
   * other members are live: whether to take it in, and which outbound
   * neighbor it replaces when the outbound side is full.
   */
  onJoin(peer: string, liveOthers: number): { take: boolean, replace?: string }
  /** Up to `n` of `candidates`, uniformly at random, that are not neighbors. */
  draw(candidates: readonly string[], n: number): string[]
}

export function createNeighborSet (options: NeighborSetOptions): NeighborSet {
  if (!Number.isInteger(options.maxPeers) || options.maxPeers < 2) throw new RangeError(`maxPeers must be an integer >= 2, got ${options.maxPeers}`)
  const random = options.random ?? Math.random
  const now = options.now ?? (() => performance.now())
  const priorityEvictions = options.priorityEvictions ?? 4
  const priorityWindowMs = options.priorityWindowMs ?? 10_000
  /** When recent priority evictions happened (monotonic ms), oldest first. */
  const evictedAt: number[] = []
  let priorityRefused = 0
  const outboundTarget = Math.ceil(options.maxPeers / 3)
  const inboundLimit = options.maxPeers - outboundTarget
  const out = new Set<string>()
  const inb = new Set<string>()
  const inboundOnly = (): number => { let n = 0; for (const p of inb) if (!out.has(p)) n++; return n }

  /** Whether one more priority eviction fits in the window (and records it if so). */
  const takeEviction = (): boolean => {
    const t = now()
    while (evictedAt.length > 0 && t - evictedAt[0]! >= priorityWindowMs) evictedAt.shift()
    if (evictedAt.length >= priorityEvictions) { priorityRefused++; return false }
    evictedAt.push(t)
    return true
  }

  return {
    outboundTarget,
    inboundLimit,
    get priorityRefused () { return priorityRefused },
    inboundOnlyCount: inboundOnly,
    has: peer => out.has(peer) || inb.has(peer),
    list: () => [...new Set([...out, ...inb])],
    outbound: () => [...out],
    inbound: () => [...inb],
    acceptInbound (peer, priority = false) {
      if (inb.has(peer) || out.has(peer)) { inb.add(peer); return { accepted: true } }
      if (inboundOnly() < inboundLimit) { inb.add(peer); return { accepted: true } }
      const evictable = [...inb].filter(p => !out.has(p))
      if (!priority || evictable.length === 0 || !takeEviction()) return { accepted: false }
      const evicted = evictable[Math.floor(random() * evictable.length)]!
      inb.delete(evicted)
      inb.add(peer)
      return { accepted: true, evicted }
    },
    addOutbound (peer) { out.add(peer) },
    remove (peer) {
      const was = out.has(peer) || inb.has(peer)
      out.delete(peer)
      inb.delete(peer)
      return was
    },
    removeInbound (peer) { inb.delete(peer) },
    missing: (liveOthers, pending) => Math.max(0, Math.min(outboundTarget, liveOthers) - out.size - pending),
    onJoin (peer, liveOthers) {
      if (out.has(peer)) return { take: false }
      if (out.size < Math.min(outboundTarget, liveOthers)) return { take: true }
      if (liveOthers <= 0 || random() >= outboundTarget / liveOthers) return { take: false }
      const current = [...out]
      return { take: true, replace: current[Math.floor(random() * current.length)]! }
    },
    draw (candidates, n) {
      const pool = candidates.filter(p => !out.has(p) && !inb.has(p))
      for (let i = pool.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1))
        const x = pool[i]!
        pool[i] = pool[j]!
        pool[j] = x
      }
      return pool.slice(0, Math.max(0, n))
    },
  }
}
