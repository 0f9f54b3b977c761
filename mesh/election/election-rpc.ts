/**
 * The election's request/response protocol on the agent's libp2p node,
 * `/agentd/election/1.0.0`: one JSON request (raft-election.ts
 * ElectionRequest: prevote, vote, heartbeat, append), one JSON response
 * (json-protocol.ts). A (pre)vote without `log` (an agent of an older
 * version) counts as an empty log: it wins no vote from a voter that holds
 * decisions.
 *
 * Besides the election's requests, `{ type: 'decisions', batch }` is the
 * leader's direct catch-up for a voter whose heartbeat answers show it lags
 * behind the decisions (a gossip message it never got); its answer is
 * granted when the batch was accepted.
 */
import type { MeshLibp2p } from '../membership/libp2p-node.ts'
import { handleJson, requestJson } from '../membership/json-protocol.ts'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import type { ElectionRequest, ElectionResponse, ElectionTransport } from './raft-election.ts'
import { emptyPosition, parseSnapshot, type LogPosition } from './replicated-log.ts'
import { DecisionBatchSchema, type DecisionBatch } from '../membership/mesh-messages.ts'

export const electionProtocol = '/agentd/election/1.0.0'
/**
 * Requests carry at most a catch-up batch of decisions or the leader's log
 * snapshot; both are bounded by mesh.maxRecordBytes (at most 4 MiB), and so
 * is this, with room for the envelope.
 */
const maxMessageBytes = 5 * 1024 * 1024
const handlerTimeoutMs = 5_000

export type ElectionRpcRequest = ElectionRequest | { type: 'decisions', batch: DecisionBatch }

const checkBatch = TypeCompiler.Compile(DecisionBatchSchema)

export interface ElectionRpc extends ElectionTransport {
  request(peer: string, request: ElectionRpcRequest, signal: AbortSignal): Promise<ElectionResponse>
  /** Starts answering requests with `handler` (idempotent per node). */
  register(handler: (from: string, request: ElectionRpcRequest) => Promise<ElectionResponse>): Promise<void>
  unregister(): Promise<void>
}

export function createElectionRpc (node: MeshLibp2p): ElectionRpc {
  // Kept streams (json-protocol.ts): ten heartbeats a second per voter; every request here may arrive twice.
  const protocol = { protocol: electionProtocol, maxMessageBytes, keepAlive: true }
  return {
    async request (peer, request, signal) {
      return parseResponse(await requestJson(node, peer, protocol, request, signal))
    },
    async register (handler) {
      await handleJson(node, { ...protocol, handlerTimeoutMs }, async (from, message) => handler(from, parseRequest(message)))
    },
    async unregister () {
      await node.unhandle(electionProtocol).catch(() => {})
    },
  }
}

const isCount = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0

function parseRequest (v: unknown): ElectionRpcRequest {
  const r = v as Record<string, unknown>
  if (typeof r === 'object' && r !== null && r.type === 'decisions' && checkBatch.Check(r.batch)) return { type: 'decisions', batch: r.batch }
  if (typeof r !== 'object' || r === null || !isCount(r.term) || typeof r.voterSetId !== 'string') throw new Error('malformed election request')
  if ((r.type === 'prevote' || r.type === 'vote') && typeof r.candidate === 'string') {
    const log = r.log === undefined ? emptyPosition : parsePosition(r.log)
    if (log === undefined) throw new Error('malformed election request: log')
    return { type: r.type, term: r.term, candidate: r.candidate, voterSetId: r.voterSetId, log }
  }
  if (r.type === 'heartbeat' && typeof r.leader === 'string') return { type: 'heartbeat', term: r.term, leader: r.leader, voterSetId: r.voterSetId }
  if (r.type === 'append' && typeof r.leader === 'string') return { type: 'append', term: r.term, leader: r.leader, voterSetId: r.voterSetId, snapshot: parseSnapshot(r.snapshot) }
  throw new Error('malformed election request')
}

function parsePosition (v: unknown): LogPosition | undefined {
  const p = v as Record<string, unknown> | null
  return typeof p === 'object' && p !== null && isCount(p.epoch) && isCount(p.seq) ? { epoch: p.epoch, seq: p.seq } : undefined
}

function parseResponse (v: unknown): ElectionResponse {
  const r = v as Record<string, unknown>
  if (typeof r !== 'object' || r === null || !isCount(r.term) || typeof r.granted !== 'boolean') throw new Error('malformed election response')
  const response: ElectionResponse = { term: r.term, granted: r.granted }
  if (typeof r.reason === 'string') response.reason = r.reason
  const applied = r.applied as Record<string, unknown> | undefined
  if (typeof applied === 'object' && applied !== null && isCount(applied.epoch) && isCount(applied.seq)) response.applied = { epoch: applied.epoch, seq: applied.seq }
  const log = parsePosition(r.log)
  if (log !== undefined) response.log = log
  return response
}
