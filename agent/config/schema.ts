/**
 * The agent's configuration schema: one TypeBox object per subsystem, units in
 * the key names, every field documented with its default. This file is the
 * single source of truth: validation, defaults, env-variable names, the
 * `--print-config` output and the README's config reference are derived from it.
 *
 * Each subsystem declares its own section, schema and defaults beside its code
 * (mesh/membership/mesh-config.ts, mesh/election/election-config.ts, agent/state/state-config.ts,
 * …); this file composes them into `configSchema` and keeps the daemon's own
 * sections (node, api, log, shutdown).
 */
import { tmpdir } from 'node:os'
import { Type, type Static } from '@sinclair/typebox'
import { InventorySection, defaultInventoryConfig } from '../inventory/inventory-config.ts'
import { LocksSection, defaultLocksConfig } from '../state/device-lock-config.ts'
import { StateSection, defaultStateConfig, devStateConfig } from '../state/state-config.ts'
import { MeshSection, defaultMeshConfig, devMeshConfig } from '../../mesh/membership/mesh-config.ts'
import { ElectionSection, defaultElectionConfig, devElectionConfig } from '../../mesh/election/election-config.ts'
import { PlacementSection, defaultPlacementConfig } from '../../mesh/control/jobs/jobs-config.ts'
import { WeightsSection, defaultWeightsConfig, devWeightsConfig } from '../weights/weights-config.ts'
import { RewardSection, defaultRewardConfig } from '../../mesh/control/reward/reward-config.ts'
import { MetricsSection, defaultMetricsConfig } from '../metrics/metrics-config.ts'
import { defaultConnectionLimits } from '../api/connection-limits.ts'

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
  adminGroup: Type.String({
    maxLength: 64,
    pattern: '^([0-9]{1,10}|[A-Za-z_][A-Za-z0-9_.-]*[$]?)?$',
    description: 'Group whose members (the calling process\'s primary or a supplementary group) are API admins, as root and the agent\'s own uid are: they may call the admin routes (leader decisions, job submission, completion and operations, reward work) and use every namespace, model, device-lock holder and worker (agent/api/AUTHORIZATION.md). A group name, which must exist in /etc/group when the agent starts, or a numeric gid as a string ("4242"). "" = none: only root and the agent\'s uid. Default: "".',
  }),
  bodyLimitBytes: Type.Integer({
    minimum: 1024,
    maximum: 64 * 1024 * 1024,
    description: 'Largest request body accepted, in bytes; a larger body gets 413 ERR_BODY_TOO_LARGE, answered once the body was read to its end (so a client that sends its whole body before reading gets it). The StateManager\'s batch routes (offload, onload, prefetch, drop, hints) are not bound by it: they take any body their schema admits (65,536 items of the longest key and memory, about 94 MiB for an offload). Default: 1048576 (1 MiB).',
  }),
  maxConnections: Type.Integer({
    minimum: 16,
    maximum: 65_536,
    description: 'Most connections the API socket keeps open at once (event streams and waiting requests count); one over it is closed as soon as it is accepted, and a warning says how many were refused (at most one per 10 s). Default: 512.',
  }),
  requestTimeoutMs: Type.Integer({
    minimum: 1000,
    maximum: 3_600_000,
    description: 'Longest time a caller may take to send a whole request, headers and body, in milliseconds (the headers within the lesser of this and 60 s, so a connection that sends nothing is closed then); a request not received in time gets 400 and its connection is closed. Responses are not bounded (event streams, long polls, waiting lock requests). Raise it with bodyLimitBytes for slow senders. Default: 30000.',
  }),
  pathRoots: Type.Array(Type.String({ minLength: 1, maxLength: 4096, pattern: '^/' }), {
    maxItems: 64,
    description: 'Directories under which file paths given through the API must lie (materialize output, a safetensors file to publish); symlinks are resolved first, anything else is ERR_PATH_FORBIDDEN. Default: [] = only <node.stateDir>/files. Dev: that and the system temp directory.',
  }),
}, { additionalProperties: false })

export const LogSection = Type.Object({
  level: Type.Union(logLevels.map(l => Type.Literal(l)), {
    description: `Log level of the JSON logs on stdout: ${logLevels.join(', ')}. Default: "info".`,
  }),
}, { additionalProperties: false })

export const ShutdownSection = Type.Object({
  graceMs: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    description: 'How long a graceful stop (SIGTERM/SIGINT) may take before the agent forces exit, in milliseconds; at least reward.workerStopGraceMs + 2000 (the stop waits for the reward workers). Default: 10000.',
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
  metrics: MetricsSection,
  shutdown: ShutdownSection,
}, { additionalProperties: false })

export type AgentConfig = Static<typeof configSchema>

/** Production defaults, for an agent installed with systemd. */
export function defaultConfig (hostname: string): AgentConfig {
  return {
    node: { name: hostname, stateDir: '/var/lib/agentd' },
    api: { socketPath: '/run/agentd/agentd.sock', socketMode: '0660', socketGroup: 'agentd', adminGroup: '', bodyLimitBytes: 1024 * 1024, ...defaultConnectionLimits, pathRoots: [] },
    log: { level: 'info' },
    inventory: { ...defaultInventoryConfig },
    locks: { ...defaultLocksConfig },
    mesh: defaultMeshConfig(),
    election: { ...defaultElectionConfig },
    placement: { ...defaultPlacementConfig },
    state: defaultStateConfig('/var/lib/agentd'),
    weights: { ...defaultWeightsConfig },
    reward: { ...defaultRewardConfig, stages: [] },
    metrics: { ...defaultMetricsConfig },
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
    api: { ...base.api, socketPath: `${stateDir}/agentd.sock`, socketGroup: '', pathRoots: [`${stateDir}/files`, tmpdir()] },
    mesh: devMeshConfig(),
    election: { ...devElectionConfig },
    state: devStateConfig(stateDir),
    weights: { ...devWeightsConfig },
  }
}
