/**
 * The failure detector's probes over libp2p: a direct probe is a libp2p ping
 * (over the open connection, or a fresh dial when there is none), and
 * `/agentd/ping-req/1.0.0` asks another agent to ping a target for us (SWIM's
 * indirect probe). Both say 'refused' when the target's port refused the TCP
 * connection — the evidence that the process is gone.
 *
 * ping-req wire (json-protocol.ts): the requester sends { target, timeoutMs }
 * and reads back { outcome }; the helper caps the timeout at maxHelperTimeoutMs.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import type { MeshLibp2p } from './libp2p-node.ts'
import { handleJson, requestJson } from './json-protocol.ts'
import type { ProbeOutcome, Prober } from './failure-detector.ts'

export const pingReqProtocol = '/agentd/ping-req/1.0.0'
const maxHelperTimeoutMs = 10_000
const outcomes: ReadonlySet<string> = new Set(['ack', 'timeout', 'refused'])

export interface Libp2pProber extends Prober {
  /** Registers the ping-req handler (before the node starts). */
  register(): Promise<void>
  /** Stops answering ping-req (idempotent). */
  unregister(): Promise<void>
}

export function createLibp2pProber (node: MeshLibp2p): Libp2pProber {
  const protocol = { protocol: pingReqProtocol, maxMessageBytes: 1024 }
  async function ping (target: string, timeoutMs: number, signal: AbortSignal): Promise<ProbeOutcome> {
    const peer = peerIdFromString(target)
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
    // A connection that just closed can fail the first ping before any dial; then dial once more.
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await node.services.ping.ping(peer, { signal: deadline })
        return 'ack'
      } catch (err) {
        if (isConnectionRefused(err)) return 'refused'
        if (deadline.aborted || node.getConnections(peer).length > 0) return 'timeout'
      }
    }
    return 'timeout'
  }

  async function pingReq (helper: string, target: string, timeoutMs: number, signal: AbortSignal): Promise<ProbeOutcome> {
    // The helper needs the full probe timeout plus the round trips to us.
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(timeoutMs * 2)])
    try {
      const reply = await requestJson(node, helper, protocol, { target, timeoutMs }, deadline) as { outcome?: unknown } | null
      return typeof reply?.outcome === 'string' && outcomes.has(reply.outcome) ? reply.outcome as ProbeOutcome : 'timeout'
    } catch {
      return 'timeout'
    }
  }

  return {
    ping,
    pingReq,
    async register () {
      await handleJson(node, { ...protocol, handlerTimeoutMs: maxHelperTimeoutMs * 2 }, async (_from, message) => {
        const request = message as { target?: unknown, timeoutMs?: unknown } | null
        if (typeof request?.target !== 'string' || typeof request.timeoutMs !== 'number') throw new Error('bad ping-req')
        const timeoutMs = Math.min(Math.max(1, request.timeoutMs), maxHelperTimeoutMs)
        return { outcome: await ping(request.target, timeoutMs, AbortSignal.timeout(maxHelperTimeoutMs * 2)) }
      })
    },
    async unregister () {
      await node.unhandle(pingReqProtocol).catch(() => {})
    },
  }
}

/** ECONNREFUSED anywhere in the error, its causes or its aggregated errors. */
export function isConnectionRefused (err: unknown, depth = 0): boolean {
  if (err === null || typeof err !== 'object' || depth > 5) return false
  const e = err as { code?: unknown, cause?: unknown, errors?: unknown }
  if (e.code === 'ECONNREFUSED') return true
  if (Array.isArray(e.errors) && e.errors.some(x => isConnectionRefused(x, depth + 1))) return true
  return isConnectionRefused(e.cause, depth + 1)
}
