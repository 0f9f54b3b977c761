/**
 * Keeps this agent's connections to the cluster bounded (neighbor-set.ts):
 *
 * - neighbors: it asks `outboundTarget` live members, drawn at random, to be
 *   its neighbors over `/agentd/neighbor/1.0.0` and answers such asks from
 *   others; a neighbor's connection is kept, and a lost one (its connection
 *   closed, it died) is replaced by another draw. A member that rejected the
 *   ask (its inbound side is full) is not asked again for rejectBackoffMs;
 * - seeds (mesh.join): dialed, with backoff, while this agent has no
 *   neighbor (joining, or cut off); the seed's state sync then tells it the
 *   members to draw from;
 * - reconnection: every reconnectIntervalMs one member held dead (still
 *   listed) or one seed that is not a live member is dialed once (Serf's
 *   reconnect). State sync asks a connecting peer whose record is missing, so
 *   the two sides of a healed partition exchange records, refute the deaths
 *   and draw each other into their views;
 * - every other connection (a probe, a leader call, a state sync, a weight
 *   query: whoever dialed it) is closed once it carried no request for
 *   idleConnectionMs. Gossipsub, identify and ping streams are not requests;
 *   a neighbor ask is (a link is not closed under an ask being answered).
 *
 * A failed dial backs off exponentially (initialBackoffMs × 2^n, capped at
 * maxBackoffMs) and success resets it. Seeds may be given without a /p2p/
 * suffix; the peer id learned on connection is used from then on. Every
 * member's announced addresses are merged into the peer store (once per
 * change), so any subsystem can dial a member by its peer id.
 *
 * Wire (json-protocol.ts): request { op: "join" | "leave", priority?: true
 * (the asker has no neighbor) }, answer { accepted: boolean }; "leave" (this agent drops the neighbor) is answered
 * { accepted: true } and then the connection is closed, so the other side
 * neither probes nor redials a link that closed on purpose.
 */
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'
import type { PeerId } from '@libp2p/interface'
import type { MeshLibp2p } from './libp2p-node.ts'
import { handleJson, requestJson } from './json-protocol.ts'
import { createNeighborSet, type NeighborSet } from './neighbor-set.ts'

export const neighborProtocol = '/agentd/neighbor/1.0.0'

export interface PeerDialerOptions {
  /** Seed multiaddrs. */
  seeds: string[]
  /** Most neighbors (mesh.maxPeers). */
  maxPeers: number
  /** A connection to a non-neighbor is closed after carrying no request this long, ms (mesh.idleConnectionMs). */
  idleConnectionMs: number
  /** How often one dead member or missing seed is dialed, ms. Default 5000. */
  reconnectIntervalMs?: number
  /** How often targets are checked, ms. Default 250. */
  checkIntervalMs?: number
  /** First retry delay, ms. Default 250. */
  initialBackoffMs?: number
  /** Longest retry delay, ms. Default 5000. */
  maxBackoffMs?: number
  /** A member that rejected the neighbor ask is not asked again for this long, ms. Default 30000. */
  rejectBackoffMs?: number
  random?(): number
}

export interface DialerMember {
  peerId: string
  state: 'alive' | 'suspect' | 'dead'
  /** Announced mesh addresses. */
  addresses: string[]
}

export interface PeerDialerComponents {
  node: MeshLibp2p
  /** Listed members (dead ones until forgotten) and their announced mesh addresses. */
  members(): DialerMember[]
  /**
   * Asking `peer` failed in transport (not a rejection): it may be gone. The failure detector
   * probes it, since a member that is nobody's neighbor (it died before a link formed) is probed by no one else.
   */
  unreachable?(peer: string): void
  log: { debug(obj: object, msg: string): void, warn(obj: object, msg: string): void }
}

export interface PeerDialer {
  /** Registers the neighbor protocol (before the node starts). */
  register(): Promise<void>
  start(options: { signal: AbortSignal }): void
  stop(): Promise<void>
  /** Checks the targets now (a member was learned). */
  kick(): void
  /** A member joined (newly learned or back from dead): it may be drawn into the view. */
  memberJoined(peerId: string): void
  /** A member died or was forgotten: it leaves the view. */
  memberLost(peerId: string): void
  /** Every connection to `peerId` closed; returns whether it was a neighbor (then it is worth a probe). */
  disconnected(peerId: string): boolean
  /** `peer` was dialed for one probe: its connection closes as soon as it carries nothing (not after idleConnectionMs). */
  closeWhenIdle(peer: string): void
  /** Current neighbors, each once. */
  neighbors(): string[]
  view(): { maxPeers: number, outbound: number, inbound: number, outboundTarget: number, inboundLimit: number, idleClosed: number, rejected: number, priorityRefused: number }
  /** Seeds with their state, for `agentctl mesh`. */
  seeds(): Array<{ address: string, peerId: string | null, connected: boolean, failures: number }>
}

interface Backoff {
  failures: number
  nextAttemptAt: number
}

interface Seed extends Backoff {
  key: string
  addr: Multiaddr
  peerId?: PeerId
  dialing: boolean
}

/** Streams that are not requests: a connection carrying only these is idle. */
const passiveProtocols = /^\/(meshsub|ipfs\/id|ipfs\/ping)\//

export function createPeerDialer (options: PeerDialerOptions, components: PeerDialerComponents): PeerDialer {
  const { node, log } = components
  const random = options.random ?? Math.random
  const checkInterval = options.checkIntervalMs ?? 250
  const initialBackoff = options.initialBackoffMs ?? 250
  const maxBackoff = options.maxBackoffMs ?? 5000
  const rejectBackoff = options.rejectBackoffMs ?? 30_000
  const reconnectInterval = options.reconnectIntervalMs ?? 5000
  const neighbors: NeighborSet = createNeighborSet({ maxPeers: options.maxPeers, random })
  const protocol = { protocol: neighborProtocol, maxMessageBytes: 256 }
  const seeds: Seed[] = options.seeds.map(s => {
    const addr = multiaddr(s)
    const id = addr.getComponents().findLast(c => c.name === 'p2p')?.value
    return { key: s, addr, ...(id !== undefined ? { peerId: peerIdFromString(id) } : {}), failures: 0, nextAttemptAt: 0, dialing: false }
  })
  /** Members asked to be neighbors, answer pending. */
  const asking = new Set<string>()
  /** Members to ask first (drawn in as they joined). */
  const preferred = new Set<string>()
  /** Backoff of members whose ask failed or was rejected. */
  const backoffs = new Map<string, Backoff>()
  /** Announced addresses last merged into the peer store per member, to merge only on a change. */
  const merged = new Map<string, string>()
  /** Peer → when (monotonic ms) one of its connections last carried a request. */
  const lastActive = new Map<string, number>()
  const counters = { idleClosed: 0, rejected: 0 }
  /** Peers connected for one probe: reaped at the first check that finds their connections carrying nothing. */
  const probeOnly = new Set<string>()
  let controller: AbortController | undefined
  let timer: NodeJS.Timeout | undefined
  let reconnectTimer: NodeJS.Timeout | undefined

  const connected = (peer: PeerId | undefined): boolean => peer !== undefined && node.getConnections(peer).length > 0
  const joining = (): boolean => neighbors.list().length === 0
  const backedOff = (b: Backoff | undefined, now: number): boolean => b !== undefined && now < b.nextAttemptAt
  const failed = (b: Backoff, delayMs?: number): void => {
    b.failures++
    b.nextAttemptAt = performance.now() + (delayMs ?? Math.min(maxBackoff, initialBackoff * 2 ** (b.failures - 1)))
  }

  const dialSeed = (s: Seed, signal: AbortSignal): void => {
    s.dialing = true
    node.dial(s.addr, { signal: AbortSignal.any([signal, AbortSignal.timeout(5000)]) })
      .then(conn => { s.peerId = conn.remotePeer; s.failures = 0 })
      .catch((err: Error) => {
        failed(s)
        if (s.failures === 1 || s.failures % 20 === 0) log.debug({ target: s.key, failures: s.failures, err: err.message }, 'seed dial failed; retrying with backoff')
      })
      .finally(() => { s.dialing = false })
  }

  const ask = (peer: string, signal: AbortSignal): void => {
    asking.add(peer)
    preferred.delete(peer)
    const request = joining() ? { op: 'join', priority: true } : { op: 'join' }
    requestJson(node, peer, protocol, request, AbortSignal.any([signal, AbortSignal.timeout(5000)]))
      .then(reply => {
        if ((reply as { accepted?: unknown } | null)?.accepted === true) {
          neighbors.addOutbound(peer)
          backoffs.delete(peer)
          return
        }
        counters.rejected++
        const b = backoffs.get(peer) ?? { failures: 0, nextAttemptAt: 0 }
        failed(b, rejectBackoff)
        backoffs.set(peer, b)
      })
      .catch((err: Error) => {
        const b = backoffs.get(peer) ?? { failures: 0, nextAttemptAt: 0 }
        failed(b)
        backoffs.set(peer, b)
        if (b.failures === 1 || b.failures % 20 === 0) log.debug({ peer, failures: b.failures, err: err.message }, 'neighbor ask failed; another member is drawn')
        if (!signal.aborted) components.unreachable?.(peer)
      })
      .finally(() => { asking.delete(peer) })
  }

  /** Drops outbound neighbor `peer`: tells it, then closes the link. */
  const drop = (peer: string): void => {
    neighbors.remove(peer)
    const signal = AbortSignal.timeout(2000)
    void requestJson(node, peer, protocol, { op: 'leave' }, signal).catch(() => {})
      .finally(() => { if (!neighbors.has(peer)) void node.hangUp(peerIdFromString(peer)).catch(() => {}) })
  }

  const mergeAddresses = (live: DialerMember[]): void => {
    // The peer store is a protobuf-encoded datastore: merging every member's addresses at every
    // check cost an idle 20-agent cluster more CPU than its gossip. Only a change is merged.
    for (const m of live) {
      const joined = m.addresses.join(' ')
      if (m.addresses.length === 0 || merged.get(m.peerId) === joined) continue
      void node.peerStore.merge(peerIdFromString(m.peerId), { multiaddrs: m.addresses.map(a => multiaddr(a)) }).catch(() => {})
      merged.set(m.peerId, joined)
    }
    const listed = new Set(live.map(m => m.peerId))
    for (const id of merged.keys()) if (!listed.has(id)) merged.delete(id)
  }

  /** Closes connections to non-neighbors that carried no request for idleConnectionMs. */
  const reapIdle = (now: number, keep: ReadonlySet<string>): void => {
    const byPeer = new Map<string, { peer: PeerId, active: boolean, openedAt: number }>()
    for (const c of node.getConnections()) {
      const id = c.remotePeer.toString()
      const e = byPeer.get(id) ?? { peer: c.remotePeer, active: false, openedAt: 0 }
      // A stream still negotiating has no protocol yet ("" or undefined): not a request until it says so.
      e.active ||= c.streams.some(s => s.protocol !== undefined && s.protocol !== '' && !passiveProtocols.test(s.protocol))
      // libp2p's timeline is wall-clock ms; age is what counts, so convert once.
      e.openedAt = Math.max(e.openedAt, now - Math.max(0, Date.now() - c.timeline.open))
      byPeer.set(id, e)
    }
    for (const id of lastActive.keys()) if (!byPeer.has(id)) lastActive.delete(id)
    for (const id of probeOnly) if (!byPeer.has(id)) probeOnly.delete(id)
    for (const [id, e] of byPeer) {
      if (e.active) lastActive.set(id, now)
      if (keep.has(id) || neighbors.has(id) || asking.has(id)) { probeOnly.delete(id); continue }
      const since = Math.max(e.openedAt, lastActive.get(id) ?? 0)
      if (probeOnly.has(id) ? e.active : now - since < options.idleConnectionMs) continue
      probeOnly.delete(id)
      counters.idleClosed++
      lastActive.delete(id)
      void node.hangUp(e.peer).catch(() => {})
    }
  }

  const check = (): void => {
    if (controller === undefined || controller.signal.aborted) return
    const signal = controller.signal
    const listed = components.members()
    mergeAddresses(listed)
    const alive = listed.filter(m => m.state === 'alive' && m.addresses.length > 0).map(m => m.peerId)
    const aliveSet = new Set(alive)
    const suspect = new Set(listed.filter(m => m.state === 'suspect').map(m => m.peerId))
    // A suspect neighbor stays: the suspicion may be refuted, and its link is how it would hear of it.
    for (const p of neighbors.outbound()) if (!aliveSet.has(p) && !suspect.has(p)) neighbors.remove(p)
    const now = performance.now()
    const keep = new Set<string>()
    if (joining()) {
      for (const s of seeds) {
        if (s.peerId !== undefined) keep.add(s.peerId.toString())
        if (s.dialing || now < s.nextAttemptAt || connected(s.peerId) || s.peerId?.equals(node.peerId) === true) continue
        if (s.peerId === undefined && isOwnAddress(node, s.addr)) continue
        dialSeed(s, signal)
      }
    }
    let missing = neighbors.missing(alive.length, asking.size)
    if (missing > 0) {
      const eligible = (p: string): boolean => aliveSet.has(p) && !asking.has(p) && !neighbors.has(p) && !backedOff(backoffs.get(p), now)
      // Drawn at random among the preferred, not in the order they were learned: a join sync learns
      // every member at once, in the seed's table order, and taking the first ones would send every
      // joiner to the cluster's oldest members (found by the membership simulator, membership-sim.ts: half the agents
      // then had no inbound neighbor and the oldest were full).
      const picks = neighbors.draw([...preferred].filter(eligible), missing)
      for (const p of preferred) if (!aliveSet.has(p)) preferred.delete(p)
      missing -= picks.length
      if (missing > 0) picks.push(...neighbors.draw(alive.filter(p => eligible(p) && !picks.includes(p)), missing))
      for (const p of picks) ask(p, signal)
    }
    for (const id of backoffs.keys()) if (!aliveSet.has(id)) backoffs.delete(id)
    reapIdle(now, keep)
  }

  /** Dials one member held dead, or one seed that is not a live member (a healed partition finds its way back). */
  const reconnect = (): void => {
    if (controller === undefined || controller.signal.aborted) return
    const listed = components.members()
    const live = new Set(listed.filter(m => m.state !== 'dead').map(m => m.peerId))
    const candidates: Array<PeerId | Multiaddr> = listed.filter(m => m.state === 'dead' && m.addresses.length > 0).map(m => peerIdFromString(m.peerId))
    for (const s of seeds) {
      if (s.peerId?.equals(node.peerId) === true || (s.peerId === undefined && isOwnAddress(node, s.addr))) continue
      if (s.peerId === undefined || !live.has(s.peerId.toString())) candidates.push(s.peerId ?? s.addr)
    }
    const target = candidates[Math.floor(random() * candidates.length)]
    if (target !== undefined && !(isPeerId(target) && connected(target))) {
      void node.dial(target, { signal: AbortSignal.any([controller.signal, AbortSignal.timeout(5000)]) }).catch(() => {})
    }
    reconnectTimer = setTimeout(reconnect, reconnectInterval * (0.8 + 0.4 * random()))
    reconnectTimer.unref()
  }

  const loop = (): void => {
    check()
    if (controller !== undefined && !controller.signal.aborted) {
      timer = setTimeout(loop, checkInterval)
      timer.unref()
    }
  }

  return {
    async register () {
      await handleJson(node, { ...protocol, handlerTimeoutMs: 5000 }, async (from, message) => {
        const { op, priority } = (message ?? {}) as { op?: unknown, priority?: unknown }
        if (priority !== undefined && priority !== true) throw new Error('bad neighbor request')
        if (op === 'leave') { neighbors.removeInbound(from); return { accepted: true } }
        if (op !== 'join') throw new Error('bad neighbor request')
        // An ask that waited while its link closed (reaped as idle, cut) takes no slot: a neighbor
        // without a link would hold it until the asker is next seen disconnecting, which it never is.
        if (node.getConnections(peerIdFromString(from)).length === 0) throw new Error('the asker\'s connection closed')
        const { accepted, evicted } = neighbors.acceptInbound(from, priority === true)
        if (evicted !== undefined) {
          log.debug({ peer: from, evicted }, 'a member without neighbors asked: an inbound neighbor is evicted for it')
          void node.hangUp(peerIdFromString(evicted)).catch(() => {})
        }
        return { accepted }
      })
    },
    start ({ signal }) {
      controller = new AbortController()
      signal.addEventListener('abort', () => { void this.stop() }, { once: true })
      loop()
      reconnectTimer = setTimeout(reconnect, reconnectInterval)
      reconnectTimer.unref()
    },
    async stop () {
      controller?.abort()
      if (timer !== undefined) clearTimeout(timer)
      if (reconnectTimer !== undefined) clearTimeout(reconnectTimer)
      await node.unhandle(neighborProtocol).catch(() => {})
    },
    kick: check,
    memberJoined (peerId) {
      const alive = components.members().filter(m => m.state === 'alive').length
      const { take, replace } = neighbors.onJoin(peerId, alive)
      if (!take) return
      preferred.add(peerId)
      if (replace !== undefined) drop(replace)
    },
    memberLost (peerId) {
      neighbors.remove(peerId)
      preferred.delete(peerId)
    },
    closeWhenIdle (peerId) { if (!neighbors.has(peerId)) probeOnly.add(peerId) },
    disconnected (peerId) {
      lastActive.delete(peerId)
      return neighbors.remove(peerId)
    },
    neighbors: () => neighbors.list(),
    view: () => ({
      maxPeers: options.maxPeers,
      outbound: neighbors.outbound().length,
      inbound: neighbors.inboundOnlyCount(),
      outboundTarget: neighbors.outboundTarget,
      inboundLimit: neighbors.inboundLimit,
      ...counters,
      priorityRefused: neighbors.priorityRefused,
    }),
    seeds: () => seeds.map(s => ({ address: s.key, peerId: s.peerId?.toString() ?? null, connected: connected(s.peerId), failures: s.failures })),
  }
}

const isPeerId = (x: PeerId | Multiaddr): x is PeerId => 'equals' in x && !('getComponents' in x)

/** Whether `addr` (without /p2p/) is one of this node's own listen addresses. */
function isOwnAddress (node: MeshLibp2p, addr: Multiaddr): boolean {
  const own = new Set(node.getMultiaddrs().map(a => a.decapsulateCode(421).toString()))
  return own.has(addr.decapsulateCode(421).toString())
}
