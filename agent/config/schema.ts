/**
 * The agent's configuration schema: one TypeBox object per subsystem, units in
 * the key names, every field documented with its default. This file is the
 * single source of truth: validation, defaults, env-variable names, the
 * `--print-config` output and the README's config reference are derived from it.
 *
 * Later subsystems add their section here and to `configSchema` below.
 */
import { Type, type Static } from '@sinclair/typebox'
import { LocksSection, defaultLocksConfig } from '../state/device-lock-config.ts'
import { StateSection, defaultStateConfig, devStateConfig } from '../state/state-config.ts'
import { ElectionSection, defaultElectionConfig, devElectionConfig } from '../../mesh/election/election-config.ts'
import { PlacementSection, defaultPlacementConfig } from '../../mesh/jobs/jobs-config.ts'
import { WeightsSection, defaultWeightsConfig, devWeightsConfig } from '../weights/weights-config.ts'
import { RewardSection, defaultRewardConfig } from '../reward/reward-config.ts'

export const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

export const NodeSection = Type.Object({
  name: Type.String({
    minLength: 1,
    maxLength: 253,
    pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$',
    description: 'Node name shown in the mesh and by agentctl. Default: the host name.',
  }),
  stateDir: Type.String({
    minLength: 1,
    description: 'Directory for persistent agent state (node identity, journals). Default: /var/lib/agentd.',
  }),
}, { additionalProperties: false })

export const ApiSection = Type.Object({
  socketPath: Type.String({
    minLength: 1,
    maxLength: 107,
    description: 'Unix socket of the local HTTP/JSON API (at most 107 bytes, the sun_path limit). Default: /run/agentd/agentd.sock.',
  }),
  socketMode: Type.String({
    pattern: '^0?[0-7]{3}$',
    description: 'Octal file mode of the socket. Default: "0660" (owner and group).',
  }),
  socketGroup: Type.String({
    description: 'Group that owns the socket, so its members may call the agent; "" keeps the process group. Default: "agentd".',
  }),
  bodyLimitBytes: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    description: 'Largest request body accepted, in bytes; larger bodies get 413. Default: 1048576 (1 MiB).',
  }),
}, { additionalProperties: false })

export const LogSection = Type.Object({
  level: Type.Union(logLevels.map(l => Type.Literal(l)), {
    description: `Log level of the JSON logs on stdout: ${logLevels.join(', ')}. Default: "info".`,
  }),
}, { additionalProperties: false })

export const GpuOverride = Type.Object({
  model: Type.String({ minLength: 1 }),
  memoryBytes: Type.Integer({ minimum: 0 }),
  uuid: Type.String(),
  pciBus: Type.String(),
}, { additionalProperties: false })

export const InventorySection = Type.Object({
  gpus: Type.Optional(Type.Array(GpuOverride, {
    description: 'When set, replaces GPU detection: a list of { model, memoryBytes, uuid, pciBus }. Default: unset (detect).',
  })),
  gpuSampleIntervalMs: Type.Integer({
    minimum: 0,
    maximum: 3_600_000,
    description: 'How often each GPU\'s free memory, health and holder are sampled with nvidia-smi for the mesh record, in milliseconds; 0 turns sampling off (they are reported unknown). Default: 5000.',
  }),
  nvidiaSmiCommand: Type.String({
    minLength: 1,
    description: 'The nvidia-smi executable used for GPU sampling (a bare name is looked up on PATH). Default: "nvidia-smi".',
  }),
}, { additionalProperties: false })

export const ShutdownSection = Type.Object({
  graceMs: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    description: 'How long a graceful stop (SIGTERM/SIGINT) may take before the agent forces exit, in milliseconds. Default: 10000.',
  }),
}, { additionalProperties: false })

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
    description: 'How often the availability record is re-published even when nothing changed (so a lost message never leaves a peer stale), in milliseconds, in clusters of up to 6 live agents; beyond that the period grows in proportion, so each agent receives about 6 heartbeat records per interval whatever the cluster size. Default: 2000.',
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
    description: 'libp2p connection monitor: every connection is pinged this often and aborted when the ping fails, in milliseconds. It reclaims dead connections; a frozen or dead agent is noticed by the SWIM probes (probeIntervalMs: suspect in about a second at any cluster size). Each ping opens a stream on every connection of a full mesh, so this is the idle cost that grows with the cluster (20 agents on one host: 4.2-4.3 % of a core per idle agent at 10 s, 5.0-5.2 % at 5 s). Default: 10000 (libp2p\'s).',
  }),
  maxConnections: Type.Integer({
    minimum: 8,
    maximum: 100_000,
    description: 'Connections libp2p keeps before pruning; the agent connects to every member, so this bounds the cluster size. Default: 1024.',
  }),
  maxRecordBytes: Type.Integer({
    minimum: 1024,
    maximum: 4 * 1024 * 1024,
    description: 'Largest availability record or membership message accepted from the mesh, in bytes; larger ones are dropped and counted. This agent\'s own record is cut to fit (resident namespaces first, then weight versions, then GPUs) and marked partial (agentctl peers stars it). Default: 65536.',
  }),
}, { additionalProperties: false })

export const configSchema = Type.Object({
  node: NodeSection,
  api: ApiSection,
  log: LogSection,
  inventory: InventorySection,
  locks: LocksSection,
  mesh: MeshSection,
  election: ElectionSection,
  placement: PlacementSection,
  state: StateSection,
  weights: WeightsSection,
  reward: RewardSection,
  shutdown: ShutdownSection,
}, { additionalProperties: false })

export type AgentConfig = Static<typeof configSchema>
export type GpuOverrideConfig = Static<typeof GpuOverride>
export type MeshConfig = Static<typeof MeshSection>

/** Production defaults, for an agent installed with systemd. */
export function defaultConfig (hostname: string): AgentConfig {
  return {
    node: { name: hostname, stateDir: '/var/lib/agentd' },
    api: { socketPath: '/run/agentd/agentd.sock', socketMode: '0660', socketGroup: 'agentd', bodyLimitBytes: 1024 * 1024 },
    log: { level: 'info' },
    inventory: { gpuSampleIntervalMs: 5000, nvidiaSmiCommand: 'nvidia-smi' },
    locks: { ...defaultLocksConfig },
    mesh: {
      enabled: true,
      listen: ['/ip4/0.0.0.0/tcp/7460'],
      announceAddress: '',
      join: [],
      clusterKeyFile: '/etc/agentd/cluster.key',
      trustedCidrs: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '127.0.0.0/8', 'fc00::/7', '::1/128'],
      preemptible: false,
      heartbeatIntervalMs: 2000,
      syncIntervalMs: 30_000,
      publishDebounceMs: 100,
      probeIntervalMs: 500,
      probeTimeoutMs: 300,
      indirectProbes: 3,
      suspicionMult: 4,
      suspicionMaxTimeoutMult: 6,
      deadRetentionMs: 300_000,
      connectionPingIntervalMs: 10_000,
      maxConnections: 1024,
      maxRecordBytes: 64 * 1024,
    },
    election: { ...defaultElectionConfig },
    placement: { ...defaultPlacementConfig },
    state: defaultStateConfig('/var/lib/agentd'),
    weights: { ...defaultWeightsConfig },
    reward: { ...defaultRewardConfig, stages: [] },
    shutdown: { graceMs: 10_000 },
  }
}

/**
 * Defaults of `--dev --state-dir DIR`: a single-node agent with every path
 * under DIR, the socket owned by the caller's group, loopback only (the mesh
 * listens on 127.0.0.1, any free port, with a cluster key generated under DIR;
 * `--join` makes dev agents on one host a cluster).
 */
export function devConfig (hostname: string, stateDir: string): AgentConfig {
  const base = defaultConfig(hostname)
  return {
    ...base,
    node: { ...base.node, stateDir },
    api: { ...base.api, socketPath: `${stateDir}/agentd.sock`, socketGroup: '' },
    mesh: { ...base.mesh, listen: ['/ip4/127.0.0.1/tcp/0'], clusterKeyFile: '' },
    election: { ...devElectionConfig },
    state: devStateConfig(stateDir),
    weights: { ...devWeightsConfig },
    shutdown: { graceMs: 5_000 },
  }
}
