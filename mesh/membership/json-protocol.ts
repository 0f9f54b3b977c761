/**
 * One JSON request, one JSON response, over a libp2p stream: the requester
 * opens a stream on `protocol`, writes one length-prefixed JSON message and
 * reads one length-prefixed JSON answer. The remote peer of the connection is
 * the sender, authenticated by noise inside the cluster's private network, so
 * messages carry no signature of their own. Shapes are the caller's to check:
 * both sides receive `unknown`.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { lpStream } from '@libp2p/utils'
import type { Stream } from '@libp2p/interface'
import type { MeshLibp2p } from './libp2p-node.ts'

export interface JsonProtocol {
  protocol: string
  /** Largest message accepted in either direction, bytes. */
  maxMessageBytes: number
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
  let stream: Stream | undefined
  try {
    stream = await node.dialProtocol(peerIdFromString(peer), p.protocol, { signal })
    const lp = lpStream(stream, { maxDataLength: p.maxMessageBytes })
    await lp.write(encode(message), { signal })
    const reply = decode((await lp.read({ signal })).subarray())
    await stream.close({ signal }).catch(() => {})
    return reply
  } catch (err) {
    stream?.abort(err as Error)
    throw err
  }
}

/**
 * Answers every request on `protocol` with `handler`'s result. A request that
 * does not arrive, parse or get answered within handlerTimeoutMs, or whose
 * handler throws, aborts its stream: the requester sees a failed request.
 * maxStreamsPerConnection: streams of the protocol one connection may hold at
 * once, each way (default libp2p's: 32 inbound, 64 outbound); beyond it a new
 * stream is reset.
 */
export async function handleJson (node: MeshLibp2p, p: JsonProtocol & { handlerTimeoutMs: number, maxStreamsPerConnection?: number }, handler: (from: string, message: unknown) => Promise<unknown>): Promise<void> {
  await node.handle(p.protocol, async (stream, connection) => {
    const signal = AbortSignal.timeout(p.handlerTimeoutMs)
    try {
      const lp = lpStream(stream, { maxDataLength: p.maxMessageBytes })
      const request = decode((await lp.read({ signal })).subarray())
      const response = await handler(connection.remotePeer.toString(), request)
      await lp.write(encode(response), { signal })
      await stream.close({ signal }).catch(() => {})
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
