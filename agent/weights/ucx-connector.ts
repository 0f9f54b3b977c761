/**
 * Weight streams that read tensor bytes (whole or resharded) with UCX
 * one-sided gets (PROTOCOL.md "RDMA (UCX)"), wrapping authenticated TCP
 * streams: the manifest, HAVE, checksums and the fallback go over TCP.
 *
 * - The first read of a version on a stream asks the server
 *   (UCX_OPEN, over the authenticated TCP connection: an unauthenticated
 *   peer never sees a key) where each tensor is mapped, connects this
 *   agent's UCX worker to the server's and unpacks the keys. A server that
 *   refuses (no UCX, the version does not fit its pool, a partial holding)
 *   leaves the stream on TCP, with the reason logged and reported.
 * - A read is gets of its source runs (one for a manifest chunk or any
 *   contiguous slice window, one per row for a row-parallel slice, ...)
 *   straight into the puller's range, started together. A manifest chunk
 *   carries no checksum (`crc32c` undefined): the puller checks it against
 *   the manifest. Any other slice window asks the server over TCP, at the
 *   same time, for the checksum a READ of it would carry (CHECKSUM), so it
 *   is checked exactly as over TCP. Windows of runs shorter than
 *   `minRunBytes` on average (narrow column splits) are read over TCP: the
 *   server gathers them faster than one get per run.
 * - Retirement: the server closes every connection that opened the version
 *   (its mappings die with it), and the reconnected stream's HAVE or READ
 *   answers ERR_WEIGHTS_RETIRED, as over TCP; the first read of each tensor
 *   on a stream asks HAVE too. Bytes read before came from pinned, committed
 *   memory and were checked.
 * - A get that fails (the server died, its endpoint broke) closes the stream
 *   and rejects with ERR_WEIGHTS_TRANSFER, so the puller reconnects or moves
 *   on exactly as when a TCP connection drops. The TCP connection closing
 *   closes the endpoint too, which fails its gets: UCX cannot detect a dead
 *   peer over shared memory, and a get of a range the server unmapped is
 *   never answered over its software transports.
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { HostRange, UcxEndpoint, UcxRemoteKey, UcxWorker } from '../../native/index.ts'
import type { ByteRun } from './reshard.ts'
import type { WeightStream, WeightStreamConnector } from './transport.ts'

interface Opened {
  endpoint: UcxEndpoint
  keys: UcxRemoteKey[]
  addresses: bigint[]
  /** Closes the endpoint when the TCP connection closes. */
  watch?: NodeJS.Timeout
}

/** How often an endpoint looks whether its TCP connection closed (the server died or revoked the version), ms. */
const closedCheckMs = 200

/**
 * Average source-run bytes below which a gathered slice window is read over TCP (the server's native gather)
 * instead of one get per run. Measured here, 4 MiB windows, two processes: over shared memory gets of 512-byte
 * runs moved 0.48 GiB/s, of 2 KiB runs 1.7 GiB/s, the server's gather over TCP about 1 GiB/s.
 */
export const minRunBytes = 1024

export interface UcxConnectorOptions {
  /** Read over UCX also from a server UCX reaches only through its TCP transport (weights.ucxOverTcp). */
  ucxOverTcp: boolean
}

export function createUcxConnector (tcp: WeightStreamConnector, options: UcxConnectorOptions, components: { worker: () => UcxWorker, logger: Logger }): WeightStreamConnector {
  const { logger } = components
  return {
    async open (address, options) {
      return ucxStream(await tcp.open(address, options), address)
    },
  }

  function ucxStream (stream: WeightStream, address: string): WeightStream {
    /** The version opened for UCX on this stream ("model\0version"), and how that went. */
    let openedFor = ''
    let opened: Promise<Opened | undefined> | undefined
    let current: Opened | undefined
    let fallback: string | undefined
    /** The UCX transports of the last endpoint opened (kept for the report after the stream closed). */
    let transports: string[] | undefined
    /** Tensors of the opened version this stream has read (each was checked with HAVE first). */
    const checked = new Set<number>()

    const release = (): void => {
      if (current === undefined) return
      clearInterval(current.watch)
      for (const k of current.keys) k.destroy()
      current.endpoint.close()
      current = undefined
    }

    async function open (model: string, version: number): Promise<Opened | undefined> {
      let endpoint: UcxEndpoint | undefined
      try {
        const worker = components.worker()
        // How UCX reaches the server, asked before UCX_OPEN pins anything there.
        const serverWorker = await stream.ucxAddress!()
        endpoint = worker.connect(Buffer.from(serverWorker, 'hex'))
        const via = endpoint.transports()
        if (!options.ucxOverTcp && via.length > 0 && via.every(x => x.startsWith('tcp/'))) {
          throw new AgentError('ERR_UCX_UNAVAILABLE', `UCX reaches ${address} only through its TCP transport (${via.join(', ')}), slower than this agent's own TCP streams (weights.ucxOverTcp)`)
        }
        const reply = await stream.ucxOpen!(model, version)
        if (reply.worker !== serverWorker) throw new AgentError('ERR_WEIGHTS_PROTOCOL', `${address} answered UCX_OPEN with another worker address than UCX_ADDRESS`)
        current = { endpoint, keys: reply.tensors.map(t => worker.remoteKey(endpoint!, Buffer.from(t.rkey, 'hex'))), addresses: reply.tensors.map(t => BigInt(t.address)) }
        // The server closing the TCP connection (it died, or retired the version: its mappings are gone) closes the
        // endpoint, which fails the gets still waiting: UCX's software transports answer none for an unmapped range,
        // and over shared memory UCX cannot see the server die at all.
        const watched = current
        watched.watch = setInterval(() => { if (stream.closed) watched.endpoint.close() }, closedCheckMs)
        watched.watch.unref()
        transports = via
        logger.debug({ address, model, version, transports }, 'weights read over UCX')
        return current
      } catch (err) {
        endpoint?.close() // `current` is set last: nothing after it throws
        const code = (err as AgentError).code
        // A retired version or a broken connection is the pull's business, as over TCP. Anything else — the
        // source holds the version only in part or is still pulling it (a swarm seed), serves no UCX, cannot
        // pin it — leaves this stream on TCP, where the source answers as it always does.
        if (code === 'ERR_WEIGHTS_RETIRED' || code === 'ERR_WEIGHTS_TRANSFER') throw err
        fallback = (err as Error).message
        logger.warn({ address, model, version, reason: fallback }, 'weights not read over UCX from this source: reading over TCP')
        return undefined
      }
    }

    /** One get of `runs`; a failed one closes the stream (the puller reconnects, as when TCP drops). */
    async function get (u: Opened, index: number, runs: ByteRun[], target: HostRange): Promise<void> {
      try {
        await components.worker().get(u.endpoint, u.keys[index]!, u.addresses[index]!, target, runs)
      } catch (err) {
        stream.close()
        throw new AgentError('ERR_WEIGHTS_TRANSFER', `UCX read from ${address}: ${(err as Error).message}`, { cause: err })
      }
    }

    return {
      get closed () { return stream.closed },
      manifest: (model, version, options) => stream.manifest(model, version, options),
      have: (model, version, layout) => stream.have(model, version, layout),
      checksum: req => stream.checksum!(req),
      async read (req, into, target) {
        if (target === undefined || stream.ucxOpen === undefined || stream.ucxAddress === undefined || stream.checksum === undefined) return stream.read(req, into)
        const id = `${req.model}\u0000${req.version}`
        // This stream reads this version over TCP (the server refused UCX): no runs to compute.
        if (id === openedFor && fallback !== undefined) return stream.read(req, into)
        const runs = target.runs()
        if (!target.inManifest && req.byteLength / runs.length < minRunBytes) return stream.read(req, into)
        if (id !== openedFor) {
          release()
          openedFor = id
          fallback = undefined
          checked.clear()
          opened = open(req.model, req.version)
        }
        const u = await opened
        if (u === undefined || u.endpoint !== current?.endpoint) return stream.read(req, into)
        if (req.tensorIndex >= u.addresses.length) throw new AgentError('ERR_WEIGHTS_PROTOCOL', `UCX_OPEN of ${req.model} v${req.version} mapped ${u.addresses.length} tensors, not tensor ${req.tensorIndex}`)
        if (!checked.has(req.tensorIndex)) {
          await stream.have(req.model, req.version) // retired since: ERR_WEIGHTS_RETIRED, as a TCP READ would say
          checked.add(req.tensorIndex)
        }
        if (target.inManifest) {
          await get(u, req.tensorIndex, runs, target.range)
          return { crc32c: undefined, via: 'ucx' }
        }
        const [crc32c] = await Promise.all([stream.checksum(req), get(u, req.tensorIndex, runs, target.range)])
        return { crc32c, via: 'ucx' }
      },
      ucxAddress: () => stream.ucxAddress!(),
      ucxOpen: (model, version) => stream.ucxOpen!(model, version),
      ucxReport () {
        if (transports !== undefined) return { transports }
        return fallback !== undefined ? { fallback } : undefined
      },
      close () {
        release()
        stream.close()
      },
    }
  }
}
