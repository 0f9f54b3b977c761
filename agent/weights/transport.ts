/**
 * The transport interface of the weight data plane (DESIGN "Weight data
 * plane"). The puller and the service see only these interfaces; `tcp-*.ts`
 * implements them over authenticated TCP connections (PROTOCOL.md), and
 * `ucx-connector.ts` wraps those: after the same handshake, tensor bytes
 * are read one-sided with UCX (RDMA where the hardware has it) from ranges
 * the server mapped for the connection (UCX_OPEN) — a gathered slice as one
 * get per source run — and everything else goes over the TCP connection.
 */
import type { HostRange } from '../../native/index.ts'
import type { Have, ReadRequest, UcxOpenReply } from './protocol.ts'
import type { ByteRun } from './reshard.ts'
import type { WeightsManifest } from './version-store.ts'
import type { ActivePull } from '../api/wire/weights.ts'

/** A read's bytes as a host range (where a one-sided transport puts them) and the source runs of the tensor they are. */
export interface ReadTarget {
  range: HostRange
  /** The tensor's byte runs, in order, that make the read's bytes (reshard.ts sliceRuns); computed when asked. */
  runs(): ByteRun[]
  /** The bytes are exactly one of the manifest's chunks (the caller checks them against the manifest). */
  inManifest: boolean
}

/** One connection to a weight server. Requests on one stream are answered in order. */
export interface WeightStream {
  /** The committed manifest of `version` (-1 = latest). */
  manifest(model: string, version: number, options?: { signal?: AbortSignal }): Promise<WeightsManifest>
  /**
   * Reads `request.byteLength` bytes straight into `into` (exactly that long;
   * typically a view of pool memory) and resolves with the crc32c the server
   * sent for them. `target` is the same bytes as a host range, with the
   * tensor's byte runs they are gathered from: a one-sided transport (UCX)
   * reads the runs into it and resolves with `via: 'ucx'` — with `crc32c`
   * undefined when `target.inManifest` (the bytes are one of the manifest's
   * chunks: the caller checks them against the manifest alone), else with the
   * server's checksum of the same bytes (CHECKSUM). Rejects with
   * ERR_WEIGHTS_RETIRED / ERR_WEIGHTS_NOT_FOUND / ERR_WEIGHTS_PROTOCOL /
   * ERR_WEIGHTS_TRANSFER (connection lost).
   */
  read(request: ReadRequest, into: Buffer, target?: ReadTarget): Promise<{ crc32c: number | undefined, via?: 'ucx' }>
  /** CHECKSUM (PROTOCOL.md op 6): the crc32c a READ of `request` would carry, without its bytes. */
  checksum?(request: ReadRequest): Promise<number>
  /** UCX_ADDRESS (PROTOCOL.md op 7): the server's UCP worker address (hex), to see how UCX would reach it. */
  ucxAddress?(): Promise<string>
  /** UCX_OPEN (PROTOCOL.md "RDMA (UCX)"): where the server mapped each tensor of exact `version` for one-sided reads. */
  ucxOpen?(model: string, version: number): Promise<UcxOpenReply>
  /** Which UCX transports carried this stream's reads, or why it read over TCP; undefined when UCX was not tried. */
  ucxReport?(): { transports: string[] } | { fallback: string } | undefined
  /**
   * What the server holds of exact `version` (every tensor for a full holder; a swarm seed: what arrived so
   * far, and what it is fetching); with `layout` (a layout id), of that (layout, rank)'s slices: a full
   * holder or a whole seed tells its tensors (it serves any slice of them), a sliced seed its slices.
   */
  have(model: string, version: number, layout?: string): Promise<Have>
  /** Closes the connection; pending requests reject. Idempotent. */
  close(): void
  readonly closed: boolean
}

export interface WeightStreamConnector {
  /** Connects and authenticates; ERR_WEIGHTS_AUTH when the server refuses our key or proves none. */
  open(address: string, options?: { signal?: AbortSignal }): Promise<WeightStream>
}

export type { ActivePull }

export interface WeightServer {
  start(): Promise<void>
  stop(): Promise<void>
  /** host:port the server listens on (after start). */
  readonly address: string
  activePulls(): ActivePull[]
  counters(): WeightServerCounters
}

/** The data server's totals since start, and its connections now. */
export interface WeightServerCounters {
  /** Bytes of tensor data sent in answer to read requests (frame headers and manifests not counted). */
  servedBytes: number
  /** Connections accepted. */
  accepted: number
  /** Connections closed before authentication: handshake timeout, wrong key, evicted, full. */
  refused: number
  /** Connections in their handshake now. */
  pending: number
  /** Authenticated connections now. */
  authenticated: number
  /** READs of NVMe chunks answered by a read already in flight or kept in the serve window (serve-read-window.ts). */
  sharedReads: number
  /** Pool bytes the serve window holds now (chunks kept or being read from NVMe). */
  windowBytes: number
}
