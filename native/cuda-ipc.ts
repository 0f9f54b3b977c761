/**
 * Client device memory reached through CUDA IPC (DESIGN: "data never travels
 * in JSON"). A client sends the IPC handle of its allocation's base plus a
 * byte offset; the agent opens the handle (shared per device and handle, with
 * reference counts) and copies between that memory and host ranges on its
 * own streams. Device memory is never exposed to JavaScript as a Buffer.
 */
import { AgentError } from '../core/errors.ts'
import { checkHostRange, type HostRange } from './host-memory.ts'
import type { NativeBinding, NativeDeviceMapping } from './native-binding.ts'
import { awaitNative, callNative, checkBytes, checkInteger, checkRange } from './native-error.ts'

export const cudaIpcHandleBytes = 64
/** PyTorch's shareable handle (storage._share_cuda_()[1]): version byte, type byte, 64-byte handle. */
export const torchShareableHandleBytes = 66

export interface IpcHandle {
  /** The raw cudaIpcMemHandle_t of the allocation's base. */
  bytes: Uint8Array
  format: 'cudaIpcMemHandle' | 'torch'
}

/**
 * Accepts a raw 64-byte cudaIpcMemHandle_t, or PyTorch's 66-byte form as
 * CUDACachingAllocator::shareIpcHandle writes it: SHAREABLE_HANDLE_VERSION
 * (1 or 2), the type 'c' (cudaMalloc segment) and the handle of the
 * segment's base block. The storage's offset inside that segment is the
 * separate `storage_offset_bytes` PyTorch returns next to it. Type 'e'
 * (expandable segments) carries driver handles, not a cudaIpcMemHandle_t,
 * and is rejected.
 */
export function parseIpcHandle (handle: Uint8Array): IpcHandle {
  if (!(handle instanceof Uint8Array)) throw new AgentError('ERR_ARG_INVALID', 'the IPC handle must be bytes')
  if (handle.length === cudaIpcHandleBytes) return { bytes: handle, format: 'cudaIpcMemHandle' }
  if (handle.length === torchShareableHandleBytes) {
    const version = handle[0]!
    const type = String.fromCharCode(handle[1]!)
    if (version !== 1 && version !== 2) {
      throw new AgentError('ERR_ARG_INVALID', `unsupported PyTorch shareable handle version ${version}`)
    }
    if (type === 'e') {
      throw new AgentError('ERR_ARG_INVALID', 'PyTorch expandable-segment handles cannot be opened with CUDA IPC; ' +
        'run the client with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False')
    }
    if (type !== 'c') throw new AgentError('ERR_ARG_INVALID', `unknown PyTorch shareable handle type '${type}'`)
    return { bytes: handle.subarray(2), format: 'torch' }
  }
  throw new AgentError('ERR_ARG_INVALID',
    `an IPC handle has ${cudaIpcHandleBytes} bytes (cudaIpcMemHandle_t) or ${torchShareableHandleBytes} (PyTorch), ` +
    `got ${handle.length}`)
}

export interface DeviceMemory {
  readonly device: number
  /** Bytes from the handle's base to the end of the allocation; 0 when the driver does not say. */
  readonly sizeBytes: number
  readonly mapping: NativeDeviceMapping
  /** Drops this reference; the handle closes after the last reference and copy. Idempotent. */
  close (): void
}

/** [offset, offset + length) of a client's device allocation. */
export interface DeviceRange {
  readonly memory: DeviceMemory
  readonly offset: number
  readonly length: number
}

export interface DeviceCopyOptions {
  /** Bytes per cudaMemcpyAsync. Default 64 MiB. */
  chunkBytes?: number
  /**
   * A 64-byte cudaIpcEventHandle_t the producer recorded after writing (PyTorch's
   * `_share_cuda_()` event handle when event_sync_required is true); the agent's
   * stream waits for it before copying.
   */
  waitEvent?: Uint8Array
}

/** Why CUDA cannot be used, or null when it can. */
export type CudaUnavailableReason = string | null

function cudaEntryPoints (binding: NativeBinding, unavailable: CudaUnavailableReason) {
  const open = binding.cudaOpenIpcHandle
  const copy = binding.cudaCopy
  if (unavailable !== null || open === undefined || copy === undefined) {
    throw new AgentError('ERR_CUDA_UNAVAILABLE', `CUDA is not available: ${unavailable ?? 'built without CUDA'}`)
  }
  return { open, copy }
}

export function openDeviceMemory (binding: NativeBinding, unavailable: CudaUnavailableReason,
  options: { device: number, handle: Uint8Array }): DeviceMemory {
  const { open } = cudaEntryPoints(binding, unavailable)
  const device = checkInteger(options.device, 'device', 0, 1023)
  const { bytes } = parseIpcHandle(options.handle)
  const mapping = callNative(() => open(device, bytes))
  const info = callNative(() => mapping.info())
  return { device, sizeBytes: info.sizeBytes, mapping, close: () => mapping.close() }
}

function checkDeviceRange (range: DeviceRange): void {
  checkBytes(range.offset, 'device offset')
  checkBytes(range.length, 'device length')
  if (range.memory.sizeBytes > 0) checkRange(range.offset, range.length, range.memory.sizeBytes, 'device allocation')
}

async function copyDevice (binding: NativeBinding, unavailable: CudaUnavailableReason, toDevice: boolean,
  device: DeviceRange, host: HostRange, options: DeviceCopyOptions): Promise<void> {
  const { copy } = cudaEntryPoints(binding, unavailable)
  checkDeviceRange(device)
  checkHostRange(host, 'host')
  if (device.length !== host.length) {
    throw new AgentError('ERR_ARG_INVALID', `device length ${device.length} differs from host length ${host.length}`)
  }
  const chunkBytes = checkBytes(options.chunkBytes ?? 64 * 2 ** 20, 'chunkBytes', 4096)
  const { waitEvent } = options
  if (waitEvent !== undefined && (!(waitEvent instanceof Uint8Array) || waitEvent.length !== 64)) {
    throw new AgentError('ERR_ARG_INVALID', 'waitEvent must be a 64-byte cudaIpcEventHandle_t')
  }
  await awaitNative(() => copy(toDevice, device.memory.mapping, device.offset, host.memory.region, host.offset,
    host.length, chunkBytes, waitEvent))
}

/** Copies device bytes into a host range; settles after the agent's stream completed. */
export async function copyDeviceToHost (binding: NativeBinding, unavailable: CudaUnavailableReason,
  src: DeviceRange, dst: HostRange, options: DeviceCopyOptions = {}): Promise<void> {
  await copyDevice(binding, unavailable, false, src, dst, options)
}

/** Copies a host range into device memory; settles after the agent's stream completed. */
export async function copyHostToDevice (binding: NativeBinding, unavailable: CudaUnavailableReason,
  src: HostRange, dst: DeviceRange, options: DeviceCopyOptions = {}): Promise<void> {
  await copyDevice(binding, unavailable, true, dst, src, options)
}
