/**
 * UCX one-sided transfers (native/src/ucx_transport.cc), as promises. A
 * worker owns a UCP context and worker whose progress is event driven (a
 * native waiter sleeps on the worker's event fd: no CPU while idle). The
 * serving side maps host ranges and hands out their remote key and address;
 * the reading side connects to the server's worker address, unpacks the key
 * and reads with `get` straight into its own host memory. UCX chooses the
 * transport: RC/DC verbs on InfiniBand and RoCE, shared memory within a node,
 * TCP otherwise; `UCX_TLS` / `UCX_NET_DEVICES` in the environment restrict it.
 *
 * Contracts: a get's destination range stays referenced until it settles; a
 * get on an endpoint whose peer died rejects (ERR_UCX), never hangs; `close`
 * ends everything (pending gets reject) and is idempotent. Main thread only.
 */
import { AgentError } from '../core/errors.ts'
import { checkHostRange, type HostRange } from './host-memory.ts'
import type { NativeBinding, NativeUcxWorker } from './native-binding.ts'
import { callNative } from './native-error.ts'

export interface UcxInfo {
  /** The addon was built with UCX (libucx-dev was found at build time). */
  compiled: boolean
  /** UCX library version, '' when not compiled. */
  version: string
  /** Every (transport, device) the machine's UCX offers, e.g. rc_mlx5/mlx5_0:1, tcp/eth0, posix/memory. */
  transports: Array<{ transport: string, device: string }>
}

/** Host memory readable by peers that hold its remote key. */
export interface UcxMapping {
  /** Packed remote key: what a peer needs (with `address`) to read the range. */
  readonly rkey: Buffer
  /** The range's address in this process, as peers name it in gets. */
  readonly address: bigint
  readonly length: number
}

export interface UcxEndpoint {
  /**
   * Whether UCX detects the peer's death on it (a get then rejects): true on
   * network transports; false where UCX cannot (shared memory in UCX 1.13),
   * and then the caller bounds its gets and closes the endpoint when the peer
   * is gone (a closed endpoint's gets reject).
   */
  readonly peerFailure: boolean
  /** The UCX transports (transport/device) its lanes use, from UCX's own description. */
  transports(): string[]
  /** Why it broke (UCX status), or null while healthy. */
  failure(): string | null
  /** Closes it; gets in flight on it reject. Idempotent. */
  close(): void
}

/** A contiguous run of remote bytes, at `offset` from a get's remote address. */
export interface UcxRun { offset: number, length: number }

export interface UcxRemoteKey {
  destroy(): void
}

export interface UcxWorker {
  /** This worker's UCP address: what a peer passes to `connect`. */
  address(): Buffer
  connect(peerAddress: Uint8Array): UcxEndpoint
  /** Makes `range` readable by peers (its rkey and address); until `unmap`. */
  map(range: HostRange): UcxMapping
  /** Peers' keys for the mapping are dead from now on. Idempotent. */
  unmap(mapping: UcxMapping): void
  /** A peer's packed remote key, usable for gets on `endpoint` until destroyed or the endpoint closes. */
  remoteKey(endpoint: UcxEndpoint, rkey: Uint8Array): UcxRemoteKey
  /**
   * Reads `into.length` bytes at the peer's `remoteAddress` into `into`; with `runs`, those runs (offsets from
   * `remoteAddress`, in order, their lengths adding up to `into.length`) one after another into `into`: a
   * slice gathered from a remote tensor in one call (one UCX request per run, settled when all are).
   */
  get(endpoint: UcxEndpoint, key: UcxRemoteKey, remoteAddress: bigint, into: HostRange, runs?: readonly UcxRun[]): Promise<void>
  close(): void
}

interface EndpointHandle extends UcxEndpoint { readonly id: number, closed: boolean }
interface KeyHandle extends UcxRemoteKey { readonly id: number, readonly endpoint: EndpointHandle, destroyed: boolean }

/** Transports named in UCX's endpoint description ("lane[0]:  2:tcp/lo.0 md[1] ..."). */
export function endpointTransports (description: string): string[] {
  const found = new Set<string>()
  for (const m of description.matchAll(/lane\[\d+\]:\s+\d+:([A-Za-z0-9_]+)\/([^\s]+)/g)) found.add(`${m[1]}/${m[2]!.replace(/\.\d+$/, '')}`)
  return [...found]
}

/** `runs` as the native (offset, bytes) pairs; ERR_ARG_INVALID unless they are whole, non-empty and add up to `length`. */
function runPairs (runs: readonly UcxRun[], length: number): Float64Array {
  if (runs.length === 0) throw new AgentError('ERR_ARG_INVALID', 'a UCX get needs at least one run')
  const pairs = new Float64Array(runs.length * 2)
  let total = 0
  runs.forEach((r, i) => {
    if (!Number.isSafeInteger(r.offset) || r.offset < 0 || !Number.isSafeInteger(r.length) || r.length < 1) throw new AgentError('ERR_ARG_INVALID', `UCX get run ${i} (offset ${r.offset}, ${r.length} bytes) is not a whole offset >= 0 and length >= 1`)
    pairs[2 * i] = r.offset
    pairs[2 * i + 1] = r.length
    total += r.length
  })
  if (total !== length) throw new AgentError('ERR_ARG_INVALID', `UCX get runs add up to ${total} bytes, the destination has ${length}`)
  return pairs
}

export function createUcxWorker (binding: NativeBinding): UcxWorker {
  if (binding.UcxWorker === undefined) {
    throw new AgentError('ERR_UCX_UNAVAILABLE', 'this agent\'s native addon was built without UCX: install libucx-dev (Debian/Ubuntu) and rebuild with npm run build:native')
  }
  const pending = new Map<number, { resolve: () => void, reject: (err: Error) => void, what: string, endpoint: number }>()
  let nextRequest = 1
  let closed = false
  const onCompletions = (ids: number[], errors: string[]): void => {
    for (let i = 0; i < ids.length; i++) {
      const request = pending.get(ids[i]!)
      if (request === undefined) continue
      pending.delete(ids[i]!)
      if (errors[i] === '') request.resolve()
      else request.reject(new AgentError('ERR_UCX', `${request.what} failed: ${errors[i]}`))
    }
  }
  const failPending = (which: (p: { endpoint: number }) => boolean, why: string): void => {
    for (const [id, request] of pending) {
      if (!which(request)) continue
      pending.delete(id)
      request.reject(new AgentError('ERR_UCX', `${request.what} failed: ${why}`))
    }
  }
  const native: NativeUcxWorker = callNative(() => new binding.UcxWorker!(onCompletions))
  const mappings = new Map<UcxMapping, number>()
  const open = (): void => { if (closed) throw new AgentError('ERR_RESOURCE_CLOSED', 'the UCX worker is closed') }

  return {
    address: () => { open(); return callNative(() => native.address()) },
    connect (peerAddress) {
      open()
      const { id, peerFailure } = callNative(() => native.connect(Buffer.from(peerAddress.buffer, peerAddress.byteOffset, peerAddress.byteLength)))
      const endpoint: EndpointHandle = {
        id,
        peerFailure,
        closed: false,
        transports: () => endpoint.closed || closed ? [] : endpointTransports(callNative(() => native.endpointInfo(id))),
        failure: () => endpoint.closed || closed ? 'closed' : (callNative(() => native.endpointFailure(id)) || null),
        close: () => {
          if (endpoint.closed || closed) return
          endpoint.closed = true
          callNative(() => native.closeEndpoint(id))
          // A forced close told its gets (canceled); without peer failure handling UCX keeps them: failed here.
          failPending(p => p.endpoint === id, 'its endpoint was closed')
        },
      }
      return endpoint
    },
    map (range) {
      open()
      checkHostRange(range, 'UCX mapping')
      const { id, rkey, address } = callNative(() => native.map(range.memory.region, range.offset, range.length))
      const mapping: UcxMapping = { rkey, address, length: range.length }
      mappings.set(mapping, id)
      return mapping
    },
    unmap (mapping) {
      const id = mappings.get(mapping)
      if (id === undefined || closed) return
      mappings.delete(mapping)
      callNative(() => native.unmap(id))
    },
    remoteKey (endpoint, rkey) {
      open()
      const ep = endpoint as EndpointHandle
      if (ep.closed) throw new AgentError('ERR_RESOURCE_CLOSED', 'the UCX endpoint is closed')
      const id = callNative(() => native.unpackRkey(ep.id, Buffer.from(rkey.buffer, rkey.byteOffset, rkey.byteLength)))
      const key: KeyHandle = {
        id,
        endpoint: ep,
        destroyed: false,
        destroy: () => {
          if (key.destroyed || ep.closed || closed) return
          key.destroyed = true
          callNative(() => native.destroyRkey(id))
        },
      }
      return key
    },
    get (endpoint, key, remoteAddress, into, runs) {
      open()
      checkHostRange(into, 'UCX get destination')
      const pairs = runs === undefined ? undefined : runPairs(runs, into.length)
      const ep = endpoint as EndpointHandle
      const k = key as KeyHandle
      if (ep.closed) return Promise.reject(new AgentError('ERR_RESOURCE_CLOSED', 'the UCX endpoint is closed'))
      if (k.destroyed || k.endpoint !== ep) return Promise.reject(new AgentError('ERR_ARG_INVALID', 'the remote key is destroyed or belongs to another endpoint'))
      const id = nextRequest++
      const settled = new Promise<void>((resolve, reject) => {
        pending.set(id, { resolve, reject, what: `UCX get of ${into.length} bytes at 0x${remoteAddress.toString(16)}`, endpoint: ep.id })
      })
      try {
        callNative(() => native.get(id, ep.id, k.id, remoteAddress, into.memory.region, into.offset, into.length, pairs))
      } catch (err) {
        pending.delete(id)
        return Promise.reject(err)
      }
      return settled
    },
    close () {
      if (closed) return
      closed = true
      callNative(() => native.close())
      // Anything not told by the native close (it tells every get it completed) is failed here.
      failPending(() => true, 'the UCX worker closed')
    },
  }
}
