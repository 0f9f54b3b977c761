/**
 * Leader → node dispatch of live operations, `/agentd/job-op/1.0.0`
 * (json-protocol.ts): one DispatchMessage (op-wire.ts), one answer
 * `{ ok: true, answer }` or `{ ok: false, code, message, details }`.
 *
 * Contract:
 * - The handler (the node's executor, agent/workers/node-executor.ts) is
 *   given the message validated and the sender's peer id (authenticated by
 *   the connection). It fences by epoch itself.
 * - A call to this agent's own peer id runs the handler in process.
 * - A transport failure (the node died, the connection broke, the stream was
 *   reset) is ERR_NODE_LOST: the operation may or may not have run there;
 *   the leader retries only with the same opId (the node answers a repeat
 *   from its idempotency cache).
 * - Operations run as long as the user's handler takes: a node answers
 *   within handlerTimeoutMs (6 h) or the stream is aborted.
 */
import { AgentError, isErrorCode } from '../../../core/errors.ts'
import type { MeshLibp2p } from '../../membership/libp2p-node.ts'
import { handleJson, requestJson } from '../../membership/json-protocol.ts'
import { parseDispatch, parseDispatchAnswer, parseVersionsAnswer, type DispatchAnswer, type DispatchMessage, type VersionsAnswer } from './op-wire.ts'

export const jobOpProtocol = '/agentd/job-op/1.0.0'
const maxMessageBytes = 8 * 1024 * 1024
const handlerTimeoutMs = 6 * 3600_000
const maxStreamsPerConnection = 4096

/** A run's answer, a `versions` answer, or `{}` for the other kinds. */
export type DispatchReply = DispatchAnswer | VersionsAnswer | Record<string, never>
export type DispatchHandler = (message: DispatchMessage, from: string) => Promise<DispatchReply>

type Reply = { ok: true, answer: unknown } | { ok: false, code: string, message: string, details?: unknown }

export interface OpDispatch {
  /** Sends `message` to `peer` (or runs it here when `peer` is this agent); the node's answer, or its coded error. */
  send(peer: string, message: DispatchMessage, signal: AbortSignal): Promise<DispatchReply>
}

export async function serveOpDispatch (node: MeshLibp2p, handler: DispatchHandler): Promise<void> {
  await handleJson(node, { protocol: jobOpProtocol, maxMessageBytes, handlerTimeoutMs, maxStreamsPerConnection }, async (from, raw) => await answer(handler, raw, from))
}

async function answer (handler: DispatchHandler, raw: unknown, from: string): Promise<Reply> {
  try {
    return { ok: true, answer: await handler(parseDispatch(raw), from) }
  } catch (err) {
    if (err instanceof AgentError) return { ok: false, code: err.code, message: err.message, ...(err.details !== undefined ? { details: err.details } : {}) }
    return { ok: false, code: 'ERR_INTERNAL', message: `dispatch failed: ${(err as Error).message}` }
  }
}

export function createOpDispatch (components: { node: MeshLibp2p | undefined, self: string, local: DispatchHandler }): OpDispatch {
  return {
    async send (peer, message, signal) {
      let reply: Reply
      if (peer === components.self) {
        reply = await answer(components.local, message, peer)
      } else {
        if (components.node === undefined) throw new AgentError('ERR_NODE_LOST', `no mesh to reach ${peer}`)
        try {
          reply = await requestJson(components.node, peer, { protocol: jobOpProtocol, maxMessageBytes }, message, signal) as Reply
        } catch (err) {
          throw new AgentError('ERR_NODE_LOST', `node ${peer} did not answer the ${message.kind} of job ${message.job}: ${(err as Error).message}`)
        }
      }
      if (reply !== null && typeof reply === 'object' && reply.ok === true) return message.kind === 'run' ? parseDispatchAnswer(reply.answer) : message.kind === 'versions' ? parseVersionsAnswer(reply.answer) : {}
      if (reply !== null && typeof reply === 'object' && reply.ok === false && isErrorCode(reply.code) && typeof reply.message === 'string') {
        throw new AgentError(reply.code, reply.message, reply.details !== undefined ? { details: reply.details } : {})
      }
      throw new AgentError('ERR_INTERNAL', `node ${peer} answered the dispatch with ${JSON.stringify(reply).slice(0, 200)}`)
    },
  }
}
