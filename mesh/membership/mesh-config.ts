/**
 * The `mesh` config section: membership, gossip and failure detection of the
 * cluster mesh (mesh/). agent/config/schema.ts composes it into the agent's
 * config; mesh/ reads only this section.
 */
import { Type, type Static } from '@sinclair/typebox'

export const MeshSection = Type.Object({
  enabled: Type.Boolean({
    description: 'Join the cluster mesh. false runs the agent stand-alone (the mesh subsystem is skipped). Default: true.',
  }),
  listen: Type.Array(Type.String({ minLength: 1 }), {
    minItems: 1,
    description: 'TCP multiaddrs the mesh listens on (flag --mesh-listen, repeatable). Default: ["/ip4/0.0.0.0/tcp/7460"]; --dev: ["/ip4/127.0.0.1/tcp/0"] (any free port).',
  }),
  announceAddress: Type.String({
    description: 'The one IP address other agents reach this node at (the management address). "" detects it: the first address of an up, non-virtual interface; docker, bridge and loopback addresses are never chosen (--dev announces 127.0.0.1). Default: "".',
  }),
  join: Type.Array(Type.String({ minLength: 1 }), {
    description: 'Seed agents to join, as multiaddrs ("/ip4/10.0.0.5/tcp/7460", optionally ending in /p2p/<peer id>); redialed forever with backoff while not connected (flag --join, repeatable). Default: [].',
  }),
  clusterKeyFile: Type.String({
    description: 'File with the cluster\'s pre-shared key in libp2p\'s format (`agentctl keygen` prints one); agents with another key cannot connect (flag --cluster-key). "" in --dev generates one into <stateDir>/cluster.key. Default: /etc/agentd/cluster.key.',
  }),
  trustedCidrs: Type.Array(Type.String({ pattern: '^[0-9a-fA-F.:]+/\\d{1,3}$' }), {
    description: 'Networks of the cluster, as CIDRs: connections from them bypass the per-host inbound rate limit and the pending-connection cap of the connection manager (every node of a rack, or 100 agents on one test host). Default: ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "fc00::/7", "::1/128"].',
  }),
  preemptible: Type.Boolean({
    description: 'Advertise this node as preemptible (spot/borrowed capacity the placement may lose). Default: false.',
  }),
  heartbeatIntervalMs: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    description: 'How often the availability record is re-published even when nothing changed (so a lost message never leaves a peer stale), in milliseconds, in clusters of up to 6 live agents; beyond that the period grows in proportion, so each agent receives about 6 heartbeat records per interval whatever the cluster size. A heartbeat only repairs a lost message (changes are published at once, liveness is the SWIM probes\' and state sync pulls what is missing every syncIntervalMs): at 2000 the heartbeats were about a third of an idle agent\'s CPU. Default: 10000.',
  }),
  syncIntervalMs: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    description: 'State sync: besides once right after start (a joiner learns every record at once), every this often a random live member is asked for the signed records this agent lacks (anti-entropy), in milliseconds; 0 = only after start. The period ramps up from start: the first pull 1 s after start, each next one twice as long after, up to this value (agents that join at the same time learn each other at once). Default: 30000 (memberlist: 30 s).',
  }),
  publishDebounceMs: Type.Integer({
    minimum: 0,
    maximum: 60_000,
    description: 'Changes to the availability record within this window are published as one record, in milliseconds. Default: 100.',
  }),
  probeIntervalMs: Type.Integer({
    minimum: 50,
    maximum: 60_000,
    description: 'SWIM protocol period: one member is probed per period, in milliseconds; also the unit of the suspicion timeout. Default: 500 (memberlist LAN: 1000).',
  }),
  probeTimeoutMs: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    description: 'How long a direct probe, and then the indirect probes through other members, may take before the member is suspected, in milliseconds (scaled up while this agent is unhealthy). Default: 300.',
  }),
  indirectProbes: Type.Integer({
    minimum: 0,
    maximum: 16,
    description: 'Members asked to probe a member that did not answer a direct probe (SWIM ping-req). Default: 3.',
  }),
  suspicionMult: Type.Integer({
    minimum: 1,
    maximum: 100,
    description: 'Suspicion timeout = suspicionMult × max(1, log10(members)) × probeIntervalMs (memberlist\'s formula) once enough members confirmed the suspicion. Default: 4.',
  }),
  suspicionMaxTimeoutMult: Type.Integer({
    minimum: 1,
    maximum: 100,
    description: 'Multiple of the suspicion timeout allowed while no other member confirmed it (Lifeguard). Default: 6.',
  }),
  deadRetentionMs: Type.Integer({
    minimum: 1000,
    maximum: 86_400_000,
    description: 'How long a dead member stays listed (state dead) before it is forgotten, in milliseconds. Default: 300000 (5 minutes).',
  }),
  connectionPingIntervalMs: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    description: 'libp2p connection monitor: every connection is pinged this often and aborted when the ping fails, in milliseconds. It reclaims dead connections; a frozen or dead agent is noticed by the SWIM probes (probeIntervalMs: suspect in about a second at any cluster size). Each ping opens a stream on every connection (the neighbors, mesh.maxPeers). Default: 10000 (libp2p\'s).',
  }),
  maxPeers: Type.Integer({
    minimum: 2,
    maximum: 100_000,
    description: 'Most neighbors: members this agent keeps a connection to, and over which gossip, SWIM probes and connection pings run. ceil(maxPeers / 3) are drawn at random from the live members (a uniform sample, refreshed as members join and leave); the rest are members that drew this agent. Connections to others (a leader call, a weight query, an indirect probe) are closed when idle (idleConnectionMs). An agent\'s idle cost grows with maxPeers, not with the cluster; 3 x (members - 1) or more makes a full mesh. Default: 12.',
  }),
  idleConnectionMs: Type.Integer({
    minimum: 1000,
    maximum: 3_600_000,
    description: 'A connection to a member that is not a neighbor is closed after carrying no request for this long, in milliseconds (gossip, identify and pings are not requests). Default: 30000.',
  }),
  maxConnections: Type.Integer({
    minimum: 8,
    maximum: 100_000,
    description: 'Connections libp2p keeps before pruning (neighbors, seeds while joining, and connections in use). Default: 1024.',
  }),
  maxRecordBytes: Type.Integer({
    minimum: 1024,
    maximum: 4 * 1024 * 1024,
    description: 'Largest availability record or membership message accepted from the mesh, in bytes; larger ones are dropped and counted. This agent\'s own record is cut to fit (resident namespaces first, then weight versions, then GPUs) and marked partial (agentctl peers stars it). Default: 65536.',
  }),
}, { additionalProperties: false })

export type MeshConfig = Static<typeof MeshSection>

/** Production defaults (a fresh object each call: the arrays are the caller's to change). */
export function defaultMeshConfig (): MeshConfig {
  return {
    enabled: true,
    listen: ['/ip4/0.0.0.0/tcp/7460'],
    announceAddress: '',
    join: [],
    clusterKeyFile: '/etc/agentd/cluster.key',
    trustedCidrs: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '127.0.0.0/8', 'fc00::/7', '::1/128'],
    preemptible: false,
    heartbeatIntervalMs: 10_000,
    syncIntervalMs: 30_000,
    publishDebounceMs: 100,
    probeIntervalMs: 500,
    probeTimeoutMs: 300,
    indirectProbes: 3,
    suspicionMult: 4,
    suspicionMaxTimeoutMult: 6,
    deadRetentionMs: 300_000,
    connectionPingIntervalMs: 10_000,
    maxPeers: 12,
    idleConnectionMs: 30_000,
    maxConnections: 1024,
    maxRecordBytes: 64 * 1024,
  }
}

/** Defaults of `--dev`: loopback on any free port, a cluster key generated under the state directory. */
export function devMeshConfig (): MeshConfig {
  return { ...defaultMeshConfig(), listen: ['/ip4/127.0.0.1/tcp/0'], clusterKeyFile: '' }
}
