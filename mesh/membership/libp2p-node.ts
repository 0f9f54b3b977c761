/**
 * The libp2p node of an agent: TCP, a private network from the cluster key
 * (pnet), noise, yamux, identify, ping and gossipsub, configured for a cluster
 * of agents rather than a public swarm:
 *
 * - gossipsub's IP-colocation penalty is off: it graylists more than 10 peers
 *   behind one IP (100 agents on a test host, a rack behind NAT), and inside a
 *   private network every peer already proved it holds the cluster key;
 * - the connection manager lets the cluster's networks (mesh.trustedCidrs) past
 *   its per-host inbound rate limit and pending-connection cap;
 * - the connection monitor pings every connection each connectionPingIntervalMs
 *   and aborts one whose ping fails, reclaiming dead connections (the SWIM
 *   probes, not this, notice a frozen agent: failure-detector.ts);
 * - messages are unsigned at the gossipsub layer (StrictNoSign, ids = SHA-256 of
 *   the data): every mesh message carries its own signature (signed-envelope.ts),
 *   so it stays verifiable when a node relays or stores it.
 *
 * Exactly one address is announced: the management address, with the port the
 * first TCP listener got.
 */
import { createLibp2p, type Libp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import './yamux-window-updates.ts'
import { identify, type Identify } from '@libp2p/identify'
import { ping, type Ping } from '@libp2p/ping'
import { preSharedKey } from '@libp2p/pnet'
import './xsalsa20-shared-memory.ts'
import { gossipsub, type GossipSub } from '@libp2p/gossipsub'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import type { PrivateKey } from '@libp2p/interface'
import type { AnnounceAddress } from './announce-address.ts'

export type MeshLibp2p = Libp2p<{ identify: Identify, ping: Ping, pubsub: GossipSub }>

export interface MeshNodeOptions {
  /** The node's Ed25519 key (node-key.ts); the peer id derives from it. */
  privateKey: PrivateKey
  /** Cluster key file content (cluster-key.ts parseClusterKey). */
  clusterKey: Uint8Array
  /** TCP multiaddrs to listen on. */
  listen: string[]
  /** The management address to announce. */
  announce: AnnounceAddress
  /** CIDRs exempt from inbound rate limits, e.g. "10.0.0.0/8". */
  trustedCidrs: string[]
  /** Connection monitor ping interval, ms; its ping timeout is the same, at most doubled for a slow link. */
  connectionPingIntervalMs: number
  maxConnections: number
  /** Largest gossipsub message data decoded, bytes (larger ones are dropped before validation). */
  maxMessageDataBytes: number
  /** libp2p user agent, e.g. "agentd/0.1.0". */
  userAgent: string
}

/** Creates the node, not yet started. */
export async function createMeshNode (options: MeshNodeOptions): Promise<MeshLibp2p> {
  return createLibp2p({
    start: false,
    privateKey: options.privateKey,
    nodeInfo: { userAgent: options.userAgent },
    addresses: {
      listen: options.listen,
      announceFilter: addrs => announcedAddresses(addrs, options.announce),
    },
    transports: [tcp()],
    connectionProtector: preSharedKey({ psk: options.clusterKey }),
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    connectionManager: {
      maxConnections: options.maxConnections,
      allow: options.trustedCidrs.map(cidrToMultiaddr),
      dialTimeout: 5_000,
      addressDialTimeout: 3_000,
      inboundUpgradeTimeout: 5_000,
    },
    connectionMonitor: {
      pingInterval: options.connectionPingIntervalMs,
      pingTimeout: { minTimeout: options.connectionPingIntervalMs, maxTimeout: 2 * options.connectionPingIntervalMs },
      abortConnectionOnPingFailure: true,
    },
    services: {
      identify: identify(),
      // The prober keeps one ping stream per probed member (libp2p-prober.ts) beside the connection
      // monitor's pings: two outbound ping streams per connection; a handler ends a stream after a minute.
      ping: ping({ timeout: 60_000, maxInboundStreams: 4, maxOutboundStreams: 2 }),
      pubsub: gossipsub({
        globalSignaturePolicy: 'StrictNoSign',
        allowPublishToZeroTopicPeers: true,
        ignoreDuplicatePublishError: true,
        emitSelf: false,
        doPX: false,
        maxInboundDataLength: options.maxMessageDataBytes,
        ...gossipsubCadence,
        scoreParams: { IPColocationFactorWeight: 0 },
      }),
    },
  })
}

/**
 * Gossipsub's degree for our traffic: a few small messages per second (records,
 * claims, decisions), each repeated by a heartbeat, in clusters of tens to
 * hundreds of agents — not a public swarm's. Every message is sent D times by
 * every agent, so the default D = 6 (Dlo 4, Dhi 12) costs each agent six sends
 * and up to six duplicate receipts (decrypted and decoded before they are
 * dropped) per message; D = 4 keeps the mesh connected with a diameter of
 * ~log3(N) hops (20 agents: 3). IDONTWANT (gossipsub 1.2) saves bandwidth on
 * large messages but costs a control message to every mesh peer per message
 * received; ours are small, so it is left to messages over 16 KiB. Lazy
 * gossip (IHAVE) goes to Dlazy = 4 non-mesh peers per heartbeat.
 */
export const gossipsubCadence = { D: 4, Dlo: 3, Dhi: 6, Dout: 1, Dscore: 2, Dlazy: 4, idontwantMinDataSize: 16 * 1024 }

/** "10.0.0.0/8" → "/ip4/10.0.0.0/ipcidr/8". */
export function cidrToMultiaddr (cidr: string): string {
  const [ip, bits] = cidr.split('/')
  return `/${ip!.includes(':') ? 'ip6' : 'ip4'}/${ip}/ipcidr/${bits}`
}

/**
 * The one announced address: the management IP with the port of the listener
 * bound to it (or of the first TCP listener, e.g. one on 0.0.0.0).
 */
export function announcedAddresses (addrs: Multiaddr[], announce: AnnounceAddress): Multiaddr[] {
  const tcpAddrs = addrs.map(a => ({ a, parts: a.getComponents() })).filter(x => x.parts[1]?.name === 'tcp')
  const chosen = tcpAddrs.find(x => x.parts[0]?.value === announce.ip) ?? tcpAddrs[0]
  if (chosen === undefined) return []
  const peer = chosen.parts.find(p => p.name === 'p2p')
  return [multiaddr(`/ip${announce.family}/${announce.ip}/tcp/${chosen.parts[1]!.value}${peer !== undefined ? `/p2p/${peer.value}` : ''}`)]
}
