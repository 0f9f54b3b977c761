/**
 * Errors with stable codes, shared by every layer (native, mesh, agent, cli).
 * Every error the agent reports to a client is an AgentError; the local API
 * maps `code` to an HTTP status (agent/api/error-status.ts) and the client maps
 * the JSON body back, so `agentctl` prints exactly what the daemon raised.
 * Nothing here knows about HTTP.
 */

/**
 * Stable error codes, grouped by the subsystem that raises them. A code names a
 * kind of failure and never changes meaning; the HTTP status each maps to is the
 * local API's business (agent/api/error-status.ts).
 */
export const errorCodes = [
  'ERR_BAD_REQUEST',
  'ERR_CONFIG_INVALID',
  'ERR_NOT_FOUND',
  // ERR_FORBIDDEN: the caller may not do this (a decision kind owned by a subsystem, …).
  'ERR_FORBIDDEN',
  // ERR_PATH_FORBIDDEN: a file path given through the API outside api.pathRoots.
  'ERR_PATH_FORBIDDEN',
  'ERR_METHOD_NOT_ALLOWED',
  'ERR_BODY_TOO_LARGE',
  'ERR_UNSUPPORTED_MEDIA_TYPE',
  'ERR_SOCKET_IN_USE',
  'ERR_STATE_DIR_LOCKED',
  'ERR_UNAVAILABLE',
  // ERR_STARTING: the agent is still starting (recovering its state); nothing was done, ask again.
  'ERR_STARTING',
  // ERR_AGENT_UNREACHABLE: a client found no agent to connect to (no socket, a stale one, no permission) or got no answer in time.
  'ERR_AGENT_UNREACHABLE',
  // ERR_CONNECTION_LOST: the agent accepted the connection but closed it before answering (it stopped or crashed
  // mid-request, or refused a connection over api.maxConnections); the request may or may not have been carried out.
  'ERR_CONNECTION_LOST',
  'ERR_INTERNAL',
  // native addon (native/index.ts)
  'ERR_ARG_INVALID',
  'ERR_OUT_OF_RANGE',
  'ERR_EXTENT_INVALID',
  'ERR_SHM_NOT_FOUND',
  'ERR_SHM_TOO_SMALL',
  'ERR_RESOURCE_CLOSED',
  'ERR_POOL_FULL',
  'ERR_MEMLOCK_LIMIT',
  'ERR_NATIVE_UNAVAILABLE',
  'ERR_CUDA_UNAVAILABLE',
  'ERR_CUDA',
  // ERR_UCX_UNAVAILABLE: the addon was built without UCX (no libucx-dev), or UCX could not start here.
  'ERR_UCX_UNAVAILABLE',
  // ERR_UCX: a UCX call failed (its status in the message); a get on a broken endpoint.
  'ERR_UCX',
  'ERR_IO',
  'ERR_SYSTEM',
  // StateManager (agent/state/)
  'ERR_KEY_INVALID',
  'ERR_KEY_NOT_FOUND',
  'ERR_SIZE_MISMATCH',
  'ERR_SOURCE_NOT_FOUND',
  'ERR_TIER_FULL',
  'ERR_QUOTA_EXCEEDED',
  'ERR_DATA_CORRUPT',
  // device lock (agent/state/device-lock.ts)
  'ERR_LOCK_TIMEOUT',
  'ERR_LOCK_NOT_HELD',
  // simulators (mesh/sim/)
  'ERR_TRACE_INVALID',
  'ERR_WORKFLOW_INVALID',
  // jobs (mesh/control/jobs/)
  'ERR_JOB_INVALID',
  'ERR_JOB_CONFLICT',
  'ERR_JOB_NOT_FOUND',
  'ERR_JOBS_FULL',
  // live execution (agent/workers/, mesh/control/jobs/)
  'ERR_JOB_NOT_RUNNING',
  'ERR_UNKNOWN_OPERATION',
  'ERR_WORKER_EXISTS',
  'ERR_WORKER_MISSING',
  'ERR_WORKER_LOST',
  'ERR_OPERATION_FAILED',
  'ERR_NODE_LOST',
  'ERR_STATE_MISMATCH',
  'ERR_STALE_EPOCH',
  // mesh (mesh/)
  'ERR_CLUSTER_KEY_INVALID',
  'ERR_MESH_ADDRESS',
  'ERR_MESH_UNAVAILABLE',
  // leader election (mesh/election/)
  'ERR_NOT_LEADER',
  // ERR_NOT_COMMITTED: a decision no majority of voters stored in time; it may still be committed later (retry by id).
  'ERR_NOT_COMMITTED',
  'ERR_ELECTION_STATE',
  'ERR_LEADER_UNAVAILABLE',
  'ERR_ETCD_UNAVAILABLE',
  'ERR_ETCD',
  // weights (agent/weights/)
  'ERR_LAYOUT_INVALID',
  'ERR_WEIGHTS_NOT_FOUND',
  'ERR_WEIGHTS_VERSION_EXISTS',
  'ERR_WEIGHTS_RETIRED',
  'ERR_WEIGHTS_AUTH',
  'ERR_WEIGHTS_PROTOCOL',
  'ERR_WEIGHTS_TRANSFER',
  // ERR_WEIGHTS_NOT_HELD: a swarm source does not hold that tensor yet (it is pulling the version itself); take it elsewhere.
  'ERR_WEIGHTS_NOT_HELD',
  // reward service (agent/reward/)
  'ERR_REWARD_CONFLICT',
  'ERR_REWARD_FULL',
  'ERR_REWARD_LEASE_LOST',
] as const

export type ErrorCode = typeof errorCodes[number]

const knownCodes: ReadonlySet<string> = new Set(errorCodes)

export class AgentError extends Error {
  readonly code: ErrorCode
  /** Optional structured detail (e.g. the list of invalid config keys). */
  readonly details: unknown

  constructor (code: ErrorCode, message: string, options: { cause?: unknown, details?: unknown } = {}) {
    super(message, { cause: options.cause })
    this.name = 'AgentError'
    this.code = code
    this.details = options.details
  }
}

export function isErrorCode (value: unknown): value is ErrorCode {
  return typeof value === 'string' && knownCodes.has(value)
}

/** The JSON form of an AgentError: the body of every API error response, and what `agentctl --json` prints. */
export interface ErrorBody {
  error: { code: ErrorCode, message: string, details?: unknown }
}

export function toErrorBody (err: AgentError): ErrorBody {
  const body: ErrorBody = { error: { code: err.code, message: err.message } }
  if (err.details !== undefined) body.error.details = err.details
  return body
}
