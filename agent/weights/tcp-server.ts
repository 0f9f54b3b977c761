/**
 * The TCP weight server (PROTOCOL.md). Per connection: HELLO with a fresh
 * nonce, the client's HMAC proof checked within `authTimeoutMs`, then
 * requests answered in order. Bounded memory: a connection handles one request
 * at a time and reads the next only when the previous reply's bytes were
 * accepted by the socket ('drain'), so a slow puller holds at most one reply.
 * Whole-tensor replies are Buffers over the key's host memory (pool, or an
 * adopted shm region; no copy); sliced replies are gathered by native threads
 * (strided gathers, one call per run pattern) into a pool scratch range. A
 * tensor only on NVMe is never promoted whole: the chunks a READ covers are
 * read through the serve window (serve-read-window.ts), shared by the READs
 * of every puller that asks for them while they are there.
 * Nothing is copied on the event loop. Bytes in an adopted region
 * (`sharedRegion`) may have been changed by its writer after commit: a reply
 * whose checksum the server computes (sliced or unaligned) is sent only after
 * the committed chunks it was taken from verify, else status 6 (corrupt);
 * aligned whole chunks carry the manifest checksum, which the puller checks.
 * A version held as one rank's slices (a partial holding, or a sliced pull
 * in progress: a swarm seed) answers only READs of exactly those slices, from
 * their stored contiguous bytes. A malformed or unauthenticated connection is
 * answered with an error where possible and closed; other connections are
 * untouched.
 *
 * Connection limits (the port is reachable by anyone on the network; only the
 * handshake tells a cluster member from a stranger):
 * - Connections still in their handshake ("pending") are bounded apart from
 *   authenticated ones: at most `maxPendingPerAddress` per remote address (an
 *   IPv6 address counts as its /64) and `maxPendingConnections` in all. A new
 *   connection is always accepted; when its address is at its cap, that
 *   address's oldest pending connection is closed, else when the total is at
 *   its cap, the oldest pending connection of the address holding the most
 *   pending connections is. Refusing newcomers instead would let a peer
 *   without the key that re-opens its connections as they time out hold every
 *   pending slot for ever; with eviction a newcomer always gets a slot, and a
 *   client that answers HELLO within its round trip loses it only if, during
 *   that round trip, `maxPendingPerAddress` newer connections arrive from its
 *   own address, or its address is the busiest and `maxPendingConnections`
 *   newer ones arrive. A stranger's connections therefore never push out
 *   those of an address holding fewer pending connections than its own. A
 *   connection closed during the handshake is retried by the connector
 *   (tcp-client.ts), so an agent opening more than `maxPendingPerAddress`
 *   streams at once only waits a little.
 * - A pending connection is closed `authTimeoutMs` after it was accepted.
 *   One refused for a wrong key (status 5, then the server's FIN) stays
 *   pending, so counted and evictable, until it closes, and is destroyed
 *   then if its peer keeps its side open.
 * - `maxConnections` counts authenticated connections only; one that
 *   authenticates beyond it is closed without the server's proof (the
 *   connector retries it as above, until its own connect timeout).
 * - Authenticated: once the first byte of a request frame arrived, the whole
 *   frame (header and body) must be there within `frameTimeoutMs` of it
 *   (bytes trickling in do not extend it), else the connection is closed.
 *   Between requests a connection may stay idle (pullers keep theirs while
 *   they work through a queue); only one with no request in progress and no
 *   bytes moving either way for `idleTimeoutMs` (0: never) is closed, so
 *   forgotten connections do not hold slots of `maxConnections` for ever. A
 *   reply in progress is never cut by it.
 * Refusals before authentication are logged as counts (one line at once,
 * then at most one per `refusalLogIntervalMs`): a flood does not flood the log.
 */
import { createServer, type Server, type Socket } from 'node:net'
import { Value } from '@sinclair/typebox/value'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { checksum, gatherHost, viewHostRange, type HostRange } from '../../native/index.ts'
import { dtypeBytes } from '../state/keys.ts'
import type { StateManager } from '../state/state-manager.ts'
import type { DataAuth } from './data-auth.ts'
import {
  authBytes, decodeAuth, decodeHaveRequest, decodeManifestRequest, decodeReadRequest, decodeRequestHeader, encodeHave, encodeHello, encodeReplyHeader,
  latestVersion, Op, protocolError, requestHeaderBytes, Status, type Have, type ReadRequest, type StatusCode,
} from './protocol.ts'
import type { SwarmHoldings } from './swarm-holdings.ts'
import type { UcxOpened, UcxServe } from './ucx-serve.ts'
import { groupRuns, sameSlice, sliceRuns } from './reshard.ts'
import { createServeReadWindow, type ServeReadWindow } from './serve-read-window.ts'
import type { ActivePull, WeightServer } from './transport.ts'
import type { HeldSlice, VersionStore, WeightsManifest } from './version-store.ts'
import { defaultWeightsConfig, WeightsSection, weightsConfigProblems, type DataPortLimits } from './weights-config.ts'

/** Defaults and bounds: `defaultWeightsConfig` and `WeightsSection` (weights-config.ts); out-of-bounds values throw ERR_ARG_INVALID. */
export interface TcpWeightServerOptions {
  /** host:port to listen on; port 0 picks a free one. */
  listen: string
  /** Pool bytes kept for shared reads of tensors served from NVMe (serve-read-window.ts); 0: the default (serveWindowBytes below). Default 0. */
  serveWindowBytes?: number
  /** The published chunk size (weights.chunkBytes): sizes the default serve window. Default 4 MiB. */
  chunkBytes?: number
  /** Time a connection has from its accept to a verified AUTH proof, ms. Default 1000. */
  authTimeoutMs?: number
  /** Most connections in their handshake, all addresses together; a newcomer evicts one (module comment). Default 32. */
  maxPendingConnections?: number
  /** Most connections in their handshake from one remote address (IPv6: one /64); a newcomer evicts its address's oldest. Default 8. */
  maxPendingPerAddress?: number
  /** Most authenticated connections; one authenticating beyond it is closed. Default 256. */
  maxConnections?: number
  /** Time the rest of a request frame has to arrive once its first byte did, ms. Default 5000. */
  frameTimeoutMs?: number
  /** An authenticated connection with no request in progress and no bytes moving for this long is closed, ms; 0: never. Default 300000. */
  idleTimeoutMs?: number
  /** Least time between two log lines counting refusals before authentication, ms. Default 10000. */
  refusalLogIntervalMs?: number
  /** Tensor bytes per second sent to all pullers together; 0 or absent: no limit. */
  uploadBytesPerSecond?: number
}

export interface TcpWeightServerComponents {
  stateManager: StateManager
  versions: VersionStore
  auth: DataAuth
  logger: Logger
  /** Versions this agent is pulling whole: their stored tensors are served too (swarm-holdings.ts). */
  swarm?: SwarmHoldings
  /** Committed versions served for one-sided UCX reads too (UCX_ADDRESS, UCX_OPEN: ucx-serve.ts); absent: both are refused, with `ucxRefusal` as the reason. */
  ucx?: UcxServe
  ucxRefusal?: string
}

/** Chunks the default serve window holds at least (serveWindowBytes). */
const sharedChunks = 32

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
  if (code === 'ERR_WEIGHTS_NOT_HELD') return Status.notHeld
  if (code === 'ERR_DATA_CORRUPT') return Status.corrupt
  if (code === 'ERR_WEIGHTS_NOT_FOUND' || code === 'ERR_KEY_NOT_FOUND') return Status.notFound
  if (code === 'ERR_LAYOUT_INVALID' || code === 'ERR_WEIGHTS_PROTOCOL' || code === 'ERR_BAD_REQUEST' || code === 'ERR_UCX_UNAVAILABLE' || code === 'ERR_TIER_FULL' || code === 'ERR_POOL_FULL') return Status.badRequest
  return Status.internal
}

/**
 * Checks the committed chunks covering bytes [from, to) of a tensor against
 * the manifest (native threads); ERR_DATA_CORRUPT names the first that
 * changed. Costs a checksum of the covered chunks: only for adopted-region
 * keys, whose writer may still hold a mapping.
 */
async function verifyCommitted (manifest: WeightsManifest, tensor: WeightsManifest['tensors'][number], bytesAt: (offset: number, length: number) => HostRange, from: number, to: number): Promise<void> {
  const chunkBytes = manifest.chunkBytes
  const first = Math.floor(from / chunkBytes)
  const end = Math.ceil(to / chunkBytes)
  const sums = await Promise.all(Array.from({ length: end - first }, (_, i) => {
    const at = (first + i) * chunkBytes
    return checksum(bytesAt(at, Math.min(chunkBytes, tensor.bytes - at)))
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

const limitNames = ['authTimeoutMs', 'maxPendingConnections', 'maxPendingPerAddress', 'maxConnections', 'frameTimeoutMs', 'idleTimeoutMs'] as const

/** The payload of a CHECKSUM answer. */
const noBytes = Buffer.alloc(0)

/** The options' limits with defaults filled in, checked against the config schema's bounds and rules. */
function dataPortLimits (options: TcpWeightServerOptions): DataPortLimits {
  const limits = { ...defaultWeightsConfig } as DataPortLimits
  const problems: string[] = []
  for (const name of limitNames) {
    const value = options[name]
    if (value === undefined) continue
    const schema = WeightsSection.properties[name]
    if (!Value.Check(schema, value)) problems.push(`${name} must be an integer in ${schema.minimum}..${schema.maximum}, got ${JSON.stringify(value)}`)
    limits[name] = value
  }
  problems.push(...weightsConfigProblems(limits))
  if (problems.length > 0) throw new AgentError('ERR_ARG_INVALID', `weight server options: ${problems.join('; ')}`, { details: problems })
  return limits
}

/**
 * The serve window's bytes: `configured`; for 0, an eighth of the pool but at
 * least `sharedChunks` chunks (four pullers of 4 streams with 2 READs in
 * flight each span 32 chunks: a window smaller than that drops chunks before
 * the other pullers reach them). At most half the pool (kept chunks cannot
 * be spilled: a window as large as the pool would leave no room for anything
 * else), with a warning when the configured value is more.
 */
function serveWindowBytes (configured: number, poolBytes: number, chunkBytes: number, logger: Logger): number {
  const most = Math.floor(poolBytes / 2)
  if (configured === 0) return Math.min(most, Math.max(Math.floor(poolBytes / 8), sharedChunks * chunkBytes))
  if (configured > most) logger.warn({ serveWindowBytes: configured, hostPoolBytes: poolBytes, using: most }, 'weights.serveWindowBytes is more than half the host pool: using half of it')
  return Math.min(configured, most)
}

/**
 * The key a remote address's pending connections are counted under: the
 * address itself for IPv4 (and IPv4-mapped IPv6), its /64 for IPv6 (one host
 * may hold a whole /64).
 */
export function pendingAddressKey (address: string): string {
  const ip = address.replace(/%.*$/, '')
  if (!ip.includes(':')) return ip
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)
  if (mapped !== null) return mapped[1]!
  const [head = '', tail] = ip.split('::')
  const groups = (part: string): string[] => part === '' ? [] : part.split(':').flatMap(g => g.includes('.') ? ['0', '0'] : [g])
  const before = groups(head)
  const after = tail === undefined ? [] : groups(tail)
  const all = [...before, ...Array<string>(Math.max(0, 8 - before.length - after.length)).fill('0'), ...after]
  return `${all.slice(0, 4).map(g => (parseInt(g, 16) || 0).toString(16)).join(':')}::/64`
}

/**
 * Refusals before authentication, counted by reason: the first is logged at
 * once, later ones as counts at most once per `intervalMs`.
 */
function refusalLog (logger: Logger, intervalMs: number): { note(reason: string, remote: string): void, stop(): void } {
  const counts = new Map<string, number>()
  let lastRemote = ''
  let window: NodeJS.Timeout | undefined
  const close = (): void => {
    window = undefined
    if (counts.size === 0) return
    logger.warn({ refused: Object.fromEntries(counts), lastRemote, intervalMs }, 'weights connections refused before authentication')
    counts.clear()
    window = setTimeout(close, intervalMs).unref()
  }
  return {
    note (reason, remote) {
      if (window === undefined) {
        logger.warn({ remote, why: reason }, 'weights connection refused')
        window = setTimeout(close, intervalMs).unref()
        return
      }
      counts.set(reason, (counts.get(reason) ?? 0) + 1)
      lastRemote = remote
    },
    stop () { clearTimeout(window); window = undefined; counts.clear() },
  }
}

export function createTcpWeightServer (options: TcpWeightServerOptions, components: TcpWeightServerComponents): WeightServer {
  const { stateManager: sm, versions, auth, logger, swarm } = components

  /** The UCX side, or ERR_UCX_UNAVAILABLE with the reason this agent serves none. */
  function ucxServe (): UcxServe {
    if (components.ucx !== undefined) return components.ucx
    throw new AgentError('ERR_UCX_UNAVAILABLE', `this agent does not serve weights over UCX: ${components.ucxRefusal ?? 'weights.transports does not list "ucx"'}`)
  }

  /**
   * The version a MANIFEST names: committed here, or (an exact version) being
   * pulled whole here, served as it arrives. Otherwise the version store's error.
   */
  function lookup (model: string, version: number): WeightsManifest {
    try {
      return versions.get(model, version)
    } catch (err) {
      const seeding = version !== latestVersion && (err as AgentError).code === 'ERR_WEIGHTS_NOT_FOUND' ? swarm?.get(model, version) : undefined
      if (seeding === undefined) throw err
      return seeding.manifest
    }
  }

  /** The committed manifest of (model, version), or undefined when this agent knows no such exact version (then `missing` is the store's error). */
  function committed (model: string, version: number): { manifest?: WeightsManifest, missing?: Error } {
    try {
      return { manifest: versions.get(model, version) }
    } catch (err) {
      if (version === latestVersion || (err as AgentError).code !== 'ERR_WEIGHTS_NOT_FOUND') throw err
      return { missing: err as Error }
    }
  }

  /**
   * HAVE: what this agent serves of (model, version) — with `layout`, of that
   * (layout, rank)'s slices. A full copy serves every tensor (any slice of
   * it), a partial holding of that layout every slice, a swarm seed what
   * arrived (a sliced seed of that layout first, else a whole seed).
   */
  function haveOf (model: string, version: number, layout: string | undefined): Have {
    const { manifest, missing } = committed(model, version)
    const every = (tensors: number, on: boolean): Have => {
      const n = Math.ceil(tensors / 8)
      const held = new Uint8Array(n)
      if (on) for (let i = 0; i < tensors; i++) held[i >> 3]! |= 1 << (i & 7)
      return { tensors, held, fetching: new Uint8Array(n) }
    }
    if (manifest !== undefined && (manifest.partial === undefined || manifest.partial.layout === layout)) return every(manifest.tensors.length, true)
    const seeding = (layout !== undefined ? swarm?.get(model, version, layout) : undefined) ?? swarm?.get(model, version)
    if (seeding !== undefined) return seeding.have()
    // Known here as other slices only (held, or being pulled): none of these.
    const known = manifest?.tensors.length ?? swarm?.list().find(h => h.model === model && h.version === version)?.tensors
    if (known !== undefined) return every(known, false)
    throw missing!
  }

  /**
   * Where a READ is served from: a full copy committed here; the partial
   * holding (committed, or a sliced swarm seed) that holds exactly the
   * slice asked for; a whole swarm seed that stored the tensor. A version
   * being pulled here that does not hold it yet: ERR_WEIGHTS_NOT_HELD (never
   * a wait).
   */
  function readSource (req: ReadRequest): { manifest: WeightsManifest, held?: HeldSlice } {
    const { manifest, missing } = committed(req.model, req.version)
    if (manifest !== undefined && manifest.partial === undefined) return { manifest }
    const wanted = { index: req.tensorIndex, dim: req.dim, ranges: req.ranges }
    const mine = manifest?.partial?.slices.find(h => h.index === req.tensorIndex && sameSlice(h, wanted))
    if (mine !== undefined) return { manifest: manifest!, held: mine }
    const sliced = swarm?.slice(req.model, req.version, wanted)
    if (sliced !== undefined) return { manifest: sliced.manifest, held: sliced.held }
    const whole = swarm?.get(req.model, req.version)
    if (whole?.held(req.tensorIndex) === true) return { manifest: whole.manifest }
    const seeding = whole ?? swarm?.list().find(h => h.model === req.model && h.version === req.version)
    if (seeding !== undefined) throw new AgentError('ERR_WEIGHTS_NOT_HELD', `this agent is pulling ${req.model} v${req.version} itself and does not hold ${whole !== undefined ? 'tensor' : 'that slice of tensor'} ${req.tensorIndex} yet`)
    if (manifest?.partial !== undefined) {
      const holding = manifest.partial
      const name = manifest.tensors[req.tensorIndex]?.name ?? `#${req.tensorIndex}`
      throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `this agent holds only the tp ${holding.tp} rank ${holding.rank} slices (layout ${holding.layout}) of ${manifest.model} v${manifest.version}, not the slice of ${name} asked for; pull it from a full holder`)
    }
    throw missing!
  }
  const limits = dataPortLimits(options)
  const sockets = new Set<Socket>()
  /** Connections in their handshake, in accept order (oldest first), with their address key and accept sequence number. */
  const pending = new Map<Socket, { address: string, seq: number }>()
  /** The same, per address key; each set in accept order. */
  const pendingByAddress = new Map<string, Set<Socket>>()
  let accepted = 0
  let authenticated = 0
  const pulls = new Map<Socket, ActivePull>()
  const refusals = refusalLog(logger, options.refusalLogIntervalMs ?? 10_000)
  let refused = 0
  let servedBytes = 0
  const noteRefusal = (why: string, remote: string): void => { refused++; refusals.note(why, remote) }
  let server: Server | undefined
  let address = ''
  /** Made at start (its default size is the started pool's). */
  let window: ServeReadWindow | undefined

  /** When the paced uplink is free again (performance.now()), with uploadBytesPerSecond. */
  let uplinkFreeAt = 0
  /** Waits for `bytes` of the upload budget: READ replies leave at uploadBytesPerSecond, all connections together. */
  async function paceUpload (bytes: number): Promise<void> {
    const rate = options.uploadBytesPerSecond ?? 0
    if (rate <= 0) return
    const now = performance.now()
    const start = Math.max(now, uplinkFreeAt)
    uplinkFreeAt = start + bytes / rate * 1000
    if (start > now) await new Promise(resolve => setTimeout(resolve, start - now))
  }

  const started = (): ServeReadWindow => {
    if (window === undefined) throw new AgentError('ERR_UNAVAILABLE', 'the weights server is not started')
    return window
  }

  function leavePending (socket: Socket): void {
    const entry = pending.get(socket)
    if (entry === undefined) return
    pending.delete(socket)
    const own = pendingByAddress.get(entry.address)!
    own.delete(socket)
    if (own.size === 0) pendingByAddress.delete(entry.address)
  }

  /** The pending connection to close for a newcomer from address key `key` when a cap is full, and why; undefined: there is room. */
  function evictionVictim (key: string): { socket: Socket, why: string } | undefined {
    const own = pendingByAddress.get(key)
    if (own !== undefined && own.size >= limits.maxPendingPerAddress) return { socket: own.values().next().value!, why: 'evicted: its address has maxPendingPerAddress connections in their handshake' }
    if (pending.size < limits.maxPendingConnections) return undefined
    // The busiest address's oldest; among equally busy addresses, the oldest of their oldest.
    let victim: Socket | undefined
    let victimSize = 0
    let victimSeq = Infinity
    for (const set of pendingByAddress.values()) {
      const oldest: Socket = set.values().next().value!
      const seq = pending.get(oldest)!.seq
      if (set.size > victimSize || (set.size === victimSize && seq < victimSeq)) { victim = oldest; victimSize = set.size; victimSeq = seq }
    }
    return { socket: victim!, why: 'evicted: maxPendingConnections connections in their handshake' }
  }

  function handle (socket: Socket): void {
    if (socket.remoteAddress === undefined) { socket.destroy(); return } // reset before it was accepted
    sockets.add(socket)
    socket.setNoDelay(true)
    const remote = `${socket.remoteAddress}:${socket.remotePort}`
    const key = pendingAddressKey(socket.remoteAddress)
    const evicted = evictionVictim(key)
    if (evicted !== undefined) {
      leavePending(evicted.socket)
      evicted.socket.destroy()
      noteRefusal(evicted.why, `${evicted.socket.remoteAddress}:${evicted.socket.remotePort}`)
    }
    pending.set(socket, { address: key, seq: accepted++ })
    let own = pendingByAddress.get(key)
    if (own === undefined) pendingByAddress.set(key, own = new Set())
    own.add(socket)

    const serverNonce = auth.newNonce()
    let state: 'handshake' | 'open' | 'closing' = 'handshake'
    /** Counted in `authenticated` (until its close). */
    let counted = false
    let busy = false
    let input: Buffer = Buffer.alloc(0)
    /** Bytes received so far: with input.length, places a frame in the stream. */
    let receivedBytes = 0
    /** Stream offset of the first byte of the incomplete frame the frame timer runs for. */
    let partialFrameAt = -1
    let frameTimer: NodeJS.Timeout | undefined
    /** The version this connection opened for UCX reads: its pins and mappings, released when it closes. */
    let ucxOpened: UcxOpened | undefined
    // A connection refused for a wrong key stays pending until it closes: one that never closes its side is destroyed here.
    const authTimer = setTimeout(() => { if (state === 'closing') { leavePending(socket); socket.destroy() } else refuseUnauthenticated('handshake timed out') }, limits.authTimeoutMs)
    socket.on('close', () => {
      clearTimeout(authTimer)
      clearTimeout(frameTimer)
      leavePending(socket)
      if (counted) authenticated--
      counted = false
      state = 'closing'
      sockets.delete(socket)
      pulls.delete(socket)
      ucxOpened?.release()
      ucxOpened = undefined
    })
    socket.on('error', err => logger.debug({ remote, err: err.message }, 'weights connection error'))
    socket.write(encodeHello(serverNonce))

    function refuseUnauthenticated (why: string): void {
      noteRefusal(why, remote)
      leavePending(socket)
      state = 'closing'
      socket.destroy()
    }

    function refuse (why: string): void {
      if (state !== 'open') { refuseUnauthenticated(why); return }
      logger.warn({ remote, why }, 'weights connection closed')
      state = 'closing'
      socket.destroy()
    }

    socket.on('data', (chunk: Buffer) => {
      if (state === 'closing') return
      receivedBytes += chunk.length
      input = input.length === 0 ? chunk : Buffer.concat([input, chunk])
      if (input.length > 64 * 1024) { refuse('too much unread input'); return }
      pump()
    })

    /** Takes complete frames off `input`; one request at a time once authenticated. */
    function pump (): void {
      if (state === 'handshake') {
        if (input.length < authBytes) return
        let frame
        try { frame = decodeAuth(input.subarray(0, authBytes)) } catch (err) { refuse((err as Error).message); return }
        input = input.subarray(authBytes)
        if (!auth.equal(frame.proof, auth.clientProof(serverNonce, frame.clientNonce))) {
          state = 'closing'
          socket.end(encodeReplyHeader(Status.unauthorized, 0, 0, 0))
          noteRefusal('wrong cluster key', remote)
          return
        }
        if (authenticated >= limits.maxConnections) { refuseUnauthenticated('authenticated connections full'); return }
        clearTimeout(authTimer)
        leavePending(socket)
        state = 'open'
        counted = true
        authenticated++
        if (limits.idleTimeoutMs > 0) socket.setTimeout(limits.idleTimeoutMs, onIdle)
        const proof = auth.serverProof(serverNonce, frame.clientNonce)
        socket.write(Buffer.concat([encodeReplyHeader(Status.ok, 0, proof.length, 0), proof]))
      }
      if (state !== 'open') return
      while (!busy && input.length >= requestHeaderBytes) {
        let header
        try { header = decodeRequestHeader(input.subarray(0, requestHeaderBytes)) } catch (err) { refuse((err as Error).message); return }
        if (input.length < requestHeaderBytes + header.bodyLength) break
        const body = Buffer.from(input.subarray(requestHeaderBytes, requestHeaderBytes + header.bodyLength))
        input = input.subarray(requestHeaderBytes + header.bodyLength)
        busy = true
        void serve(header.op, header.requestId, body).then(() => { busy = false; if (state === 'open' && !socket.destroyed) pump() })
      }
      watchPartialFrame()
    }

    /**
     * Runs the frame timer while `input` ends inside a request frame: it starts
     * at that frame's first byte and is not extended by more of its bytes;
     * the next incomplete frame gets its own. Complete frames waiting behind
     * a reply in progress are not timed. Walks only the frames' lengths.
     */
    function watchPartialFrame (): void {
      let start = 0
      let end = 0
      while (end + requestHeaderBytes <= input.length) { start = end; end += requestHeaderBytes + input.readUInt32LE(end + 12) }
      if (end === input.length) {
        if (frameTimer !== undefined) { clearTimeout(frameTimer); frameTimer = undefined }
        return
      }
      // end < length: a header is incomplete, and starts at `end`; end > length: the body of the frame at `start` is.
      const streamAt = receivedBytes - input.length + (end < input.length ? end : start)
      if (frameTimer !== undefined && streamAt === partialFrameAt) return
      partialFrameAt = streamAt
      if (frameTimer === undefined) frameTimer = setTimeout(() => refuse(`request frame incomplete ${limits.frameTimeoutMs} ms after its first byte`), limits.frameTimeoutMs)
      else frameTimer.refresh()
    }

    /** Socket timeout (no bytes either way for idleTimeoutMs): closes a connection with nothing in progress. */
    function onIdle (): void {
      if (busy || input.length > 0 || state !== 'open') return
      logger.debug({ remote, idleTimeoutMs: limits.idleTimeoutMs }, 'weights connection idle: closed')
      state = 'closing'
      socket.destroy()
    }

    async function serve (op: number, requestId: number, body: Buffer): Promise<void> {
      try {
        if (op === Op.manifest) {
          const req = decodeManifestRequest(body)
          const json = Buffer.from(JSON.stringify(lookup(req.model, req.version)))
          await send(Status.ok, requestId, json, 0)
          return
        }
        if (op === Op.ucxAddress) {
          if (body.length !== 0) throw protocolError('UCX_ADDRESS has no body')
          await send(Status.ok, requestId, Buffer.from(JSON.stringify({ worker: ucxServe().address() })), 0)
          return
        }
        if (op === Op.ucxOpen) {
          const req = decodeManifestRequest(body)
          const ucx = ucxServe()
          if (req.version === latestVersion) throw new AgentError('ERR_BAD_REQUEST', 'UCX_OPEN names an exact version')
          // Retired later, or while it is being pinned: the connection is closed (its close releases what it opened).
          const opened = await ucx.open(versions.get(req.model, req.version), () => socket.destroy())
          // One version at a time per connection; a closed connection keeps nothing.
          ucxOpened?.release()
          ucxOpened = opened
          if (socket.destroyed) { opened.release(); ucxOpened = undefined; return }
          await send(Status.ok, requestId, Buffer.from(JSON.stringify(opened.reply)), 0)
          return
        }
        if (op === Op.have) {
          const req = decodeHaveRequest(body)
          await send(Status.ok, requestId, encodeHave(haveOf(req.model, req.version, req.layout)), 0)
          return
        }
        const req = decodeReadRequest(body)
        if (op === Op.checksum) {
          // What a READ of these bytes would carry, without them: a puller read them one-sided (UCX).
          const { manifest, held } = readSource(req)
          await (held !== undefined ? serveSliceRead(manifest, held, req, requestId, false) : serveRead(manifest, req, requestId, false))
          return
        }
        await paceUpload(req.byteLength)
        const { manifest, held } = readSource(req)
        const pull = pulls.get(socket) ?? { remote, model: req.model, version: req.version, bytesSent: 0, connectedAtMs: Date.now() }
        Object.assign(pull, { model: req.model, version: req.version })
        pulls.set(socket, pull)
        await (held !== undefined ? serveSliceRead(manifest, held, req, requestId, true) : serveRead(manifest, req, requestId, true))
        pull.bytesSent += req.byteLength
        servedBytes += req.byteLength
      } catch (err) {
        const status = statusOf(err)
        if (status === Status.internal || status === Status.corrupt) logger.error({ remote, err }, 'weights request failed')
        // A request the protocol cannot parse leaves the stream out of step: answer, then close.
        const fatal = (err as AgentError).code === 'ERR_WEIGHTS_PROTOCOL'
        if (!socket.destroyed) await send(status, requestId, Buffer.from((err as Error).message), 0).catch(() => {})
        if (fatal) socket.end()
      }
    }

    /** A READ's answer: its bytes and checksum, or (`withBytes` false: CHECKSUM) the checksum alone. */
    async function serveRead (manifest: WeightsManifest, req: ReadRequest, requestId: number, withBytes: boolean): Promise<void> {
      const tensor = manifest.tensors[req.tensorIndex]
      if (tensor === undefined) throw new AgentError('ERR_BAD_REQUEST', `tensor ${req.tensorIndex} does not exist (the version has ${manifest.tensors.length})`)
      const runs = sliceRuns({ name: tensor.name, shape: tensor.shape, elementBytes: dtypeBytes[tensor.dtype] }, req.dim, req.ranges, req.byteOffset, req.byteLength)
      let from = Infinity; let to = 0
      for (const r of runs) { from = Math.min(from, r.offset); to = Math.max(to, r.offset + r.length) }
      const pinned = await started().read(tensor.key, tensor.bytes, from, to, manifest.chunkBytes)
      try {
        const sub = (offset: number, length: number): HostRange => ({ memory: pinned.range.memory, offset: pinned.range.offset + offset - pinned.at, length })
        if (runs.length === 1 && req.dim === null) {
          const range = sub(from, to - from)
          const chunk = alignedChunk(req, manifest.chunkBytes, tensor.bytes)
          const crc = chunk !== undefined ? tensor.chunkChecksums[chunk]! : await checksum(range)
          if (chunk === undefined && pinned.sharedRegion !== undefined) await verifyCommitted(manifest, tensor, sub, from, to)
          await send(Status.ok, requestId, withBytes ? viewHostRange(range) : noBytes, crc)
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
          if (pinned.sharedRegion !== undefined) await verifyCommitted(manifest, tensor, sub, from, to)
          await send(Status.ok, requestId, withBytes ? scratch.view : noBytes, await checksum(scratch.range))
        } finally {
          scratch.release()
        }
      } finally {
        pinned.release()
      }
    }

    /**
     * A READ of one held slice (of a partial holding, or a sliced swarm seed),
     * from the slice's stored contiguous bytes (no gather: the bytes a full
     * holder would gather). Windows on the manifest's chunks carry the
     * checksum recorded when the slice was pulled; others are computed.
     */
    async function serveSliceRead (manifest: WeightsManifest, held: HeldSlice, req: ReadRequest, requestId: number, withBytes: boolean): Promise<void> {
      if (req.byteOffset + req.byteLength > held.bytes) throw new AgentError('ERR_BAD_REQUEST', `bytes ${req.byteOffset}..${req.byteOffset + req.byteLength} past the ${held.bytes} bytes of the slice`)
      const pinned = await started().read(held.key, held.bytes, req.byteOffset, req.byteOffset + req.byteLength, manifest.chunkBytes)
      try {
        const range: HostRange = { memory: pinned.range.memory, offset: pinned.range.offset + req.byteOffset - pinned.at, length: req.byteLength }
        const chunk = alignedChunk(req, manifest.chunkBytes, held.bytes)
        await send(Status.ok, requestId, withBytes ? viewHostRange(range) : noBytes, chunk !== undefined ? held.chunkChecksums[chunk]! : await checksum(range))
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
      const poolBytes = sm.availability().hostPool.totalBytes
      window = createServeReadWindow({ windowBytes: serveWindowBytes(options.serveWindowBytes ?? 0, poolBytes, options.chunkBytes ?? defaultWeightsConfig.chunkBytes, logger) }, { stateManager: sm })
      const s = createServer({ noDelay: true }, handle)
      try {
        await new Promise<void>((resolve, reject) => {
          s.once('error', reject)
          s.listen({ host, port }, () => { s.off('error', reject); resolve() })
        })
      } catch (err) {
        window.clear() // leaves the StateManager's reclaimers: a failed start holds nothing
        window = undefined
        throw err
      }
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
      refusals.stop()
      for (const socket of sockets) socket.destroy()
      await new Promise<void>(resolve => s.close(() => resolve()))
      window?.clear()
    },
    activePulls: () => [...pulls.values()].map(p => ({ ...p })),
    counters: () => {
      const reads = window?.stats()
      return { servedBytes, accepted, refused, pending: pending.size, authenticated, sharedReads: reads?.shared ?? 0, windowBytes: reads?.heldBytes ?? 0 }
    },
  }
}
