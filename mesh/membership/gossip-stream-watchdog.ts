/**
 * Repairs a connected peer that gossipsub can no longer send to.
 *
 * Why. Two agents that learn of each other at the same moment dial each other
 * and keep two connections (libp2p allows it). Gossipsub opens its one
 * outbound stream to a peer on one of them, and when that connection closes
 * (the connection monitor aborts it after a failed ping on a loaded host) it
 * drops the stream and opens a new one only on the next peer:connect — which
 * never comes, the other connection being still open. From then on every
 * message to that peer is silently dropped, while pings and direct protocols
 * (probes, leader calls) still work. It stays hidden as long as a third agent
 * relays, and shows when that agent dies: in a 3-server cluster whose leader
 * is killed, a survivor never hears the new leader's decisions.
 *
 * Contract. Every checkIntervalMs, a peer with an open connection but no open
 * outbound gossipsub stream (`/meshsub/…`) on any of them is hung up (all its
 * connections closed): gossipsub forgets it, the peer dialer (peer-dialer.ts)
 * dials it again and gossipsub starts afresh on the new connection. A peer
 * that had such a stream (the failure above) is hung up after graceMs without
 * one; a peer that never had one since it connected, after newPeerGraceMs: a
 * new connection gets its stream only after identify and stream set-up, which
 * on a loaded host take seconds, and hanging it up then only starts the same
 * wait again (on a 20-agent test host, a 3 s grace hung up every peer about
 * every 5 s and kept most of the cluster's connections down). Only libp2p's
 * public connection and stream views are read.
 */
import type { PeerId } from '@libp2p/interface'

export interface GossipStreamWatchdogOptions {
  /** How often connections are checked, ms. Default 1000. */
  checkIntervalMs?: number
  /** How long a connected peer that had an outbound gossipsub stream may lack one before it is hung up, ms. Default 3000. */
  graceMs?: number
  /** How long a connected peer that never had one (since it connected) may lack one, ms. Default 30000. */
  newPeerGraceMs?: number
}

/** The parts of a libp2p connection the watchdog reads. */
export interface WatchedConnection {
  remotePeer: PeerId
  status: string
  streams: ReadonlyArray<{ protocol?: string, direction: string, status: string }>
}

export interface GossipStreamWatchdogComponents {
  node: {
    getConnections(): WatchedConnection[]
    hangUp(peer: PeerId): Promise<void>
  }
  log: { warn(obj: object, msg: string): void }
  /** Monotonic ms; default performance.now. */
  now?(): number
}

export interface GossipStreamWatchdog {
  start(options: { signal: AbortSignal }): void
  /** Idempotent. */
  stop(): void
  /** One check now (tests; the loop calls it every checkIntervalMs). */
  check(): void
  /** Peers hung up so far. */
  readonly repairs: number
}

const gossipsubProtocol = /^\/meshsub\//

export function createGossipStreamWatchdog (options: GossipStreamWatchdogOptions, components: GossipStreamWatchdogComponents): GossipStreamWatchdog {
  const checkIntervalMs = options.checkIntervalMs ?? 1000
  const graceMs = options.graceMs ?? 3000
  const newPeerGraceMs = options.newPeerGraceMs ?? 30_000
  /** Connected peers seen with an outbound gossipsub stream; forgotten when no connection is left. */
  const hadStream = new Set<string>()
  const now = components.now ?? (() => performance.now())
  /** Peer id → since when (monotonic ms) it has had no outbound gossipsub stream. */
  const missingSince = new Map<string, number>()
  let timer: NodeJS.Timeout | undefined
  let repairs = 0

  const check = (): void => {
    const byPeer = new Map<string, { peer: PeerId, sending: boolean }>()
    for (const c of components.node.getConnections()) {
      if (c.status !== 'open') continue
      const id = c.remotePeer.toString()
      const entry = byPeer.get(id) ?? { peer: c.remotePeer, sending: false }
      entry.sending ||= c.streams.some(s => s.direction === 'outbound' && s.status === 'open' && gossipsubProtocol.test(s.protocol ?? ''))
      byPeer.set(id, entry)
    }
    for (const id of missingSince.keys()) if (byPeer.get(id)?.sending !== false) missingSince.delete(id)
    for (const id of hadStream) if (!byPeer.has(id)) hadStream.delete(id)
    const t = now()
    for (const [id, { peer, sending }] of byPeer) {
      if (sending) { hadStream.add(id); continue }
      const since = missingSince.get(id)
      if (since === undefined) { missingSince.set(id, t); continue }
      if (t - since < (hadStream.has(id) ? graceMs : newPeerGraceMs)) continue
      hadStream.delete(id)
      missingSince.delete(id)
      repairs++
      components.log.warn({ peer: id, withoutStreamMs: Math.round(t - since) }, 'connected peer has no outbound gossip stream: hanging up so that it is dialed afresh')
      void components.node.hangUp(peer).catch(() => {})
    }
  }

  return {
    start ({ signal }) {
      timer = setInterval(check, checkIntervalMs)
      timer.unref()
      signal.addEventListener('abort', () => this.stop(), { once: true })
    },
    stop () { clearInterval(timer); timer = undefined },
    check,
    get repairs () { return repairs },
  }
}
