/**
 * The TCP weight server (PROTOCOL.md). Per connection: HELLO with a fresh
 * nonce, the client's HMAC proof checked within `authTimeoutMs`, then
 * requests answered in order. Bounded memory: a connection handles one request
 * at a time and reads the next only when the previous reply's bytes were
 * accepted by the socket ('drain'), so a slow puller holds at most one reply.
 * Whole-tensor replies are Buffers over the key's host memory (pool, or an
 * adopted shm region; no copy); sliced replies are gathered by native threads
 * (strided gathers, one call per run pattern) into a pool scratch range.
 * Nothing is copied on the event loop. Bytes in an adopted region
 * (`sharedRegion`) may have been changed by its writer after commit: a reply
 * whose checksum the server computes (sliced or unaligned) is sent only after
 * the committed chunks it was taken from verify, else status 6 (corrupt);
 * aligned whole chunks carry the manifest checksum, which the puller checks.
 * A version held as one rank's slices (a partial holding) answers only READs
 * of exactly those slices, from their stored contiguous bytes. A malformed or unauthenticated connection is
 * answered with an error where possible and closed; other connections are
 * untouched.
 */
import { createServer, type Server, type Socket } from 'node:net'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { checksum, gatherHost, viewHostRange, type HostRange } from '../../native/index.ts'
import { dtypeBytes } from '../state/keys.ts'
import type { StateManager } from '../state/state-manager.ts'
import type { DataAuth } from './data-auth.ts'
import {
  authBytes, decodeAuth, decodeManifestRequest, decodeReadRequest, decodeRequestHeader, encodeHello, encodeReplyHeader,
  Op, requestHeaderBytes, Status, type ReadRequest, type StatusCode,
} from './protocol.ts'
import { groupRuns, sameSlice, sliceRuns } from './reshard.ts'
import type { ActivePull, WeightServer } from './transport.ts'
import type { PartialHolding, VersionStore, WeightsManifest } from './version-store.ts'

export interface TcpWeightServerOptions {
  /** host:port to listen on; port 0 picks a free one. */
  listen: string
  /** Time a client has to authenticate, ms. Default 5000. */
  authTimeoutMs?: number
  /** Most concurrent connections; further ones are closed at once. Default 256. */
  maxConnections?: number
}

export interface TcpWeightServerComponents {
  stateManager: StateManager
  versions: VersionStore
  auth: DataAuth
  logger: Logger
}

/** Gathers under 1 MiB run on one native thread (splitting them costs more than it buys). */
const smallGatherBytes = 2 ** 20

export function splitHostPort (address: string): { host: string, port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(address)
  const port = Number(m?.[3])
  if (m === null || port > 65535) throw new AgentError('ERR_BAD_REQUEST', `address ${JSON.stringify(address)} is not host:port`)
  return { host: m[1] ?? m[2]!, port }
}

function statusOf (err: unknown): StatusCode {
  const code = (err as AgentError).code
  if (code === 'ERR_WEIGHTS_RETIRED') return Status.retired
  if (code === 'ERR_DATA_CORRUPT') return Status.corrupt
  if (code === 'ERR_WEIGHTS_NOT_FOUND' || code === 'ERR_KEY_NOT_FOUND') return Status.notFound
  if (code === 'ERR_LAYOUT_INVALID' || code === 'ERR_WEIGHTS_PROTOCOL' || code === 'ERR_BAD_REQUEST') return Status.badRequest
  return Status.internal
}

/**
 * Checks the committed chunks covering bytes [from, to) of a tensor against
 * the manifest (native threads); ERR_DATA_CORRUPT names the first that
 * changed. Costs a checksum of the covered chunks: only for adopted-region
 * keys, whose writer may still hold a mapping.
 */
async function verifyCommitted (manifest: WeightsManifest, tensor: WeightsManifest['tensors'][number], range: HostRange, from: number, to: number): Promise<void> {
  const chunkBytes = manifest.chunkBytes
  const first = Math.floor(from / chunkBytes)
  const end = Math.ceil(to / chunkBytes)
  const sums = await Promise.all(Array.from({ length: end - first }, (_, i) => {
    const at = (first + i) * chunkBytes
    return checksum({ memory: range.memory, offset: range.offset + at, length: Math.min(chunkBytes, tensor.bytes - at) })
  }))
  const bad = sums.findIndex((sum, i) => sum !== tensor.chunkChecksums[first + i])
  if (bad >= 0) {
    throw new AgentError('ERR_DATA_CORRUPT', `${manifest.model} v${manifest.version} ${tensor.name}: chunk ${first + bad} changed after commit (crc32c ${sums[bad]!.toString(16)}, committed ${tensor.chunkChecksums[first + bad]!.toString(16)}); its region's writer must not write after publishing`)
  }
}

/**
 * The manifest chunk a READ's window is, when it is exactly one (its recorded
 * checksum is sent as is); undefined when the checksum must be computed.
 */
function alignedChunk (req: ReadRequest, chunkBytes: number, totalBytes: number): number | undefined {
  const chunk = req.byteOffset / chunkBytes
  return Number.isInteger(chunk) && req.byteLength === Math.min(chunkBytes, totalBytes - req.byteOffset) ? chunk : undefined
}

export function createTcpWeightServer (options: TcpWeightServerOptions, components: TcpWeightServerComponents): WeightServer {
  const { stateManager: sm, versions, auth, logger } = components
  const authTimeoutMs = options.authTimeoutMs ?? 5000
  const maxConnections = options.maxConnections ?? 256
  const sockets = new Set<Socket>()
  const pulls = new Map<Socket, ActivePull>()
  let server: Server | undefined
  let address = ''

  function handle (socket: Socket): void {
    if (sockets.size >= maxConnections) { socket.destroy(); return }
    sockets.add(socket)
    socket.setNoDelay(true)
    const remote = `${socket.remoteAddress}:${socket.remotePort}`
    const serverNonce = auth.newNonce()
    let authed = false
    let busy = false
    let input: Buffer = Buffer.alloc(0)
    const authTimer = setTimeout(() => refuse('authentication timed out'), authTimeoutMs)
    socket.on('close', () => { clearTimeout(authTimer); sockets.delete(socket); pulls.delete(socket) })
    socket.on('error', err => logger.debug({ remote, err: err.message }, 'weights connection error'))
    socket.write(encodeHello(serverNonce))

    function refuse (why: string): void {
      logger.warn({ remote, why }, 'weights connection refused')
      socket.destroy()
    }

    socket.on('data', (chunk: Buffer) => {
      input = input.length === 0 ? chunk : Buffer.concat([input, chunk])
      if (input.length > 64 * 1024) { refuse('too much unread input'); return }
      pump()
    })

    /** Takes complete frames off `input`; one request at a time once authenticated. */
    function pump (): void {
      if (!authed) {
        if (input.length < authBytes) return
        let frame
        try { frame = decodeAuth(input.subarray(0, authBytes)) } catch (err) { refuse((err as Error).message); return }
        input = input.subarray(authBytes)
        if (!auth.equal(frame.proof, auth.clientProof(serverNonce, frame.clientNonce))) {
          socket.end(Buffer.concat([encodeReplyHeader(Status.unauthorized, 0, 0, 0)]))
          logger.warn({ remote }, 'weights connection refused: wrong cluster key')
          return
        }
        clearTimeout(authTimer)
        authed = true
        const proof = auth.serverProof(serverNonce, frame.clientNonce)
        socket.write(Buffer.concat([encodeReplyHeader(Status.ok, 0, proof.length, 0), proof]))
      }
      while (!busy && input.length >= requestHeaderBytes) {
        let header
        try { header = decodeRequestHeader(input.subarray(0, requestHeaderBytes)) } catch (err) { refuse((err as Error).message); return }
        if (input.length < requestHeaderBytes + header.bodyLength) return
        const body = Buffer.from(input.subarray(requestHeaderBytes, requestHeaderBytes + header.bodyLength))
        input = input.subarray(requestHeaderBytes + header.bodyLength)
        busy = true
        void serve(header.op, header.requestId, body).then(() => { busy = false; if (!socket.destroyed) pump() })
      }
    }

    async function serve (op: number, requestId: number, body: Buffer): Promise<void> {
      try {
        if (op === Op.manifest) {
          const req = decodeManifestRequest(body)
          const json = Buffer.from(JSON.stringify(versions.get(req.model, req.version)))
          await send(Status.ok, requestId, json, 0)
          return
        }
        const req = decodeReadRequest(body)
        const manifest = versions.get(req.model, req.version)
        const pull = pulls.get(socket) ?? { remote, model: req.model, version: req.version, bytesSent: 0, connectedAtMs: Date.now() }
        Object.assign(pull, { model: req.model, version: req.version })
        pulls.set(socket, pull)
        await (manifest.partial !== undefined ? servePartialRead(manifest, manifest.partial, req, requestId) : serveRead(manifest, req, requestId))
        pull.bytesSent += req.byteLength
      } catch (err) {
        const status = statusOf(err)
        if (status === Status.internal || status === Status.corrupt) logger.error({ remote, err }, 'weights request failed')
        // A request the protocol cannot parse leaves the stream out of step: answer, then close.
        const fatal = (err as AgentError).code === 'ERR_WEIGHTS_PROTOCOL'
        if (!socket.destroyed) await send(status, requestId, Buffer.from((err as Error).message), 0).catch(() => {})
        if (fatal) socket.end()
      }
    }

    async function serveRead (manifest: WeightsManifest, req: ReadRequest, requestId: number): Promise<void> {
      const tensor = manifest.tensors[req.tensorIndex]
      if (tensor === undefined) throw new AgentError('ERR_BAD_REQUEST', `tensor ${req.tensorIndex} does not exist (the version has ${manifest.tensors.length})`)
      const runs = sliceRuns({ name: tensor.name, shape: tensor.shape, elementBytes: dtypeBytes[tensor.dtype] }, req.dim, req.ranges, req.byteOffset, req.byteLength)
      const pinned = await sm.readHost(tensor.key)
      try {
        const sub = (offset: number, length: number): HostRange => ({ memory: pinned.range.memory, offset: pinned.range.offset + offset, length })
        if (runs.length === 1 && req.dim === null) {
          const range = sub(runs[0]!.offset, runs[0]!.length)
          const chunk = alignedChunk(req, manifest.chunkBytes, tensor.bytes)
          const crc = chunk !== undefined ? tensor.chunkChecksums[chunk]! : await checksum(range)
          if (chunk === undefined && pinned.sharedRegion !== undefined) await verifyCommitted(manifest, tensor, pinned.range, runs[0]!.offset, runs[0]!.offset + runs[0]!.length)
          await send(Status.ok, requestId, viewHostRange(range), crc)
          return
        }
        const scratch = await sm.scratch(req.byteLength)
        try {
          let at = 0
          await Promise.all(groupRuns(runs).map(g => {
            const bytes = g.runBytes * g.runs
            const dst = { memory: scratch.range.memory, offset: scratch.range.offset + at, length: bytes }
            at += bytes
            return gatherHost(dst, sub(g.offset, g.stride * (g.runs - 1) + g.runBytes), { runBytes: g.runBytes, runs: g.runs, srcStride: g.stride }, bytes < smallGatherBytes ? { threads: 1 } : {})
          }))
          // After the gather: the scratch is private now, and a change made before or during it shows.
          if (pinned.sharedRegion !== undefined) {
            let from = Infinity; let to = 0
            for (const r of runs) { from = Math.min(from, r.offset); to = Math.max(to, r.offset + r.length) }
            await verifyCommitted(manifest, tensor, pinned.range, from, to)
          }
          await send(Status.ok, requestId, scratch.view, await checksum(scratch.range))
        } finally {
          scratch.release()
        }
      } finally {
        pinned.release()
      }
    }

    /**
     * A READ of a version this agent holds only one rank's slices of: served
     * only when it names one of those slices exactly (tensor, dim, ranges),
     * from the slice's stored contiguous bytes (no gather: the bytes a full
     * holder would gather). Windows on the manifest's chunks carry the
     * checksum recorded when the slice was pulled; others are computed.
     */
    async function servePartialRead (manifest: WeightsManifest, holding: PartialHolding, req: ReadRequest, requestId: number): Promise<void> {
      const held = holding.slices.find(h => h.index === req.tensorIndex)
      if (held === undefined || !sameSlice(held, req)) {
        const name = manifest.tensors[req.tensorIndex]?.name ?? `#${req.tensorIndex}`
        throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `this agent holds only the tp ${holding.tp} rank ${holding.rank} slices (layout ${holding.layout}) of ${manifest.model} v${manifest.version}, not the slice of ${name} asked for; pull it from a full holder`)
      }
      if (req.byteOffset + req.byteLength > held.bytes) throw new AgentError('ERR_BAD_REQUEST', `bytes ${req.byteOffset}..${req.byteOffset + req.byteLength} past the ${held.bytes} bytes of the slice`)
      const pinned = await sm.readHost(held.key)
      try {
        const range: HostRange = { memory: pinned.range.memory, offset: pinned.range.offset + req.byteOffset, length: req.byteLength }
        const chunk = alignedChunk(req, manifest.chunkBytes, held.bytes)
        await send(Status.ok, requestId, viewHostRange(range), chunk !== undefined ? held.chunkChecksums[chunk]! : await checksum(range))
      } finally {
        pinned.release()
      }
    }

    /** Writes a reply; resolves when the socket accepted it (drain), so the payload's memory may be released. */
    function send (status: number, requestId: number, payload: Buffer, crc: number): Promise<void> {
      return new Promise((resolve, reject) => {
        if (socket.destroyed) { reject(new AgentError('ERR_WEIGHTS_TRANSFER', 'connection closed')); return }
        const onClose = (): void => reject(new AgentError('ERR_WEIGHTS_TRANSFER', 'connection closed'))
        socket.once('close', onClose)
        socket.cork()
        socket.write(encodeReplyHeader(status, requestId, payload.length, crc))
        // The callback runs once the payload is handed to the kernel: only then may its pool memory be reused.
        socket.write(payload, err => {
          socket.off('close', onClose)
          if (err != null) reject(err)
          else resolve()
        })
        socket.uncork()
      })
    }
  }

  return {
    get address () { return address },
    async start () {
      const { host, port } = splitHostPort(options.listen)
      const s = createServer({ noDelay: true }, handle)
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject)
        s.listen({ host, port }, () => { s.off('error', reject); resolve() })
      })
      s.on('error', err => logger.error({ err }, 'weights server error'))
      server = s
      const bound = s.address() as { address: string, port: number }
      address = bound.address.includes(':') ? `[${bound.address}]:${bound.port}` : `${bound.address}:${bound.port}`
      logger.info({ address }, 'weights data server listening')
    },
    async stop () {
      if (server === undefined) return
      const s = server
      server = undefined
      for (const socket of sockets) socket.destroy()
      await new Promise<void>(resolve => s.close(() => resolve()))
    },
    activePulls: () => [...pulls.values()].map(p => ({ ...p })),
  }
}
