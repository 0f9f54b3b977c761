/**
 * The local API's half of the error contract: which HTTP status answers each
 * stable error code (core/errors.ts). Only the API server and its tests need
 * it; below the API an error is its code.
 */
import type { AgentError, ErrorCode } from '../../core/errors.ts'

/** The HTTP status each error code maps to; a new code does not compile until it has one here. */
export const errorStatus = {
  ERR_BAD_REQUEST: 400,
  ERR_CONFIG_INVALID: 400,
  ERR_NOT_FOUND: 404,
  ERR_FORBIDDEN: 403,
  ERR_PATH_FORBIDDEN: 403,
  ERR_METHOD_NOT_ALLOWED: 405,
  ERR_BODY_TOO_LARGE: 413,
  ERR_UNSUPPORTED_MEDIA_TYPE: 415,
  ERR_SOCKET_IN_USE: 409,
  ERR_STATE_DIR_LOCKED: 409,
  ERR_UNAVAILABLE: 503,
  ERR_STARTING: 503,
  ERR_AGENT_UNREACHABLE: 503,
  ERR_CONNECTION_LOST: 502,
  ERR_INTERNAL: 500,
  // native addon (native/index.ts)
  ERR_ARG_INVALID: 400,
  ERR_OUT_OF_RANGE: 400,
  ERR_EXTENT_INVALID: 400,
  ERR_SHM_NOT_FOUND: 404,
  ERR_SHM_TOO_SMALL: 400,
  ERR_RESOURCE_CLOSED: 409,
  ERR_POOL_FULL: 507,
  ERR_MEMLOCK_LIMIT: 503,
  ERR_NATIVE_UNAVAILABLE: 503,
  ERR_CUDA_UNAVAILABLE: 503,
  ERR_CUDA: 500,
  ERR_UCX_UNAVAILABLE: 503,
  ERR_UCX: 502,
  ERR_IO: 500,
  ERR_SYSTEM: 500,
  // StateManager (agent/state/)
  ERR_KEY_INVALID: 400,
  ERR_KEY_NOT_FOUND: 404,
  ERR_SIZE_MISMATCH: 400,
  ERR_SOURCE_NOT_FOUND: 404,
  ERR_TIER_FULL: 507,
  ERR_QUOTA_EXCEEDED: 507,
  ERR_DATA_CORRUPT: 500,
  // device lock (agent/state/device-lock.ts)
  ERR_LOCK_TIMEOUT: 423,
  ERR_LOCK_NOT_HELD: 409,
  // simulators (mesh/sim/)
  ERR_TRACE_INVALID: 400,
  ERR_WORKFLOW_INVALID: 400,
  // jobs (mesh/control/jobs/)
  ERR_JOB_INVALID: 400,
  ERR_JOB_CONFLICT: 409,
  ERR_JOB_NOT_FOUND: 404,
  ERR_JOBS_FULL: 507,
  // live execution (agent/workers/, mesh/control/jobs/)
  ERR_JOB_NOT_RUNNING: 409,
  ERR_UNKNOWN_OPERATION: 400,
  ERR_WORKER_EXISTS: 409,
  ERR_WORKER_MISSING: 409,
  ERR_WORKER_LOST: 502,
  ERR_OPERATION_FAILED: 500,
  ERR_NODE_LOST: 502,
  ERR_STATE_MISMATCH: 409,
  ERR_STALE_EPOCH: 409,
  // mesh (mesh/)
  ERR_CLUSTER_KEY_INVALID: 400,
  ERR_MESH_ADDRESS: 400,
  ERR_MESH_UNAVAILABLE: 503,
  // leader election (mesh/election/)
  ERR_NOT_LEADER: 409,
  ERR_NOT_COMMITTED: 503,
  ERR_ELECTION_STATE: 500,
  ERR_LEADER_UNAVAILABLE: 503,
  ERR_ETCD_UNAVAILABLE: 503,
  ERR_ETCD: 502,
  // weights (agent/weights/)
  ERR_LAYOUT_INVALID: 400,
  ERR_WEIGHTS_NOT_FOUND: 404,
  ERR_WEIGHTS_VERSION_EXISTS: 409,
  ERR_WEIGHTS_RETIRED: 410,
  ERR_WEIGHTS_AUTH: 401,
  ERR_WEIGHTS_PROTOCOL: 502,
  ERR_WEIGHTS_TRANSFER: 502,
  ERR_WEIGHTS_NOT_HELD: 404,
  // reward service (agent/reward/)
  ERR_REWARD_CONFLICT: 409,
  ERR_REWARD_FULL: 429,
  ERR_REWARD_LEASE_LOST: 410,
} as const satisfies Record<ErrorCode, number>

/** The HTTP status an API response carrying `err` has. */
export function httpStatusOf (err: AgentError): number {
  return errorStatus[err.code]
}
