/**
 * Keeps this agent connected to the cluster: to every seed (mesh.join)
 * forever, and to every live member at the addresses its record announces
 * (a full mesh, which lets any member probe any other over an open
 * connection). A target that is not connected is dialed; a failed dial backs
 * off exponentially (initialBackoffMs × 2^n, capped at maxBackoffMs) and
 * success resets it. Seeds may be given without a /p2p/ suffix; the peer id
 * learned on connection is used to tell whether the seed is still connected.
 */
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { peerIdFromString } from '@libp2p/peer-id'
import type { PeerId } from '@libp2p/interface'
import type { MeshLibp2p } from './libp2p-node.ts'

export interface PeerDialerOptions {
  /** Seed multiaddrs. */
  seeds: string[]
  /** How often targets are checked, ms. Default 250. */
  checkIntervalMs?: number
  /** First retry delay, ms. Default 250. */
  initialBackoffMs?: number
  /** Longest retry delay, ms. Default 5000. */
  maxBackoffMs?: number
}

export interface PeerDialerComponents {
  node: MeshLibp2p
  /** Live members (alive or suspect) and their announced mesh addresses. */
  members(): Array<{ peerId: string, addresses: string[] }>
  log: { debug(obj: object, msg: string): void, warn(obj: object, msg: string): void }
}

export interface PeerDialer {
  start(options: { signal: AbortSignal }): void
  stop(): void
  /** Checks the targets now (a member was learned). */
  kick(): void
  /** Seeds with their state, for `agentctl mesh`. */
  seeds(): Array<{ address: string, peerId: string | null, connected: boolean, failures: number }>
}

interface Target {
  key: string
  addr?: Multiaddr
  peerId?: PeerId
  failures: number
  nextAttemptAt: number
  dialing: boolean
  /** The member's announced addresses last merged into the peer store (joined), to merge only on a change. */
  merged?: string
}

export function createPeerDialer (options: PeerDialerOptions, components: PeerDialerComponents): PeerDialer {
  const { node, log } = components
  const checkInterval = options.checkIntervalMs ?? 250
  const initialBackoff = options.initialBackoffMs ?? 250
  const maxBackoff = options.maxBackoffMs ?? 5000
  const seeds: Target[] = options.seeds.map(s => {
    const addr = multiaddr(s)
    const id = addr.getComponents().findLast(c => c.name === 'p2p')?.value
    return { key: s, addr, ...(id !== undefined ? { peerId: peerIdFromString(id) } : {}), failures: 0, nextAttemptAt: 0, dialing: false }
  })
  const members = new Map<string, Target>()
  let controller: AbortController | undefined
  let timer: NodeJS.Timeout | undefined

  const connected = (t: Target): boolean => t.peerId !== undefined && node.getConnections(t.peerId).length > 0
  /** `own`: this node's addresses without /p2p/, computed once per check. */
  const isSelf = (t: Target, own: ReadonlySet<string>): boolean => {
    if (t.peerId?.equals(node.peerId) === true) return true
    return t.addr !== undefined && own.has(t.addr.decapsulateCode(421).toString())
  }

  const dial = (t: Target, signal: AbortSignal): void => {
    t.dialing = true
    node.dial(t.addr ?? t.peerId!, { signal: AbortSignal.any([signal, AbortSignal.timeout(5000)]) })
      .then(conn => {
        t.peerId = conn.remotePeer
        t.failures = 0
      })
      .catch((err: Error) => {
        t.failures++
        t.nextAttemptAt = performance.now() + Math.min(maxBackoff, initialBackoff * 2 ** (t.failures - 1))
        if (t.failures === 1 || t.failures % 20 === 0) log.debug({ target: t.key, failures: t.failures, err: err.message }, 'dial failed; retrying with backoff')
      })
      .finally(() => { t.dialing = false })
  }

  const check = (): void => {
    if (controller === undefined || controller.signal.aborted) return
    const signal = controller.signal
    const live = components.members()
    for (const m of live) {
      let t = members.get(m.peerId)
      if (t === undefined) {
        t = { key: m.peerId, peerId: peerIdFromString(m.peerId), failures: 0, nextAttemptAt: 0, dialing: false }
        members.set(m.peerId, t)
      }
      // The peer store is a protobuf-encoded datastore: merging every member's addresses at every
      // check cost an idle 20-agent cluster more CPU than its gossip. Only a change is merged.
      const joined = m.addresses.join(' ')
      if (m.addresses.length > 0 && t.merged !== joined) {
        const addrs = m.addresses.map(a => multiaddr(a))
        void node.peerStore.merge(t.peerId!, { multiaddrs: addrs }).catch(() => {})
        t.addr = addrs[0]
        t.merged = joined
      }
    }
    const liveIds = new Set(live.map(m => m.peerId))
    for (const id of members.keys()) if (!liveIds.has(id)) members.delete(id)
    const now = performance.now()
    let own: Set<string> | undefined
    for (const t of [...seeds, ...members.values()]) {
      if (t.dialing || now < t.nextAttemptAt || connected(t)) continue
      own ??= new Set(node.getMultiaddrs().map(a => a.decapsulateCode(421).toString()))
      if (isSelf(t, own)) continue
      if (t.addr === undefined && t.peerId === undefined) continue
      dial(t, signal)
    }
  }

  const loop = (): void => {
    check()
    if (controller !== undefined && !controller.signal.aborted) {
      timer = setTimeout(loop, checkInterval)
      timer.unref()
    }
  }

  return {
    start ({ signal }) {
      controller = new AbortController()
      signal.addEventListener('abort', () => this.stop(), { once: true })
      loop()
    },
    stop () {
      controller?.abort()
      if (timer !== undefined) clearTimeout(timer)
    },
    kick: check,
    seeds: () => seeds.map(s => ({ address: s.key, peerId: s.peerId?.toString() ?? null, connected: connected(s), failures: s.failures })),
  }
}
