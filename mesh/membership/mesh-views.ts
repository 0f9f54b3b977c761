/**
 * What the mesh shows through the local API, declared once: the types the
 * service returns and the response schemas of /v1/status (mesh section),
 * /v1/mesh and /v1/mesh/peers come from here.
 */
import { Type, type Static } from '@sinclair/typebox'
import { AvailabilityRecordSchema } from './mesh-messages.ts'

const State = Type.Union([Type.Literal('alive'), Type.Literal('suspect'), Type.Literal('dead')])
const Rate = Type.Object({ total: Type.Integer(), perSecond: Type.Number({ description: 'average over the last 60 s' }) })

export const MeshStatusSchema = Type.Object({
  peerId: Type.String(),
  addresses: Type.Array(Type.String(), { description: 'announced mesh multiaddrs (the management address)' }),
})

export const PeerViewSchema = Type.Object({
  peerId: Type.String(),
  node: Type.String({ description: '"" until its first record arrived' }),
  state: State,
  incarnation: Type.Integer(),
  reason: Type.Optional(Type.String({ description: 'why it is suspect or dead: probe-failed, refused, suspicion-timeout, left' })),
  stateSinceMs: Type.Integer({ description: 'when it entered its state, ms since the epoch' }),
  lastHeardMs: Type.Integer({ description: 'last record or probe answer, ms since the epoch (0 = never)' }),
  addresses: Type.Array(Type.String()),
  gpus: Type.Object({
    total: Type.Integer(),
    free: Type.Union([Type.Integer(), Type.Null()], { description: 'GPUs no compute process holds; null when unknown' }),
  }),
  hostPoolFreeBytes: Type.Union([Type.Integer(), Type.Null()], { description: 'null when the node has no host pool (yet)' }),
  nvmeFreeBytes: Type.Union([Type.Integer(), Type.Null()]),
  preemptible: Type.Union([Type.Boolean(), Type.Null()], { description: 'null until its first record arrived' }),
  record: Type.Union([AvailabilityRecordSchema, Type.Null()], { description: 'its latest availability record' }),
})

export const PeersSchema = Type.Object({ peers: Type.Array(PeerViewSchema, { description: 'the other agents (not this one), by node name' }) })

export const MeshInfoSchema = Type.Object({
  peerId: Type.String(),
  node: Type.String(),
  incarnation: Type.Integer(),
  addresses: Type.Array(Type.String(), { description: 'announced' }),
  announce: Type.Object({ ip: Type.String(), source: Type.String({ description: 'config, interface NAME or dev loopback' }) }),
  listen: Type.Array(Type.String(), { description: 'what the node listens on' }),
  clusterKeyFile: Type.String(),
  connections: Type.Integer(),
  topicPeers: Type.Integer({ description: 'connected peers subscribed to the mesh topic' }),
  meshPeers: Type.Integer({ description: 'gossipsub mesh peers of the topic (eager push)' }),
  seeds: Type.Array(Type.Object({ address: Type.String(), peerId: Type.Union([Type.String(), Type.Null()]), connected: Type.Boolean(), failures: Type.Integer() })),
  neighbors: Type.Object({
    maxPeers: Type.Integer({ description: 'mesh.maxPeers: most neighbors' }),
    outbound: Type.Integer({ description: 'neighbors this agent chose' }),
    inbound: Type.Integer({ description: 'neighbors that chose this agent (and it did not choose)' }),
    outboundTarget: Type.Integer({ description: 'outbound neighbors it keeps: ceil(maxPeers / 3)' }),
    inboundLimit: Type.Integer({ description: 'inbound neighbors it accepts: maxPeers - outboundTarget' }),
    idleClosed: Type.Integer({ description: 'connections to non-neighbors closed after mesh.idleConnectionMs without a request' }),
    rejected: Type.Integer({ description: 'neighbor asks other agents rejected (their inbound side full)' }),
    priorityRefused: Type.Integer({ description: 'priority asks this agent refused: its priority evictions for the window were used up' }),
  }, { description: 'the bounded partial view gossip and probes run over (peer-dialer.ts)' }),
  members: Type.Object({ alive: Type.Integer(), suspect: Type.Integer(), dead: Type.Integer() }),
  messages: Type.Object({
    published: Rate,
    received: Rate,
    stale: Type.Integer({ description: 'valid but older than what this agent holds (ignored)' }),
    invalid: Type.Object({
      oversized: Type.Integer(), malformed: Type.Integer(), schema: Type.Integer(), signature: Type.Integer(),
    }, { description: 'dropped messages by reason; never forwarded' }),
  }),
  dissemination: Type.Object({
    samples: Type.Integer({ description: 'records received in the last 60 s' }),
    p50Ms: Type.Union([Type.Number(), Type.Null()]),
    p99Ms: Type.Union([Type.Number(), Type.Null()]),
    maxMs: Type.Union([Type.Number(), Type.Null()]),
  }, { description: 'record receipt time minus the sender\'s publish time, over the last 60 s' }),
  sync: Type.Object({
    syncs: Type.Integer({ description: 'push-pull state syncs this agent started that completed' }),
    failed: Type.Integer(),
    recordsApplied: Type.Integer({ description: 'records that were news when they arrived by sync' }),
  }, { description: 'push-pull state sync (state-sync.ts)' }),
  probes: Type.Object({ sent: Type.Integer(), failed: Type.Integer(), discarded: Type.Integer({ description: 'failed while this agent stalled: not held against the member' }) }),
  health: Type.Object({ score: Type.Integer({ description: 'Lifeguard awareness, 0 = healthy' }), healthy: Type.Boolean() }),
})

export type MeshStatus = Static<typeof MeshStatusSchema>
export type PeerView = Static<typeof PeerViewSchema>
export type MeshInfo = Static<typeof MeshInfoSchema>
