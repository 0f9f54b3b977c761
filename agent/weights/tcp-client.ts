/**
 * The puller's side of a TCP weight connection (PROTOCOL.md). After the
 * handshake, requests are pipelined and replies arrive in request order.
 * Payload bytes are read by the socket straight into the caller's buffer
 * (net.Socket `onread` with a buffer generator: the kernel writes into pool
 * memory, no intermediate copy); only the 24-byte headers go through a small
 * staging buffer.
 *
 * A connection the server closes after it was established but before the
 * handshake completed is opened again, with jittered exponential backoff
 * (25 ms doubling to 500 ms), until `connectTimeoutMs` from the first try:
 * under load the server evicts connections still in their handshake and
 * closes those beyond its cap on authenticated ones (tcp-server.ts). A
 * refused connect, a wrong cluster key or a malformed HELLO fails at once.
 */
import { connect, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { AgentError } from '../../core/errors.ts'
import type { DataAuth } from './data-auth.ts'
import {
  decodeHave, decodeHello, decodeReplyHeader, decodeUcxAddressReply, decodeUcxOpenReply, encodeAuth, encodeHaveRequest, encodeManifestRequest, encodeReadRequest, encodeRequestHeader, helloBytes,
  Op, proofBytes, protocolError, replyHeaderBytes, Status, statusName, type ReadRequest,
} from './protocol.ts'
import { splitHostPort } from './tcp-server.ts'
import type { WeightStream, WeightStreamConnector } from './transport.ts'
import type { WeightsManifest } from './version-store.ts'

export interface TcpConnectorOptions {
  /** Connect + handshake timeout, ms, retries of connections closed during the handshake included. Default 5000. */
  connectTimeoutMs?: number
  /** A connection with requests outstanding and no bytes for this long is closed, ms. Default 15000. */
  idleTimeoutMs?: number
}

interface Pending {
  requestId: number
  /** Where the payload goes; null: collect it (manifest, error text). */
  into: Buffer | null
  resolve(result: { crc32c: number, payload: Buffer | null }): void
  reject(err: Error): void
}

const maxControlPayload = 256 * 2 ** 20

/** The server closed an established connection before the handshake completed: worth another try. */
class HandshakeCut extends AgentError {}

export function createTcpConnector (auth: DataAuth, options: TcpConnectorOptions = {}): WeightStreamConnector {
  const connectTimeoutMs = options.connectTimeoutMs ?? 5000
  const idleTimeoutMs = options.idleTimeoutMs ?? 15_000
  return {
    async open (address, { signal } = {}) {
      const deadline = performance.now() + connectTimeoutMs
      for (let backoffMs = 25; ; backoffMs = Math.min(500, backoffMs * 2)) {
        try {
          return await openOnce(address, deadline, signal)
        } catch (err) {
          const waitMs = backoffMs * (0.5 + Math.random())
          if (!(err instanceof HandshakeCut) || performance.now() + waitMs >= deadline) throw err
          await sleep(waitMs, undefined, signal !== undefined ? { signal } : {}).catch(() => {})
          signal?.throwIfAborted()
        }
      }
    },
  }

  async function openOnce (address: string, deadline: number, signal: AbortSignal | undefined): Promise<WeightStream> {
    const { host, port } = splitHostPort(address)
    const header = Buffer.alloc(Math.max(replyHeaderBytes, helloBytes))
    const spare = Buffer.alloc(64 * 1024)
    // Receive state: a header, then a payload (into the request's buffer or a collected control buffer).
    let headerFill = 0
    let headerWant = helloBytes
    let payload: Buffer | null = null
    let payloadFill = 0
    let current: { pending: Pending, status: number, crc32c: number } | undefined
    const queue: Pending[] = []
    let nextId = 1
    let closedError: Error | undefined
    let handshake: PromiseWithResolvers<void> | undefined = Promise.withResolvers<void>()
    let phase: 'hello' | 'auth' | 'open' = 'hello'
    const clientNonce = auth.newNonce()
    let serverNonce: Buffer | undefined

    const fail = (err: Error): void => {
      if (closedError !== undefined) return
      closedError = err
      socket.destroy()
      handshake?.reject(err)
      current?.pending.reject(err)
      current = undefined
      for (const p of queue.splice(0)) p.reject(err)
    }

    const nextBuffer = (): Buffer => {
      if (payload !== null) return payload.subarray(payloadFill)
      if (headerFill < headerWant) return header.subarray(headerFill, headerWant)
      return spare
    }

    const onHeader = (): void => {
      if (phase === 'hello') {
        serverNonce = decodeHello(header.subarray(0, helloBytes)).nonce
        phase = 'auth'
        headerWant = replyHeaderBytes
        socket.write(encodeAuth(clientNonce, auth.clientProof(serverNonce, clientNonce)))
        return
      }
      const h = decodeReplyHeader(header.subarray(0, replyHeaderBytes))
      if (phase === 'auth') {
        if (h.status !== Status.ok) throw new AgentError('ERR_WEIGHTS_AUTH', `the weight server at ${address} refused this agent's cluster key`)
        if (h.payloadLength !== proofBytes) throw protocolError('bad AUTH reply')
        current = { pending: { requestId: 0, into: null, resolve: () => {}, reject: () => {} }, status: h.status, crc32c: 0 }
        payload = Buffer.alloc(proofBytes)
        return
      }
      const pending = queue.shift()
      if (pending === undefined || pending.requestId !== h.requestId) throw protocolError(`reply to request ${h.requestId} out of order`)
      current = { pending, status: h.status, crc32c: h.crc32c }
      if (h.status === Status.ok && pending.into !== null) {
        if (h.payloadLength !== pending.into.length) throw protocolError(`reply of ${h.payloadLength} bytes to a read of ${pending.into.length}`)
        payload = pending.into
      } else {
        if (h.payloadLength > maxControlPayload) throw protocolError(`control reply of ${h.payloadLength} bytes`)
        payload = Buffer.alloc(h.payloadLength)
      }
      if (payload.length === 0) onPayload()
    }

    const onPayload = (): void => {
      const done = current!
      const bytes = payload!
      payload = null
      payloadFill = 0
      current = undefined
      if (phase === 'auth') {
        if (!auth.equal(bytes, auth.serverProof(serverNonce!, clientNonce))) throw new AgentError('ERR_WEIGHTS_AUTH', `the weight server at ${address} did not prove the cluster key`)
        phase = 'open'
        handshake!.resolve()
        handshake = undefined
        return
      }
      if (done.status === Status.ok) { done.pending.resolve({ crc32c: done.crc32c, payload: done.pending.into === null ? bytes : null }); return }
      const text = bytes.toString('utf8')
      const code = done.status === Status.retired ? 'ERR_WEIGHTS_RETIRED' : done.status === Status.notFound ? 'ERR_WEIGHTS_NOT_FOUND' : done.status === Status.corrupt ? 'ERR_DATA_CORRUPT'
        : done.status === Status.notHeld ? 'ERR_WEIGHTS_NOT_HELD' : 'ERR_WEIGHTS_PROTOCOL'
      done.pending.reject(new AgentError(code, `${address}: ${statusName(done.status)}: ${text}`))
    }

    const socket: Socket = connect({
      host,
      port,
      noDelay: true,
      onread: {
        buffer: nextBuffer,
        callback: (n: number): boolean => {
          try {
            if (payload !== null) {
              payloadFill += n
              if (payloadFill === payload.length) onPayload()
              return true
            }
            if (headerFill >= headerWant) throw protocolError('unexpected bytes from the weight server')
            headerFill += n
            if (headerFill === headerWant) { headerFill = 0; onHeader() }
          } catch (err) {
            fail(err as Error)
            return false
          }
          return true
        },
      },
    })
    let connected = false
    socket.once('connect', () => { connected = true })
    /** Closed (or reset) by the server after connecting and before the handshake completed: HandshakeCut, retried by open(). */
    const cut = (message: string, cause?: Error): AgentError => connected && phase !== 'open'
      ? new HandshakeCut('ERR_WEIGHTS_TRANSFER', `${message} during the handshake (the server is busy or at its connection cap)`, { cause })
      : new AgentError('ERR_WEIGHTS_TRANSFER', message, { cause })
    socket.on('error', err => fail(cut(`connection to ${address}: ${err.message}`, err)))
    socket.on('close', () => fail(cut(`connection to ${address} closed`)))
    socket.setTimeout(idleTimeoutMs, () => { if (queue.length > 0 || current !== undefined || phase !== 'open') fail(new AgentError('ERR_WEIGHTS_TRANSFER', `${address} sent nothing for ${idleTimeoutMs} ms`)) })
    const timer = setTimeout(() => fail(new AgentError('ERR_WEIGHTS_TRANSFER', `no handshake with ${address} within ${connectTimeoutMs} ms`)), Math.max(0, deadline - performance.now()))
    const onAbort = (): void => fail(signal!.reason as Error)
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      await handshake.promise
    } finally {
      clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
    }

    const request = (op: number, body: Buffer, into: Buffer | null): Promise<{ crc32c: number, payload: Buffer | null }> => {
      if (closedError !== undefined) return Promise.reject(closedError)
      const requestId = nextId++ >>> 0
      const done = Promise.withResolvers<{ crc32c: number, payload: Buffer | null }>()
      queue.push({ requestId, into, resolve: done.resolve, reject: done.reject })
      socket.cork()
      socket.write(encodeRequestHeader(op, requestId, body.length))
      socket.write(body)
      socket.uncork()
      return done.promise
    }

    const stream: WeightStream = {
      get closed () { return closedError !== undefined },
      async manifest (model, version, o = {}) {
        o.signal?.throwIfAborted()
        const reply = await request(Op.manifest, encodeManifestRequest(model, version), null)
        return JSON.parse(reply.payload!.toString('utf8')) as WeightsManifest
      },
      async have (model, version, layout) {
        const reply = await request(Op.have, encodeHaveRequest(model, version, layout), null)
        return decodeHave(reply.payload!)
      },
      async read (req: ReadRequest, into: Buffer) {
        if (into.length !== req.byteLength) throw new AgentError('ERR_ARG_INVALID', `read of ${req.byteLength} bytes into a buffer of ${into.length}`)
        const reply = await request(Op.read, encodeReadRequest(req), into)
        return { crc32c: reply.crc32c }
      },
      async checksum (req: ReadRequest) {
        const reply = await request(Op.checksum, encodeReadRequest(req), null)
        if (reply.payload!.length !== 0) throw protocolError(`CHECKSUM answered with ${reply.payload!.length} bytes`)
        return reply.crc32c
      },
      async ucxAddress () {
        return decodeUcxAddressReply((await request(Op.ucxAddress, Buffer.alloc(0), null)).payload!)
      },
      async ucxOpen (model, version) {
        const reply = await request(Op.ucxOpen, encodeManifestRequest(model, version), null)
        return decodeUcxOpenReply(reply.payload!)
      },
      close () { fail(new AgentError('ERR_WEIGHTS_TRANSFER', `connection to ${address} closed by this agent`)) },
    }
    return stream
  }
}
