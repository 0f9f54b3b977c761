/**
 * The failure detector's probes over libp2p: a direct probe is a libp2p ping
 * (`/ipfs/ping/1.0.0`: 32 random bytes, echoed), and `/agentd/ping-req/1.0.0`
 * asks another agent to ping a target for us (SWIM's indirect probe). Both
 * say 'refused' when the target's port refused the TCP connection — the
 * evidence that the process is gone.
 *
 * Direct probes of a member reuse one ping stream (probeStreams below): the
 * ping handler echoes every 32 bytes until the stream closes, so a probe is
 * two small frames, not a stream opened, negotiated and closed at both ends
 * each time (a third of an idle agent's CPU went there). A probe on a reused
 * stream that fails before its deadline is retried once on a fresh one: the
 * stream may have been closed under it (the remote's handler timeout, a
 * reaped connection), which says nothing about the member.
 *
 * ping-req wire (json-protocol.ts): the requester sends { target, timeoutMs }
 * and reads back { outcome }; the helper caps the timeout at maxHelperTimeoutMs.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import type { PeerId, Stream } from '@libp2p/interface'
import { PING_PROTOCOL } from '@libp2p/ping'
import type { MeshLibp2p } from './libp2p-node.ts'
import { handleJson, requestJson, usable } from './json-protocol.ts'
import type { ProbeOutcome, Prober } from './failure-detector.ts'

export const pingReqProtocol = '/agentd/ping-req/1.0.0'
export const pingProtocol = PING_PROTOCOL
const pingBytes = 32
const maxHelperTimeoutMs = 10_000
const outcomes: ReadonlySet<string> = new Set(['ack', 'timeout', 'refused'])

export interface Libp2pProber extends Prober {
  /** Registers the ping-req handler (before the node starts). */
  register(): Promise<void>
  /** Stops answering ping-req and closes the probe streams (idempotent). */
  unregister(): Promise<void>
}

/**
 * One open ping stream per probed member, reused probe after probe. A probe
 * that fails aborts its stream (a late echo must not answer the next probe),
 * and a stream that closes leaves the table.
 */
function probeStreams (node: MeshLibp2p): {
  /** The member's open probe stream (`reused`), or a fresh one. */
  streamTo(peer: PeerId, signal: AbortSignal): Promise<{ stream: Stream, reused: boolean }>
  /** One probe on `stream`: resolves on the echo of 32 random bytes. */
  echo(peer: PeerId, stream: Stream, signal: AbortSignal): Promise<void>
  closeAll(): void
} {
  const open = new Map<string, Stream>()

  async function streamTo (peer: PeerId, signal: AbortSignal): Promise<{ stream: Stream, reused: boolean }> {
    const id = peer.toString()
    const existing = open.get(id)
    if (existing !== undefined && usable(existing)) return { stream: existing, reused: true }
    if (existing !== undefined) { open.delete(id); existing.abort(new Error('probe stream replaced')) }
    const stream = await node.dialProtocol(peer, pingProtocol, { signal, runOnLimitedConnection: false })
    open.set(id, stream)
    stream.addEventListener('close', () => { if (open.get(id) === stream) open.delete(id) }, { once: true })
    return { stream, reused: false }
  }

  return {
    streamTo,
    async echo (peer, stream, signal) {
      const sent = crypto.getRandomValues(new Uint8Array(pingBytes))
      try {
        await new Promise<void>((resolve, reject) => {
          const chunks: Uint8Array[] = []
          let received = 0
          const done = (err?: Error): void => {
            stream.removeEventListener('message', onMessage)
            stream.removeEventListener('close', onClose)
            signal.removeEventListener('abort', onAbort)
            if (err === undefined) resolve(); else reject(err)
          }
          const onMessage = (evt: { data: Uint8Array | { subarray(): Uint8Array } }): void => {
            const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
            chunks.push(data)
            received += data.byteLength
            if (received < pingBytes) return
            const echo = Buffer.concat(chunks)
            done(received === pingBytes && echo.equals(sent) ? undefined : new Error(`wrong ping echo (${received} bytes)`))
          }
          const onClose = (): void => { done(new Error('probe stream closed')) }
          const onAbort = (): void => { done(signal.reason as Error) }
          stream.addEventListener('message', onMessage)
          stream.addEventListener('close', onClose)
          signal.addEventListener('abort', onAbort, { once: true })
          try { stream.send(sent) } catch (err) { done(err as Error) }
        })
      } catch (err) {
        if (open.get(peer.toString()) === stream) open.delete(peer.toString())
        stream.abort(err as Error)
        throw err
      }
    },
    closeAll () {
      for (const stream of open.values()) void stream.close().catch(() => {})
      open.clear()
    },
  }
}

export function createLibp2pProber (node: MeshLibp2p): Libp2pProber {
  const protocol = { protocol: pingReqProtocol, maxMessageBytes: 1024 }
  const streams = probeStreams(node)
  async function ping (target: string, timeoutMs: number, signal: AbortSignal): Promise<ProbeOutcome> {
    const peer = peerIdFromString(target)
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
    // A reused stream can have closed under the probe, and a connection that just closed can fail
    // the first ping before any dial: then once more, on a fresh stream (dialing if need be).
    for (let attempt = 0; attempt < 2; attempt++) {
      let reused = false
      try {
        const probe = await streams.streamTo(peer, deadline)
        reused = probe.reused
        await streams.echo(peer, probe.stream, deadline)
        return 'ack'
      } catch (err) {
        if (isConnectionRefused(err)) return 'refused'
        if (deadline.aborted) return 'timeout'
        if (!reused && node.getConnections(peer).length > 0) return 'timeout'
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
      streams.closeAll()
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
