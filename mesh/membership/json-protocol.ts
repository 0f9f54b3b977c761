/**
 * One JSON request, one JSON response, over a libp2p stream: the requester
 * opens a stream on `protocol`, writes one length-prefixed JSON message and
 * reads one length-prefixed JSON answer. The remote peer of the connection is
 * the sender, authenticated by noise inside the cluster's private network, so
 * messages carry no signature of their own. Shapes are the caller's to check:
 * both sides receive `unknown`.
 *
 * A handler answers requests on a stream until the requester closes it (or
 * leaves it idle for keptStreamIdleMs). A protocol with `keepAlive` keeps the
 * requester's stream open after an answer and sends the next request to that
 * peer on it, as HTTP keep-alive does: a stream opened, negotiated and closed
 * at both ends per request was most of a voter's CPU at ten election
 * heartbeats a second. An agent of an older version closes its end after
 * one answer; the requester then sends again on a fresh stream.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { lpStream, type LengthPrefixedStream } from '@libp2p/utils'
import type { Stream } from '@libp2p/interface'
import type { MeshLibp2p } from './libp2p-node.ts'

export interface JsonProtocol {
  protocol: string
  /** Largest message accepted in either direction, bytes. */
  maxMessageBytes: number
  /**
   * Keep the requester's stream for the next request to the same peer. Only
   * for requests that may arrive twice: one sent on a kept stream that closed
   * under it before any answer is sent again on a fresh stream.
   */
  keepAlive?: boolean
}

/** How long a requester keeps an idle stream for the next request, ms. */
const keptIdleMs = 5_000
/** Idle streams kept per peer and protocol (more only while requests overlap). */
const maxKeptPerPeer = 2
/** How long a handler waits for the next request on a stream, ms (above keptIdleMs: the requester closes first). */
const keptStreamIdleMs = 30_000

interface KeptStream { stream: Stream, lp: LengthPrefixedStream<Stream>, timer?: NodeJS.Timeout }
/** Per node: idle streams by "peer protocol". */
const keptStreams = new WeakMap<MeshLibp2p, Map<string, KeptStream[]>>()

/** Whether a stream kept for reuse can still carry a request and its answer both ways. */
export const usable = (stream: Stream): boolean => stream.status === 'open' && stream.readStatus === 'readable' && stream.writeStatus === 'writable'

function takeKept (node: MeshLibp2p, key: string): KeptStream | undefined {
  const list = keptStreams.get(node)?.get(key)
  for (let kept = list?.pop(); kept !== undefined; kept = list?.pop()) {
    clearTimeout(kept.timer)
    if (usable(kept.stream)) return kept
    kept.stream.abort(new Error('kept stream no longer usable'))
  }
  return undefined
}

function keep (node: MeshLibp2p, key: string, kept: KeptStream): void {
  let byKey = keptStreams.get(node)
  if (byKey === undefined) { byKey = new Map(); keptStreams.set(node, byKey) }
  const list = byKey.get(key) ?? []
  if (!usable(kept.stream) || list.length >= maxKeptPerPeer) { void kept.stream.close().catch(() => {}); return }
  kept.timer = setTimeout(() => {
    const at = list.indexOf(kept)
    if (at >= 0) list.splice(at, 1)
    if (list.length === 0 && byKey.get(key) === list) byKey.delete(key)
    void kept.stream.close().catch(() => {})
  }, keptIdleMs)
  kept.timer.unref()
  list.push(kept)
  byKey.set(key, list)
}

/**
 * Sends `message` to `peer` and returns its parsed answer; rejects on any
 * transport or parse failure, and as soon as `signal` aborts: a dial to a
 * host whose packets are dropped (a partition) can outlive the signal inside
 * the transport until TCP gives up, minutes later, and no caller's round
 * (an election, a probe, a sync) may wait for that.
 */
export function requestJson (node: MeshLibp2p, peer: string, p: JsonProtocol, message: unknown, signal: AbortSignal): Promise<unknown> {
  const work = exchange(node, peer, p, message, signal)
  if (signal.aborted) { work.catch(() => {}); return Promise.reject(signal.reason) }
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

async function exchange (node: MeshLibp2p, peer: string, p: JsonProtocol, message: unknown, signal: AbortSignal): Promise<unknown> {
  const key = `${peer} ${p.protocol}`
  const kept = p.keepAlive === true ? takeKept(node, key) : undefined
  if (kept !== undefined) {
    let bytes: Uint8Array | undefined
    try {
      bytes = await send(kept, message, signal)
    } catch (err) {
      kept.stream.abort(err as Error)
      // Closed under the request (the peer's idle close, an older agent's one answer): again, on a fresh stream.
      if (signal.aborted) throw err
    }
    if (bytes !== undefined) {
      keep(node, key, kept)
      return decode(bytes)
    }
  }
  let stream: Stream | undefined
  try {
    stream = await node.dialProtocol(peerIdFromString(peer), p.protocol, { signal })
    const fresh: KeptStream = { stream, lp: lpStream(stream, { maxDataLength: p.maxMessageBytes }) }
    const reply = decode(await send(fresh, message, signal))
    if (p.keepAlive === true) keep(node, key, fresh)
    else await stream.close({ signal }).catch(() => {})
    return reply
  } catch (err) {
    stream?.abort(err as Error)
    throw err
  }
}

async function send (over: KeptStream, message: unknown, signal: AbortSignal): Promise<Uint8Array> {
  await over.lp.write(encode(message), { signal })
  return (await over.lp.read({ signal })).subarray()
}

/**
 * Answers every request on `protocol` with `handler`'s result, on each stream
 * until the requester closes it or leaves it idle for keptStreamIdleMs. A
 * first request that does not arrive within handlerTimeoutMs, any request
 * that does not parse, whose handler throws or whose answer cannot be written
 * within handlerTimeoutMs aborts its stream: the requester sees a failed request.
 * maxStreamsPerConnection: streams of the protocol one connection may hold at
 * once, each way (default libp2p's: 32 inbound, 64 outbound); beyond it a new
 * stream is reset.
 */
export async function handleJson (node: MeshLibp2p, p: JsonProtocol & { handlerTimeoutMs: number, maxStreamsPerConnection?: number }, handler: (from: string, message: unknown) => Promise<unknown>): Promise<void> {
  await node.handle(p.protocol, async (stream, connection) => {
    const from = connection.remotePeer.toString()
    const lp = lpStream(stream, { maxDataLength: p.maxMessageBytes })
    try {
      for (let n = 0; ; n++) {
        let request: Uint8Array
        try {
          request = (await lp.read({ signal: AbortSignal.timeout(n === 0 ? p.handlerTimeoutMs : keptStreamIdleMs) })).subarray()
        } catch (err) {
          // After an answer, the requester closing its end (or going idle) ends the stream.
          if (n > 0) { await stream.close({ signal: AbortSignal.timeout(p.handlerTimeoutMs) }).catch(() => {}); return }
          throw err
        }
        const response = await handler(from, decode(request))
        await lp.write(encode(response), { signal: AbortSignal.timeout(p.handlerTimeoutMs) })
      }
    } catch (err) {
      stream.abort(err as Error)
    }
  }, {
    runOnLimitedConnection: false,
    // libp2p's registrar applies these to streams of the protocol both ways (it also caps outbound ones by this registration).
    ...(p.maxStreamsPerConnection !== undefined ? { maxInboundStreams: p.maxStreamsPerConnection, maxOutboundStreams: p.maxStreamsPerConnection } : {}),
  })
}

const encode = (message: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(message))
const decode = (bytes: Uint8Array): unknown => JSON.parse(new TextDecoder().decode(bytes))
