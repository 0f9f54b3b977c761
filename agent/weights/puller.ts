/**
 * Pulling a version into this agent's host pool (RLBoost §4.3: a rollout
 * instance pulls the latest weights at any time, independently of training
 * and of other pullers; each rank only its resharded slices).
 *
 * - The manifest comes first; the planner turns it and the target layout into
 *   exact slices; each slice gets a pool scratch range that becomes a
 *   StateManager key (`adopt`, no copy) once all its bytes arrived and
 *   verified. Keys already stored are skipped, so a repeated pull fetches only
 *   what is missing.
 * - Slices are cut into pieces (the manifest's chunks for whole tensors,
 *   `chunkBytes` windows of sliced ones) in one shared queue; `streams`
 *   connections each keep `pipelineDepth` pieces in flight and take the next
 *   piece when one lands (no fixed 1/N split: a slow connection just takes fewer).
 * - Each piece is verified (crc32c on native threads) against the server's
 *   checksum; a mismatch refetches it (up to `maxAttempts`). A dropped
 *   connection puts its in-flight pieces back in the queue and reconnects with
 *   backoff; pieces that landed are never fetched again.
 * - The version retired mid-pull fails the pull with ERR_WEIGHTS_RETIRED, or,
 *   when `latest` was asked for, starts over with the new latest. With
 *   `fallbacks` (full holders of the version), a source that drops the
 *   version or stays unreachable hands the pull to the next one instead:
 *   landed pieces stay, the checksums stay those of the first manifest.
 * - A source that holds only one rank's slices (a partial holder) serves only
 *   pulls of exactly that (layout, rank); its pieces are checked against the
 *   checksums it recorded. A completed sliced pull makes this agent a partial
 *   holder in turn (PROTOCOL.md "Partial holders").
 * - Slices pass through a window of the host pool (`windowBytes`, default an
 *   eighth of it): slices are admitted in order while their bytes fit (one
 *   at least), and each is stored as its key the moment its last piece
 *   verified, so the StateManager spills earlier keys to NVMe as the pool
 *   fills. A pull needs its slices to fit pool and NVMe together, and each
 *   slice the pool alone (checked before a byte moves, ERR_TIER_FULL).
 * - A pull that fails keeps the slices it stored (a repeat fetches only the
 *   rest), unless the version is gone or its source sent corrupt bytes.
 * - With `out`, the slices go to one safetensors file instead of keys
 *   (pull-file.ts): each verified piece is written at its place as it lands,
 *   through a few pool buffers of a piece each (as many as the window holds,
 *   at most one per request in flight), so no slice needs the pool whole and
 *   nothing is stored or spilled. Slices this agent holds as keys are copied
 *   from them; a repeat of a pull that stopped keeps the pieces the file
 *   already holds. Nothing is registered for serving.
 * Memory: the window (host pool) plus 64 KiB per connection.
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { checksum } from '../../native/index.ts'
import { dtypeBytes } from '../state/keys.ts'
import type { ScratchBytes, StateManager } from '../state/state-manager.ts'
import { latestVersion, maxReadBytes } from './protocol.ts'
import { chunkChecksums } from './publisher.ts'
import { layoutId, planReshard, sameSlice, sliceRuns, type TargetLayout, type TensorSlice } from './reshard.ts'
import type { WeightStream, WeightStreamConnector } from './transport.ts'
import { weightsKey, type HeldSlice, type PartialHolding, type VersionStore, type WeightsManifest } from './version-store.ts'
import type { PullResult } from '../api/wire/weights.ts'
import { createPieceBuffers, openPullFile, type PullFile, type PullFileTarget } from './pull-file.ts'
import { createPullSchedule, type Piece, type PullSource } from './pull-schedule.ts'
import type { SwarmHoldings } from './swarm-holdings.ts'
import type { HostRange } from '../../native/index.ts'

export interface PullRequest {
  /** host:port of the serving agent's data server. */
  from: string
  model: string
  /** -1 = latest. */
  version: number
  /** Absent: every tensor whole. A function receives the manifest (presets read its metadata). */
  layout?: TargetLayout | ((manifest: WeightsManifest) => TargetLayout)
  /** Parallel connections, >= 1. */
  streams: number
  /**
   * Data addresses that hold the same version (full holders), in order: when
   * `from` stops serving it mid-pull (retired or gone: status 2 or 1), the
   * pull goes on from the next one, keeping the pieces that landed.
   */
  fallbacks?: string[]
  /** Full holders of `version` now (asked once `fallbacks` ran out: e.g. swarm peers that finished their pull since it started). */
  laterHolders?: (version: number) => string[]
  /** Write the slices to this safetensors file instead of StateManager keys. */
  out?: PullFileTarget
  /**
   * Swarm peers (data addresses) of `version` — for a sliced pull, of its
   * `layout` id: agents pulling or holding the version whole, or (sliced)
   * that layout's slices; the pull fetches from them what their HAVE says
   * they hold (pull-schedule.ts), at most maxPeers of them.
   */
  peers?: (version: number, layout?: string) => string[]
  onProgress?: (doneBytes: number, totalBytes: number) => void
  signal?: AbortSignal
}

export type { PullResult }

export interface PullerOptions {
  /** Window of a sliced piece, bytes (from a partial holder: the manifest's chunkBytes, its checksum windows). */
  chunkBytes: number
  /** Requests in flight per connection. Default 2. */
  pipelineDepth?: number
  /** Tries per piece before a checksum mismatch fails the pull. Default 4. */
  maxAttempts?: number
  /** Consecutive failed reconnects before a connection gives up. Default 5. */
  maxReconnects?: number
  /** Times a pull of "latest" starts over when its version is retired underneath it. Default 3. */
  latestRestarts?: number
  /**
   * Host-pool bytes a pull fills at once (slices in flight); a slice larger
   * than this still goes alone. 0 or absent: an eighth of the host pool.
   */
  windowBytes?: number
  /** How long the primary source leaves a tensor to a swarm peer that is fetching it, ms (a peer that fails is dropped at once; this bounds one that stalls). Default 30000. */
  peerWaitMs?: number
  /** How often a swarm peer is asked what it holds, ms. Default 100. */
  haveIntervalMs?: number
  /** A READ a swarm peer has not answered in this long drops the peer, ms. Default 10000. */
  pieceTimeoutMs?: number
  /** How often a pull asks again who its swarm peers are, ms. Default 250. */
  peerRefreshMs?: number
  /** How long a whole pull that may have swarm peers fetches only a few slices from its source while it looks for them, ms. Default 500. */
  swarmProbeMs?: number
}

/** What UCX did for a pull: bytes it carried, the UCX transports used, and (none used) why not. */
function ucxSummary (bytes: number, reports: Array<{ transports: string[] } | { fallback: string }>): NonNullable<PullResult['ucx']> {
  const transports = [...new Set(reports.flatMap(r => 'transports' in r ? r.transports : []))]
  const fallback = reports.find((r): r is { fallback: string } => 'fallback' in r)?.fallback
  return { bytes, transports, ...(bytes === 0 && fallback !== undefined ? { fallback } : {}) }
}

/** Most swarm peers one pull fetches from at once. */
export const maxPeers = 8

export interface PullerComponents {
  stateManager: StateManager
  connector: WeightStreamConnector
  /** Where a pull is registered so this agent serves it too: a complete one as a version, a sliced one as a partial holding. */
  versions?: VersionStore
  logger: Logger
  /** Told the size of every piece that arrives from a serving agent (checksum failures included), as it arrives: the service's byte counter. */
  received?: (bytes: number) => void
  /** Where a whole pull into keys is served while it arrives (swarm-holdings.ts). */
  swarm?: SwarmHoldings
}

export interface Puller {
  pull(request: PullRequest): Promise<PullResult>
}

/** The key a pulled slice is stored under: global offsets for one range; a fused multi-range slice is named by its layout. */
export function sliceKey (model: string, version: number, manifest: WeightsManifest, slice: TensorSlice, layout: TargetLayout | undefined): string {
  const t = manifest.tensors[slice.index]!
  if (slice.ranges.length <= 1) return weightsKey(model, slice.name, t.dtype, slice.shape, version, slice.offsets)
  return weightsKey(model, `${slice.name}.tp${layout!.tp}-r${layout!.rank}`, t.dtype, slice.shape, version)
}

/**
 * A partial holder serves one (layout, rank): a pull of another layout, or of
 * the whole version, is refused before any byte moves.
 */
function checkPartialSource (from: string, manifest: WeightsManifest, holding: PartialHolding, layout: TargetLayout | undefined, slices: TensorSlice[]): void {
  const holds = `${from} holds only the tp ${holding.tp} rank ${holding.rank} slices (layout ${holding.layout}) of ${manifest.model} v${manifest.version}`
  if (layout === undefined) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `${holds}, not the whole version; pull it from a full holder`)
  const wanted = layoutId(layout)
  const same = wanted === holding.layout && slices.length === holding.slices.length && slices.every((s, i) => {
    const h = holding.slices[i]!
    return h.index === s.index && h.bytes === s.bytes && sameSlice(h, s)
  })
  if (!same) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `${holds}; this pull asks for tp ${layout.tp} rank ${layout.rank} (layout ${wanted}): pull it from a full holder or a holder of that layout`)
}

export function createPuller (options: PullerOptions, components: PullerComponents): Puller {
  const { stateManager: sm, connector, logger } = components
  const depth = options.pipelineDepth ?? 2
  const maxAttempts = options.maxAttempts ?? 4
  const maxReconnects = options.maxReconnects ?? 5
  const chunkBytes = Math.min(options.chunkBytes, maxReadBytes)
  const pieceTimeoutMs = options.pieceTimeoutMs ?? 10_000

  /** The pull window, bytes: the option, else an eighth of the host pool. */
  const windowBytes = (): number => (options.windowBytes ?? 0) > 0 ? options.windowBytes! : Math.floor(sm.availability().hostPool.totalBytes / 8)

  /**
   * Before a byte moves: every slice must fit the host pool alone (a slice
   * passes through the pool whole), and the slices still needed must fit the
   * pool and NVMe together; ERR_TIER_FULL says how much is missing where.
   */
  function checkRoom (model: string, version: number, slices: readonly TensorSlice[], needed: readonly boolean[]): void {
    const { hostPool, nvme } = sm.availability()
    let bytes = 0
    for (let i = 0; i < slices.length; i++) {
      if (!needed[i]) continue
      const s = slices[i]!
      if (s.bytes > hostPool.totalBytes) {
        throw new AgentError('ERR_TIER_FULL', `${s.name} of ${model} v${version}: its ${s.bytes} bytes do not fit the host pool (${hostPool.totalBytes} bytes), through which every slice passes whole; raise state.hostPoolBytes`)
      }
      bytes += s.bytes
    }
    const room = hostPool.freeBytes + nvme.freeBytes
    if (bytes > room) {
      throw new AgentError('ERR_TIER_FULL', `pulling ${model} v${version} needs ${bytes} bytes; the host pool has ${hostPool.freeBytes} bytes free and NVMe ${nvme.freeBytes} (of ${nvme.totalBytes}): ${bytes - room} bytes missing (drop keys, or raise state.nvmeCapacityBytes)`)
    }
  }

  async function pullOnce (request: PullRequest, began: number): Promise<PullResult> {
    if (!Number.isSafeInteger(request.streams) || request.streams < 1 || request.streams > 64) throw new AgentError('ERR_BAD_REQUEST', `streams must be 1..64, got ${request.streams}`)
    // The first source that answers the manifest; one that is gone or no longer has the version hands over to the next fallback.
    const fallbacks = [...(request.fallbacks ?? [])]
    let source = request.from
    let first: WeightStream | undefined
    let manifest!: WeightsManifest
    for (;;) {
      try {
        first = await connector.open(source, request.signal !== undefined ? { signal: request.signal } : {})
        manifest = await first.manifest(request.model, request.version)
        break
      } catch (err) {
        first?.close()
        first = undefined
        const code = (err as AgentError).code
        const sourceLost = code === 'ERR_WEIGHTS_RETIRED' || code === 'ERR_WEIGHTS_NOT_FOUND' || code === 'ERR_WEIGHTS_TRANSFER'
        const next = sourceLost && request.signal?.aborted !== true ? fallbacks.shift() : undefined
        if (next === undefined) throw err
        logger.warn({ model: request.model, from: source, to: next, err: (err as Error).message }, 'weights source did not serve the manifest: trying another holder')
        source = next
      }
    }
    const version = manifest.version
    const startedFrom = source
    let layout: TargetLayout | undefined
    let slices: TensorSlice[]
    try {
      layout = typeof request.layout === 'function' ? request.layout(manifest) : request.layout
      const tensors = manifest.tensors.map(t => ({ name: t.name, shape: t.shape, elementBytes: dtypeBytes[t.dtype] }))
      slices = layout !== undefined ? planReshard(tensors, layout) : planReshard(tensors, { tp: 1, rank: 0, rules: [] })
      if (manifest.partial !== undefined) checkPartialSource(source, manifest, manifest.partial, layout, slices)
    } catch (err) {
      first.close()
      throw err
    }
    const partial = manifest.partial
    const switchedTo: string[] = []
    /** Goes on from the next fallback holder, if one is left: logged and recorded in switchedTo. */
    const moveToFallback = (err: unknown, message: string): boolean => {
      // The list given at the start, then whoever holds the version whole now (a swarm peer that finished).
      const tried = new Set([request.from, ...switchedTo])
      const next = fallbacks.shift() ?? request.laterHolders?.(version).find(a => !tried.has(a))
      if (next === undefined) return false
      logger.warn({ model: request.model, version, from: source, to: next, err: (err as Error).message }, message)
      source = next
      switchedTo.push(next)
      return true
    }
    const keys = slices.map(s => sliceKey(request.model, version, manifest, s, layout))
    const stored = new Set(sm.storedKeys(`weights/${request.model}/`).map(k => k.text))
    const scratches: Array<ScratchBytes | undefined> = slices.map(() => undefined)
    /** Chunk checksums of each stored slice, taken before it left the window (a sliced pull registers them). */
    const sliceSums: number[][] = slices.map(() => [])
    /** Keys this pull stored: dropped again when the version turns out gone or corrupt, kept (a repeat resumes) otherwise. */
    const adopted: string[] = []
    const totalBytes = slices.reduce((a, s) => a + s.bytes, 0)
    let doneBytes = 0
    let bytesReceived = 0
    let refetchedPieces = 0
    let reconnects = 0
    /** Payload bytes that came over UCX (one-sided gets), and what each primary stream said of UCX. */
    let ucxBytes = 0
    const ucxReports: Array<{ transports: string[] } | { fallback: string }> = []
    // Pieces on the manifest's chunks where a peer may serve them: the windows its recorded checksums cover.
    const step = (s: TensorSlice): number => s.dim === null || partial !== undefined || request.peers !== undefined ? Math.min(manifest.chunkBytes, maxReadBytes) : chunkBytes
    /** Offsets of a slice's pieces. */
    const offsetsOf = (i: number): number[] => Array.from({ length: Math.ceil(slices[i]!.bytes / step(slices[i]!)) }, (_, n) => n * step(slices[i]!))
    const pieceLength = (i: number, at: number): number => Math.min(step(slices[i]!), slices[i]!.bytes - at)
    let file: PullFile | undefined
    try {
      if (request.out !== undefined) {
        file = await openPullFile(request.out, {
          model: request.model, version, slices: slices.map(s => ({ slice: s, dtype: manifest.tensors[s.index]!.dtype })), pieceBytes: slices.map(step),
          ...(layout !== undefined ? { layout: { tp: layout.tp, rank: layout.rank } } : {}),
        }, sm)
      } else {
        checkRoom(request.model, version, slices, slices.map((s, i) => !stored.has(keys[i]!) && s.bytes > 0))
      }
    } catch (err) {
      first.close()
      throw err
    }
    /** A piece still to fetch: not stored as part of a key here, not in the file already. */
    const missing = (i: number, at: number): boolean => !stored.has(keys[i]!) && file?.has(i, at) !== true
    const needed = slices.map((s, i) => s.bytes > 0 && offsetsOf(i).some(at => missing(i, at)))
    for (let i = 0; i < slices.length; i++) for (const at of offsetsOf(i)) if (!missing(i, at)) doneBytes += pieceLength(i, at)
    const windowLimit = windowBytes()
    /** Ends this pull's swarm seed (the holding served while it arrives), once the pull is over. */
    let endSeed = (): void => {}
    const buffers = file !== undefined ? createPieceBuffers(sm, Math.max(0, ...slices.map(step)), Math.max(1, Math.min(request.streams * depth, Math.floor(windowLimit / Math.max(1, ...slices.map(step)))))) : undefined
    try {
      if (file !== undefined) await copyStoredSlices(file)
      request.onProgress?.(doneBytes, totalBytes)

      const primary: PullSource = { address: startedFrom, primary: true, bytes: 0 }
      /** The layout id a sliced pull's swarm peers hold (HAVE asks for it). */
      const swarmLayout = layout !== undefined ? layoutId(layout) : undefined
      // Into keys, the pull is served while it arrives: whole, or as its layout's slices (swarm-holdings.ts).
      const seed = file !== undefined
        ? undefined
        : layout === undefined
          ? components.swarm?.begin({ ...manifest, tensors: manifest.tensors.map((t, i) => ({ ...t, key: keys[i]! })) })
          : components.swarm?.begin(manifest, {
            layout: layoutId(layout), tp: layout.tp, rank: layout.rank,
            slices: slices.map((s, i) => ({ index: s.index, dim: s.dim, ranges: s.ranges, shape: s.shape, bytes: s.bytes, key: s.bytes > 0 ? keys[i]! : '' })),
          })
      endSeed = () => { seed?.end() }
      // Tensors stored before this pull are served by a whole seed at once; a sliced seed serves only slices it checksummed itself.
      if (layout === undefined) for (let i = 0; i < slices.length; i++) if (!needed[i] && slices[i]!.bytes > 0) seed?.stored(slices[i]!.index)
      const schedule = createPullSchedule({
        slices: slices.map(s => ({ index: s.index, bytes: s.bytes })),
        pieces: slices.map((_, i) => needed[i] ? offsetsOf(i).filter(at => missing(i, at)).map(at => ({ offset: at, length: pieceLength(i, at) })) : []),
        // Into keys, a slice passes through the window whole; into a file, only its pieces do (the piece buffers).
        ...(file === undefined ? { windowBytes: windowLimit } : {}),
        primary,
        peerWaitMs: options.peerWaitMs ?? 30_000,
        ...(request.peers !== undefined ? { swarmProbeUntil: Date.now() + (options.swarmProbeMs ?? 500) } : {}),
        allocate: async i => { if (file === undefined) scratches[i] = await sm.scratch(slices[i]!.bytes) },
        admitted: i => seed?.fetching(slices[i]!.index, true),
      })
      const fail = (err: Error): void => schedule.fail(err)
      /**
       * Slices being stored (their last piece landed). The pull is over when these are, not when the
       * last piece landed: ending it closes the peers' connections, and a peer's task can end then
       * (its HAVE cut short) while its lane still checksums and stores a slice.
       */
      const stores = new Set<Promise<void>>()
      /** A slice's last piece landed: checksummed for a sliced pull, stored, and out of the window (into a file: its pieces are written). */
      const store = async (i: number): Promise<void> => {
        if (file === undefined) {
          const scratch = scratches[i]!
          if (layout !== undefined) sliceSums[i] = await chunkChecksums(scratch.range, manifest.chunkBytes)
          scratches[i] = undefined
          // Only keys this pull stored are dropped if it fails: a deduplicated one was someone else's first.
          if (await sm.adopt(keys[i]!, scratch)) adopted.push(keys[i]!)
          seed?.stored(slices[i]!.index, layout !== undefined ? sliceSums[i] : undefined)
        }
        schedule.release(i)
      }
      const onAbort = (): void => fail(request.signal!.reason as Error)
      request.signal?.addEventListener('abort', onAbort, { once: true })

      async function connection (initial: WeightStream | undefined): Promise<void> {
        let stream = initial
        let streamFrom = startedFrom
        try {
          await fetchOver()
        } finally {
          stream?.close()
          report(stream)
        }

        /** What UCX did for a stream of this connection, kept for the result before it is replaced. */
        function report (s: WeightStream | undefined): void {
          const r = s?.ucxReport?.()
          if (r !== undefined) ucxReports.push(r)
        }

        async function fetchOver (): Promise<void> {
          let failures = 0
          let lastError: Error | undefined
          while (schedule.failure === undefined && schedule.remaining > 0) {
            if (stream === undefined || stream.closed) {
              report(stream)
              if (stream !== undefined) {
                if (++failures > maxReconnects) throw lastError ?? new AgentError('ERR_WEIGHTS_TRANSFER', `lost ${source}`)
                reconnects++
                await new Promise(resolve => setTimeout(resolve, Math.min(2000, 50 * 2 ** failures)))
              }
              try {
                streamFrom = source
                stream = await connector.open(source)
              } catch (err) {
                if ((err as AgentError).code === 'ERR_WEIGHTS_AUTH') throw err
                lastError = err as Error
                stream = undefined // one failure counted per failed open
                if (++failures > maxReconnects) {
                  // The source is gone (not just one connection): go on from the next holder, if any.
                  if (streamFrom === source && !moveToFallback(err, 'weights source unreachable: resuming from another holder')) throw err
                  failures = 0
                  continue
                }
                await new Promise(resolve => setTimeout(resolve, Math.min(2000, 50 * 2 ** failures)))
                continue
              }
            }
            const s = stream
            await Promise.all(Array.from({ length: depth }, () => lane(s, primary, streamFrom, () => { failures = 0 }).catch(err => { lastError = err as Error })))
            if (schedule.failure !== undefined || schedule.remaining === 0) return
            if (lastError !== undefined && !s.closed) s.close()
          }
        }
      }

      /**
       * A swarm peer: one connection with `depth` lanes fetching what its HAVE
       * says it holds, and one asking HAVE every haveIntervalMs (apart, so the
       * answer never waits behind payloads: a stale HAVE makes pullers take
       * the same tensor from the publisher). A peer that does not know the
       * version yet (a puller named in `peers` that has not read the manifest)
       * holds nothing until it does. Any other failure, a READ or HAVE slower
       * than pieceTimeoutMs or a bad chunk drops the peer for this pull (its
       * slices go to the primary); the pull itself goes on. When the pull ends,
       * both connections are closed (a silent peer never holds it up).
       */
      async function peerConnection (peer: PullSource): Promise<void> {
        let stream: WeightStream | undefined
        let haveStream: WeightStream | undefined
        const close = (): void => { stream?.close(); haveStream?.close() }
        closePeers.push(close)
        try {
          const signal = request.signal !== undefined ? { signal: request.signal } : {}
          ;[stream, haveStream] = await Promise.all([connector.open(peer.address, signal), connector.open(peer.address, signal)])
          schedule.addPeer(peer)
          const s = stream
          const h = haveStream
          const haves = (async () => {
            while (schedule.failure === undefined && schedule.remaining > 0 && peer.dropped === undefined) {
              const timer = setTimeout(() => { schedule.drop(peer, `no HAVE answer within ${pieceTimeoutMs} ms`); h.close() }, pieceTimeoutMs)
              try {
                peer.have = await h.have(request.model, version, swarmLayout)
              } catch (err) {
                // A peer that does not know the version yet (its own pull has not read the manifest) holds nothing of it yet.
                if ((err as AgentError).code !== 'ERR_WEIGHTS_NOT_FOUND') throw err
                const n = Math.ceil(manifest.tensors.length / 8)
                peer.have = { tensors: manifest.tensors.length, held: new Uint8Array(n), fetching: new Uint8Array(n) }
              } finally {
                clearTimeout(timer)
              }
              if (peer.have.tensors !== manifest.tensors.length) throw new AgentError('ERR_WEIGHTS_PROTOCOL', `HAVE names ${peer.have.tensors} tensors, the manifest ${manifest.tensors.length}`)
              schedule.wake()
              await new Promise(resolve => setTimeout(resolve, options.haveIntervalMs ?? 100).unref())
            }
          })()
          await Promise.all([haves, ...Array.from({ length: depth }, () => lane(s, peer, peer.address, () => {}))])
        } catch (err) {
          // A failure after the pull ended is the pull closing the connections, not the peer's doing.
          if (schedule.failure === undefined && peer.dropped === undefined) {
            logger.warn({ model: request.model, version, peer: peer.address, reason: (err as Error).message }, 'weights swarm peer dropped')
            schedule.drop(peer, (err as Error).message)
          }
        } finally {
          close()
        }
      }

      /** Fetches pieces over one stream until nothing is left for its source or the stream fails (its piece goes back). */
      async function lane (stream: WeightStream, from: PullSource, address: string, landed: () => void): Promise<void> {
        for (let piece = await schedule.take(from); piece !== undefined; piece = await schedule.take(from)) {
          if (schedule.failure !== undefined) { schedule.retry(piece); return }
          const s = slices[piece.slice]!
          const dst = await pieceTarget(piece)
          try {
            if (!await fetchPiece(stream, from, address, piece, s, dst, landed)) return
          } finally {
            dst.release()
          }
        }
      }

      /** Where a piece lands: its place in the slice's window scratch, or (into a file) a piece buffer. */
      async function pieceTarget (piece: Piece): Promise<{ range: HostRange, view: Buffer, release(): void }> {
        if (buffers !== undefined) {
          const b = await buffers.acquire()
          return { range: { ...b.range, length: piece.length }, view: b.view.subarray(0, piece.length), release: () => buffers.release(b) }
        }
        const scratch = scratches[piece.slice]!
        return { range: { ...scratch.range, offset: scratch.range.offset + piece.offset, length: piece.length }, view: scratch.view.subarray(piece.offset, piece.offset + piece.length), release: () => {} }
      }

      /**
       * The manifest chunk a piece is exactly, when it is one: a whole tensor's pieces, and those of a
       * slice that is one row range of dim 0 (contiguous in the tensor) starting on a chunk boundary
       * (column-parallel splits of large tensors usually do). Undefined otherwise.
       */
      function tensorChunkOf (s: TensorSlice, piece: Piece): number | undefined {
        const t = manifest.tensors[s.index]!
        const rowBytes = t.shape.length > 0 ? t.bytes / t.shape[0]! : t.bytes
        const start = s.dim === null ? 0 : s.dim === 0 && s.ranges.length === 1 ? s.ranges[0]!.start * rowBytes : undefined
        if (start === undefined) return undefined
        const at = start + piece.offset
        return at % manifest.chunkBytes === 0 && piece.length === Math.min(manifest.chunkBytes, t.bytes - at) ? at / manifest.chunkBytes : undefined
      }

      /**
       * Fetches one piece into `dst`, verifies it and (into a file) writes it; false when the lane
       * should stop (the pull failed). Throws when the stream failed: the piece is back in the queue.
       */
      async function fetchPiece (stream: WeightStream, src: PullSource, from: string, piece: Piece, s: TensorSlice, dst: { range: HostRange, view: Buffer }, landed: () => void): Promise<boolean> {
        let crc: number | undefined
        const chunk = tensorChunkOf(s, piece)
        const timer = src.primary ? undefined : setTimeout(() => { schedule.drop(src, `no answer within ${pieceTimeoutMs} ms`); stream.close() }, pieceTimeoutMs)
        try {
          // A one-sided transport (UCX) reads the piece's source runs itself; the manifest checks a chunk of it.
          const t = manifest.tensors[s.index]!
          const reply = await stream.read({
            model: request.model, version, tensorIndex: s.index, dim: s.dim, ranges: s.ranges, byteOffset: piece.offset, byteLength: piece.length,
          }, dst.view, { range: dst.range, inManifest: chunk !== undefined, runs: () => sliceRuns({ name: t.name, shape: t.shape, elementBytes: dtypeBytes[t.dtype] }, s.dim, s.ranges, piece.offset, piece.length) })
          crc = reply.crc32c
          if (reply.via === 'ucx') ucxBytes += piece.length
        } catch (err) {
          schedule.retry(piece)
          // A peer that fails is dropped (its slices go to the primary); the pull goes on.
          if (!src.primary) throw err
          const code = (err as AgentError).code
          if (code === 'ERR_WEIGHTS_RETIRED' || code === 'ERR_WEIGHTS_NOT_FOUND') {
            // The source dropped the version: go on from the next holder (landed pieces stay), once per source.
            if (from !== source) { stream.close(); throw err }
            if (moveToFallback(err, 'weights source stopped serving the version: resuming from another holder')) { stream.close(); throw err }
          }
          // A primary that does not hold a tensor yet is itself pulling the version: not a source of record.
          if (code === 'ERR_WEIGHTS_RETIRED' || code === 'ERR_WEIGHTS_NOT_FOUND' || code === 'ERR_LAYOUT_INVALID' || code === 'ERR_DATA_CORRUPT' || code === 'ERR_WEIGHTS_NOT_HELD') fail(err as Error)
          throw err
        } finally {
          clearTimeout(timer)
        }
        bytesReceived += piece.length
        components.received?.(piece.length)
        const got = await checksum(dst.range)
        const onChunk = piece.offset % manifest.chunkBytes === 0 && piece.length === Math.min(manifest.chunkBytes, s.bytes - piece.offset)
        // A piece that is one of the tensor's chunks (a whole tensor's, or an aligned row range's): the committed
        // manifest's checksum. A partial source's slice windows: the checksum it recorded. Otherwise (a slice from
        // a full holder or a swarm peer) the checksum its source computed or recorded, sent with it. A one-sided
        // read (UCX) carries none: it is asked only for the manifest's chunks.
        const ofManifest = chunk !== undefined || (onChunk && partial !== undefined)
        const expected = chunk !== undefined
          ? manifest.tensors[s.index]!.chunkChecksums[chunk]!
          : ofManifest ? partial!.slices[piece.slice]!.chunkChecksums[piece.offset / manifest.chunkBytes]! : crc
        if (expected === undefined) { fail(new AgentError('ERR_WEIGHTS_PROTOCOL', `${from} sent ${s.name} bytes ${piece.offset}.. without a checksum`)); return false }
        if ((crc !== undefined && got !== crc) || got !== expected) {
          refetchedPieces++
          if (!src.primary) {
            // Checked against the publisher's manifest: a peer that serves a bad chunk serves no more.
            schedule.retry(piece)
            throw new AgentError('ERR_DATA_CORRUPT', `served ${s.name} bytes ${piece.offset}..${piece.offset + piece.length} with crc32c ${got.toString(16)}, ${ofManifest ? 'the manifest says' : 'its reply says'} ${expected.toString(16)}`)
          }
          logger.warn({ tensor: s.name, offset: piece.offset, length: piece.length, attempt: piece.attempts + 1 }, 'weights piece failed its checksum: refetching')
          if (++piece.attempts >= maxAttempts) {
            fail(new AgentError('ERR_DATA_CORRUPT', `${s.name} bytes ${piece.offset}..${piece.offset + piece.length} failed the checksum ${maxAttempts} times (crc32c ${got.toString(16)}, expected ${expected.toString(16)})`))
            return false
          }
          schedule.retry(piece)
          return true
        }
        landed()
        src.bytes += piece.length
        try {
          await file?.write(piece.slice, piece.offset, dst.range, got)
        } catch (err) {
          fail(err as Error)
          return false
        }
        doneBytes += piece.length
        request.onProgress?.(doneBytes, totalBytes)
        if (schedule.landed(piece)) {
          const storing = store(piece.slice)
          stores.add(storing)
          try {
            await storing
          } catch (err) {
            fail(err as Error)
            return false
          } finally {
            stores.delete(storing)
          }
        }
        return true
      }

      const workers = Array.from({ length: Math.min(request.streams, Math.max(1, schedule.remaining)) }, (_, i) =>
        connection(i === 0 ? first : undefined).catch(err => {
          // A connection that gives up fails the pull only if no other connection is left to finish it.
          logger.warn({ from: source, err: (err as Error).message }, 'weights connection gave up')
          return err as Error
        }))
      // Swarm peers of the version (whole pulls) or of the pull's layout (sliced pulls). Asked for again
      // every peerRefreshMs: pullers that start together learn of each other as their adverts spread.
      const peers: PullSource[] = []
      const peerTasks: Array<Promise<void>> = []
      /** Closes each peer's connections (pending requests reject): run when the pull ends. */
      const closePeers: Array<() => void> = []
      const discover = (): void => {
        if (request.peers === undefined || schedule.remaining === 0 || schedule.failure !== undefined) return
        for (const address of new Set(request.peers(version, swarmLayout))) {
          if (address === startedFrom || peers.some(p => p.address === address) || peers.filter(p => p.dropped === undefined).length >= maxPeers) continue
          const peer: PullSource = { address, primary: false, bytes: 0 }
          peers.push(peer)
          peerTasks.push(peerConnection(peer))
        }
      }
      discover()
      const discovery = setInterval(discover, options.peerRefreshMs ?? 250)
      discovery.unref()
      const settled = Promise.all(workers).then(results => {
        const lastError = results.find((r): r is Error => r instanceof Error)
        if (schedule.remaining > 0) fail(lastError ?? new AgentError('ERR_WEIGHTS_TRANSFER', `pull from ${source} stopped with ${schedule.remaining} pieces left`))
      })
      let pullError: Error | undefined
      try {
        await schedule.finished
        await Promise.all(stores)
      } catch (err) {
        pullError = err as Error
      } finally {
        fail(new AgentError('ERR_WEIGHTS_TRANSFER', 'pull finished')) // stops lanes still looping
        clearInterval(discovery)
        for (const close of closePeers) close()
        await settled.catch(() => {})
        await Promise.all(peerTasks)
        request.signal?.removeEventListener('abort', onAbort)
      }
      if (pullError !== undefined) {
        // Slices of a version that is gone, or from a source that sent corrupt bytes, are not kept; after a
        // transfer failure (source unreachable, the caller gone) they are, and a repeat fetches the rest.
        const code = (pullError as AgentError).code
        const unusable = code === 'ERR_WEIGHTS_RETIRED' || code === 'ERR_WEIGHTS_NOT_FOUND' || code === 'ERR_DATA_CORRUPT' || code === 'ERR_LAYOUT_INVALID'
        await file?.close(unusable)
        if (unusable) {
          if (adopted.length > 0) await sm.drop({ keys: adopted }).catch(dropErr => logger.warn({ err: (dropErr as Error).message }, 'could not drop the slices of a failed pull'))
        } else if (adopted.length > 0) {
          logger.info({ model: request.model, version, slices: adopted.length }, 'pull failed: the slices that landed are kept for a repeat')
        }
        throw pullError
      }

      const resultKeys: string[] = []
      const names: string[] = []
      const paddedShapes: Record<string, number[]> = {}
      for (let i = 0; i < slices.length; i++) {
        // A slice of 0 rows (a rank whose vocab part is all padding) stores nothing: only its padded shape is told.
        if (slices[i]!.bytes > 0) { resultKeys.push(keys[i]!); names.push(slices[i]!.name) }
        if (slices[i]!.paddedShape !== undefined) paddedShapes[keys[i]!] = slices[i]!.paddedShape!
      }
      const written = await file?.finish()
      if (components.versions !== undefined && file === undefined) {
        if (layout === undefined) await registerFullCopy(components.versions, manifest, keys)
        else await registerPartial(components.versions, manifest, layout, slices, keys, sliceSums, needed)
      }
      const seconds = (performance.now() - began) / 1000
      logger.info({ model: request.model, version, bytes: totalBytes, bytesReceived, seconds, streams: request.streams, refetchedPieces, reconnects, switchedTo, ...(written !== undefined ? { file: written } : {}) }, 'weights pulled')
      return {
        from: startedFrom, model: request.model, version, bytes: totalBytes, bytesReceived, seconds, tensors: slices.length,
        // Into a file, nothing is stored: no keys.
        keys: written === undefined ? resultKeys : [], names: written === undefined ? names : [], refetchedPieces, reconnects, switchedTo,
        ...(Object.keys(paddedShapes).length > 0 ? { paddedShapes } : {}),
        ...(written !== undefined ? { file: written } : {}),
        sources: Object.fromEntries([primary, ...peers].filter(p => p.bytes > 0).map(p => [p.address, p.bytes])),
        ...(peers.some(p => p.dropped !== undefined) ? { droppedSources: peers.filter(p => p.dropped !== undefined).map(p => ({ address: p.address, reason: p.dropped! })) } : {}),
        ...(ucxReports.length > 0 ? { ucx: ucxSummary(ucxBytes, ucxReports) } : {}),
      }
    } finally {
      endSeed()
      for (const s of scratches) s?.release()
      buffers?.dispose()
      await file?.close(false)
      first.close()
    }

    /** Into a file: the pieces of slices this agent holds as keys, copied from them (they were verified when stored). */
    async function copyStoredSlices (to: PullFile): Promise<void> {
      for (let i = 0; i < slices.length; i++) {
        if (!stored.has(keys[i]!) || slices[i]!.bytes === 0) continue
        for (const at of offsetsOf(i)) {
          if (to.has(i, at)) continue
          const bytes = await sm.readRange(keys[i]!, at, pieceLength(i, at))
          try { await to.write(i, at, bytes.range, await checksum(bytes.range)) } finally { bytes.release() }
        }
      }
    }
  }

  /** A whole version pulled here can be served from here (in memory: not written to NVMe, gone after a restart). */
  async function registerFullCopy (versions: VersionStore, manifest: WeightsManifest, keys: string[]): Promise<void> {
    await registerForServing(versions, manifest, 'pulled version not registered for serving', () =>
      versions.commit({ ...manifest, ownsKeys: true, durable: false, committedAtMs: Date.now(), tensors: manifest.tensors.map((t, i) => ({ ...t, key: keys[i]! })) }))
  }

  /**
   * A rank's slices pulled here are served from here to pullers of the same
   * (layout, rank) (in memory, like a full copy). Their checksums are taken
   * from the stored, verified bytes, on the manifest's chunk windows.
   */
  async function registerPartial (versions: VersionStore, manifest: WeightsManifest, layout: TargetLayout, slices: TensorSlice[], keys: string[], pulledSums: number[][], pulled: boolean[]): Promise<void> {
    await registerForServing(versions, manifest, 'pulled slices not registered for serving', async () => {
      const held: HeldSlice[] = []
      for (let i = 0; i < slices.length; i++) {
        const s = slices[i]!
        // Slices this pull stored were checksummed on their way through the window; others are read back.
        let sums: number[] = pulledSums[i]!
        if (s.bytes > 0 && !pulled[i]) {
          const pinned = await sm.readHost(keys[i]!)
          try { sums = await chunkChecksums(pinned.range, manifest.chunkBytes) } finally { pinned.release() }
        }
        held.push({ index: s.index, dim: s.dim, ranges: s.ranges.map(r => ({ start: r.start, count: r.count })), shape: s.shape, bytes: s.bytes, key: s.bytes > 0 ? keys[i]! : '', chunkChecksums: sums })
      }
      await versions.commit({
        ...manifest, ownsKeys: true, durable: false, committedAtMs: Date.now(), tensors: manifest.tensors.map(t => ({ ...t, key: '' })),
        partial: { layout: layoutId(layout), tp: layout.tp, rank: layout.rank, slices: held },
      })
    })
  }

  /**
   * Reserves the version and commits it; a failed commit gives the reservation
   * back and is only logged (the pull itself succeeded). Nothing is done when
   * this agent already knows the version (whole, or another rank's slices) or a newer one.
   */
  async function registerForServing (versions: VersionStore, manifest: WeightsManifest, failed: string, commit: () => Promise<unknown>): Promise<void> {
    let reservation
    try {
      reservation = versions.reserve(manifest.model, manifest.version)
    } catch {
      return
    }
    try {
      await commit()
    } catch (err) {
      reservation.release()
      logger.warn({ err }, failed)
    }
  }

  return {
    async pull (request) {
      const began = performance.now()
      for (let restarts = 0; ; restarts++) {
        try {
          return await pullOnce(request, began)
        } catch (err) {
          const retired = (err as AgentError).code === 'ERR_WEIGHTS_RETIRED'
          if (!retired || request.version !== latestVersion || restarts >= (options.latestRestarts ?? 3)) throw err
          logger.info({ model: request.model }, 'the version being pulled was retired: pulling the new latest')
        }
      }
    },
  }
}
