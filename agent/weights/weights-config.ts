/** Config section `weights` of the weight-transfer agent (units in the names; see agent/config/schema.ts). */
import { Type, type Static } from '@sinclair/typebox'
import { AgentError } from '../../core/errors.ts'

export const WeightsSection = Type.Object({
  enabled: Type.Boolean({ description: 'Run the weight-transfer agent (needs the StateManager). Default: true.' }),
  dataListen: Type.String({ pattern: '^(\\[[0-9a-fA-F:]+\\]|[^:\\s]+):\\d{1,5}$', description: 'host:port of the weight data server (TCP, authenticated with the cluster key); port 0 picks a free one. Default: "0.0.0.0:7461" (dev: "127.0.0.1:0").' }),
  retainVersions: Type.Integer({ minimum: 1, maximum: 1000, description: 'Committed versions kept per model; older ones are retired when a new one commits. Default: 2.' }),
  streams: Type.Integer({ minimum: 1, maximum: 64, description: 'Parallel connections of a pull unless the request says otherwise. Default: 4.' }),
  chunkBytes: Type.Integer({ minimum: 65536, maximum: 64 * 2 ** 20, description: 'Bytes per checksummed chunk of a published tensor and per piece of a pull. Default: 4194304 (4 MiB).' }),
  pullWindowBytes: Type.Integer({ minimum: 0, maximum: 2 ** 50, description: 'Host-pool bytes a pull fills at once: slices are admitted while they fit (one at least) and become keys as each completes, so the pool spills earlier ones to NVMe and a pull of any size passes through the window; 0: an eighth of state.hostPoolBytes. Default: 0.' }),
  serveWindowBytes: Type.Integer({ minimum: 0, maximum: 2 ** 50, description: 'Host-pool bytes the data server keeps for tensor chunks it read from NVMe to serve them (a tensor on NVMe is read by the chunks pullers ask for, never promoted whole; pullers asking for the same chunks while they are kept share one read); 0: an eighth of state.hostPoolBytes, but at least 32 chunks (weights.chunkBytes: what four pullers of 4 streams have in flight); at most half the pool (more is reduced to half, with a warning). Default: 0.' }),
  durable: Type.Boolean({ description: 'Write published versions to the NVMe tier so they survive a restart (pulled copies stay in memory). Default: true.' }),
  authTimeoutMs: Type.Integer({ minimum: 100, maximum: 60_000, description: 'Time a data connection has to complete the handshake (its AUTH proof checked), in milliseconds; then it is closed. Default: 1000.' }),
  maxPendingConnections: Type.Integer({ minimum: 1, maximum: 4096, description: 'Data connections still in their handshake, all addresses together; a new one beyond it evicts the oldest pending connection of the address holding the most. Default: 32.' }),
  maxPendingPerAddress: Type.Integer({ minimum: 1, maximum: 4096, description: 'Data connections still in their handshake from one remote address (an IPv6 /64); a new one beyond it evicts that address\'s oldest. At most weights.maxPendingConnections. Default: 8.' }),
  maxConnections: Type.Integer({ minimum: 1, maximum: 65_536, description: 'Authenticated data connections; one that authenticates beyond it is closed (the puller retries). Connections in their handshake do not count. Default: 256.' }),
  frameTimeoutMs: Type.Integer({ minimum: 100, maximum: 600_000, description: 'Once the first byte of a request frame arrived on an authenticated data connection, time the rest of the frame has to arrive, in milliseconds; then the connection is closed. Default: 5000.' }),
  idleTimeoutMs: Type.Integer({ minimum: 0, maximum: 86_400_000, description: 'An authenticated data connection with no request in progress and no bytes moving either way for this long is closed, in milliseconds; 0: never. Default: 300000 (5 min).' }),
  uploadBytesPerSecond: Type.Integer({ minimum: 0, maximum: 2 ** 40, description: 'Tensor bytes per second the data server sends, all pullers together (a rollout node serving swarm peers keeps the rest of its uplink for its own work); 0: no limit. Default: 0.' }),
  swarmPeerTimeoutMs: Type.Integer({ minimum: 100, maximum: 600_000, description: 'A swarm peer that has not answered a READ of this pull\'s within this many milliseconds is dropped for the rest of the pull (its tensors go back to the pull\'s source). Default: 10000.' }),
  transports: Type.Array(Type.Union([Type.Literal('ucx'), Type.Literal('tcp')]), { minItems: 1, maxItems: 2, uniqueItems: true, description: 'How weight bytes move, in order of preference. "tcp" (required: the authenticated control connection, narrow slices and the fallback); "ucx": the data server also serves committed versions for one-sided UCX reads (RDMA on InfiniBand/RoCE, shared memory within a node; UCX_TLS and UCX_NET_DEVICES apply), and, listed before "tcp", pulls read tensor bytes with UCX (resharded slices as one get per source row), falling back to TCP with the reason reported: a server without UCX, one reached by UCX only over its TCP transport (weights.ucxOverTcp), a version too large to pin. Needs the native addon built with UCX (libucx-dev); without it, TCP only (logged). Default: ["ucx", "tcp"] (dev: ["tcp"]: dev agents share one host, where UCX would move bytes through shared memory and bypass the network under test).' }),
  ucxOverTcp: Type.Boolean({ description: 'Read over UCX also from a server UCX reaches only through its TCP transport (no RDMA, no shared memory). Off by default: measured, UCX\'s TCP transport moved 0.42x the bytes per second of this agent\'s own TCP streams; such a server is read over TCP, with the reason reported. Default: false.' }),
}, { additionalProperties: false })

export type WeightsConfig = Static<typeof WeightsSection>

export const defaultWeightsConfig: WeightsConfig = {
  enabled: true,
  dataListen: '0.0.0.0:7461',
  retainVersions: 2,
  streams: 4,
  chunkBytes: 4 * 2 ** 20,
  pullWindowBytes: 0,
  serveWindowBytes: 0,
  durable: true,
  authTimeoutMs: 1000,
  maxPendingConnections: 32,
  maxPendingPerAddress: 8,
  maxConnections: 256,
  frameTimeoutMs: 5000,
  idleTimeoutMs: 300_000,
  uploadBytesPerSecond: 0,
  swarmPeerTimeoutMs: 10_000,
  transports: ['ucx', 'tcp'],
  ucxOverTcp: false,
}

export const devWeightsConfig: WeightsConfig = { ...defaultWeightsConfig, dataListen: '127.0.0.1:0', transports: ['tcp'] }

/** The data server's connection limits (tcp-server.ts), named as in the config. */
export type DataPortLimits = Pick<WeightsConfig, 'authTimeoutMs' | 'maxPendingConnections' | 'maxPendingPerAddress' | 'maxConnections' | 'frameTimeoutMs' | 'idleTimeoutMs'> & Partial<Pick<WeightsConfig, 'transports'>>

/** Rules between fields of the section (each field's bounds are the schema's); one line per broken rule. */
export function weightsConfigProblems (c: DataPortLimits): string[] {
  const problems: string[] = []
  if (c.maxPendingPerAddress > c.maxPendingConnections) problems.push(`weights.maxPendingPerAddress (${c.maxPendingPerAddress}) must be <= weights.maxPendingConnections (${c.maxPendingConnections})`)
  if (c.transports !== undefined && !c.transports.includes('tcp')) problems.push(`weights.transports (${JSON.stringify(c.transports)}) must include "tcp": the authenticated control connection and sliced reads use it`)
  return problems
}

/** Checks the section's cross-field rules at config load; throws ERR_CONFIG_INVALID naming each. */
export function validateWeightsConfig (c: WeightsConfig): void {
  const problems = weightsConfigProblems(c)
  if (problems.length > 0) throw new AgentError('ERR_CONFIG_INVALID', problems.join('; '), { details: problems })
}
