/**
 * The only module that loads the native addon. It exports `capabilities`
 * (what works on this machine) and the bulk-data API with the addon bound in.
 * Importing never throws: when the addon is missing or broken,
 * `capabilities.addon.loaded` is false and every call throws one
 * ERR_NATIVE_UNAVAILABLE error that says how to fix it.
 */
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { AgentError } from '../core/errors.ts'
import * as cudaIpc from './cuda-ipc.ts'
import type { DeviceCopyOptions, DeviceMemory, DeviceRange } from './cuda-ipc.ts'
import * as directFile from './direct-file.ts'
import type { DirectFile, OpenFileOptions } from './direct-file.ts'
import * as hostCopy from './host-copy.ts'
import type { GatherShape, ThreadOptions } from './host-copy.ts'
import { checkHostRange, type HostRange } from './host-memory.ts'
import * as hostPool from './host-pool.ts'
import type { HostPool, HostPoolOptions } from './host-pool.ts'
import type { NativeBinding, NativeCudaInfo, NativeFileInfo } from './native-binding.ts'
import { awaitNative, callNative } from './native-error.ts'
import * as sharedMemory from './shared-memory.ts'
import type { SharedMemoryObject } from './shared-memory.ts'
import * as unixSocket from './unix-socket.ts'
import type { PeerCredentials } from './unix-socket.ts'
import * as ucx from './ucx.ts'
import type { UcxInfo, UcxWorker } from './ucx.ts'

export type { Extent, FragmentationReport } from './extent-allocator.ts'
export { defaultAlignment, ExtentAllocator } from './extent-allocator.ts'
export type { DeviceCopyOptions, DeviceMemory, DeviceRange, IpcHandle } from './cuda-ipc.ts'
export { parseIpcHandle } from './cuda-ipc.ts'
export type { DirectFile, OpenFileOptions, TransferOptions } from './direct-file.ts'
export type { GatherShape, ThreadOptions } from './host-copy.ts'
export type { HostMemory, HostRange } from './host-memory.ts'
export type { HostPool, HostPoolInfo, HostPoolOptions } from './host-pool.ts'
export type { NativeFileInfo, NativeTransferResult } from './native-binding.ts'
export type { SharedMemoryObject } from './shared-memory.ts'
export type { PeerCredentials } from './unix-socket.ts'
export type { UcxEndpoint, UcxInfo, UcxMapping, UcxRemoteKey, UcxRun, UcxWorker } from './ucx.ts'

const addonFile = 'agentd_native.node'

/** Where a built addon may be: beside this file (sources) or in the source tree (dist/native/). */
function addonCandidates (): string[] {
  const override = process.env.AGENTD_NATIVE_ADDON
  if (override !== undefined && override !== '') return [override]
  return [
    fileURLToPath(new URL(`./build/Release/${addonFile}`, import.meta.url)),
    fileURLToPath(new URL(`../../native/build/Release/${addonFile}`, import.meta.url)),
  ]
}

interface LoadResult {
  binding: NativeBinding | null
  path: string | null
  error: AgentError | null
}

function loadAddon (): LoadResult {
  const candidates = addonCandidates()
  const path = candidates.find((candidate) => existsSync(candidate))
  const fix = 'run `npm run build:native` in the agentd checkout (needs python3, make and a C++ compiler)'
  if (path === undefined) {
    return {
      binding: null,
      path: null,
      error: new AgentError('ERR_NATIVE_UNAVAILABLE',
        `the agentd native addon is not built (looked for ${candidates.join(', ')}); ${fix}`),
    }
  }
  try {
    const require = createRequire(import.meta.url)
    return { binding: require(path) as NativeBinding, path, error: null }
  } catch (cause) {
    const reason = cause instanceof Error ? cause.message : String(cause)
    return {
      binding: null,
      path,
      error: new AgentError('ERR_NATIVE_UNAVAILABLE',
        `the agentd native addon at ${path} failed to load (${reason}); ${fix}`, { cause }),
    }
  }
}

const loaded = loadAddon()

function binding (): NativeBinding {
  if (loaded.binding === null) throw loaded.error!
  return loaded.binding
}

// ---- capabilities ----

export interface Capabilities {
  addon: { loaded: boolean, path: string | null, error: string | null }
  /** As the addon reports it (see NativeCudaInfo); when the addon is missing, compiled/available false with its load error. */
  cuda: NativeCudaInfo
  /** UCX (RDMA and friends for weight transfer): compiled in or not, its version, the transports this machine offers. */
  ucx: UcxInfo
  /**
   * O_DIRECT is used per file where the filesystem takes it; whether a given
   * directory's does is `probeDirectIo(dir)`, and each file's `info()`.
   */
  directIo: { available: boolean, reason: string | null }
  hugePages: {
    /** Size of a hugetlbfs page, bytes (0 = unknown). */
    hugetlbPageBytes: number
    hugetlbPagesFree: number
    transparent: 'always' | 'madvise' | 'never' | 'unknown'
  }
  /** RLIMIT_MEMLOCK soft limit, bytes; Infinity when unlimited. */
  memlockLimitBytes: number
  /** CAP_IPC_LOCK lets this process lock memory beyond memlockLimitBytes. */
  memlockUnlimitedByCapability: boolean
  crc32c: 'sse4.2' | 'table' | null
  /** Native threads for copies and checksums. */
  cpuThreads: number
  ioMaxQueueDepth: number
}

function readText (path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return ''
  }
}

function probeHugePages (): Capabilities['hugePages'] {
  const meminfo = readText('/proc/meminfo')
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(meminfo)?.[1] ?? 0)
  const thp = /\[(always|madvise|never)\]/.exec(readText('/sys/kernel/mm/transparent_hugepage/enabled'))?.[1]
  return {
    hugetlbPageBytes: field('Hugepagesize') * 1024,
    hugetlbPagesFree: field('HugePages_Free'),
    transparent: (thp ?? 'unknown') as Capabilities['hugePages']['transparent'],
  }
}

function hasCapIpcLock (): boolean {
  const capEff = /^CapEff:\s+([0-9a-f]+)/m.exec(readText('/proc/self/status'))?.[1]
  return capEff !== undefined && (BigInt(`0x${capEff}`) >> 14n & 1n) === 1n
}

function probeCapabilities (): Capabilities {
  const common = {
    addon: { loaded: loaded.binding !== null, path: loaded.path, error: loaded.error?.message ?? null },
    hugePages: probeHugePages(),
    memlockUnlimitedByCapability: hasCapIpcLock(),
  }
  if (loaded.binding === null) {
    const reason = loaded.error!.message
    return {
      ...common,
      cuda: { compiled: false, available: false, reason, runtimeVersion: 0, driverVersion: 0, devices: [] },
      ucx: { compiled: false, version: '', transports: [] },
      directIo: { available: false, reason },
      memlockLimitBytes: 0,
      crc32c: null,
      cpuThreads: 0,
      ioMaxQueueDepth: 0,
    }
  }
  const native = loaded.binding.probeCapabilities()
  return {
    ...common,
    cuda: native.cuda,
    ucx: loaded.binding.ucxInfo(),
    directIo: process.platform === 'linux'
      ? { available: true, reason: null }
      : { available: false, reason: `O_DIRECT is not supported on ${process.platform}` },
    memlockLimitBytes: native.memlock.soft,
    crc32c: native.crc32cHardware ? 'sse4.2' : 'table',
    cpuThreads: native.cpuThreads,
    ioMaxQueueDepth: native.ioMaxQueueDepth,
  }
}

/** What works on this machine, probed once when this module is first imported. */
export const capabilities: Readonly<Capabilities> = Object.freeze(probeCapabilities())

const cudaUnavailable = (): string | null => capabilities.cuda.available ? null : capabilities.cuda.reason

// ---- API with the addon bound in ----

/** Reserves the pinned host pool (see HostPoolOptions); ERR_MEMLOCK_LIMIT says how to raise the limit. */
export async function createHostPool (options: HostPoolOptions): Promise<HostPool> {
  return await hostPool.createHostPool(binding(), options)
}

/**
 * A Buffer over a host range, no copy (for socket writes of pool or shm
 * bytes). The caller keeps the range allocated or pinned while the Buffer is in use.
 */
export function viewHostRange (range: HostRange): Buffer {
  checkHostRange(range, 'range')
  return range.memory.viewBytes(range.offset, range.length)
}

/** Maps /dev/shm/<name>; ERR_SHM_NOT_FOUND / ERR_SHM_TOO_SMALL. */
export function openSharedMemory (name: string, options: { minBytes?: number } = {}): SharedMemoryObject {
  return sharedMemory.openSharedMemory(binding(), name, options)
}

/**
 * Faults the pages of a range in for writing on a native thread
 * (MADV_POPULATE_WRITE), so later passes over it take no page faults: a
 * freshly mapped 512 MiB shm object costs ~131k faults on first touch; and a
 * shared-memory object its filesystem cannot hold fails here (ERR_SYSTEM),
 * not as a SIGBUS at a later write. Resolves false, having allocated
 * nothing, on a kernel without MADV_POPULATE_WRITE (Linux < 5.14).
 */
export async function populateHostRange (range: HostRange): Promise<boolean> {
  checkHostRange(range, 'range')
  return await awaitNative(() => binding().populateRegion(range.memory.region, range.offset, range.length))
}

/** Copies `src` into `dst` on native threads. */
export async function copyHost (dst: HostRange, src: HostRange, options: ThreadOptions = {}): Promise<void> {
  await hostCopy.copyHostRange(binding(), dst, src, options)
}

/**
 * A strided gather on native threads: `runs` runs of `runBytes` bytes,
 * `srcStride` apart from `src.offset`, packed into `dst` (e.g. a row-parallel
 * slice of a weight matrix into a contiguous reply buffer).
 */
export async function gatherHost (dst: HostRange, src: HostRange, shape: GatherShape, options: ThreadOptions = {}): Promise<void> {
  await hostCopy.gatherHostRuns(binding(), dst, src, shape, options)
}

/** A single plain memcpy of the same bytes (benchmark baseline). */
export async function memcpyBaseline (dst: HostRange, src: HostRange): Promise<void> {
  await hostCopy.memcpyBaseline(binding(), dst, src)
}

/** CRC-32C (unsigned 32-bit) of a host range, on native threads. */
export async function checksum (range: HostRange, options: ThreadOptions = {}): Promise<number> {
  return await hostCopy.checksumHostRange(binding(), range, options)
}

/** CRC-32C of JavaScript-held bytes, off the event loop. */
export async function checksumBytes (bytes: Uint8Array): Promise<number> {
  return await hostCopy.checksumBytes(binding(), bytes)
}

/** Opens a file for direct I/O (buffered on filesystems without O_DIRECT). */
export function openDirectFile (path: string, options: OpenFileOptions = {}): DirectFile {
  return directFile.openDirectFile(binding(), path, options)
}

/**
 * Whether files in `dir` get O_DIRECT, and with which alignment: creates a
 * probe file there and removes it.
 */
export function probeDirectIo (dir: string): Omit<NativeFileInfo, 'path' | 'sizeBytes'> {
  const probePath = `${dir.replace(/\/+$/, '')}/.agentd-direct-io-probe-${process.pid}-${Date.now()}`
  return callNative(() => binding().probeDirectIo(probePath))
}

/** SO_PEERCRED of a connected unix socket (a net.Socket or its fd). */
export function peerCredentials (socket: import('node:net').Socket | number): PeerCredentials {
  return unixSocket.peerCredentials(binding(), socket)
}

/** sd_notify to $NOTIFY_SOCKET; false when it is not set. */
export function notifySystemd (message: string, env: NodeJS.ProcessEnv = process.env): boolean {
  return unixSocket.notifySystemd(binding(), message, env)
}

/**
 * An exclusive flock(2) on the file open as `fd`, without waiting: true when
 * this descriptor holds it, false when another open file description does.
 * The lock lasts until the descriptor is closed or the process dies (SIGKILL
 * included), so a crashed holder never leaves it behind.
 */
export function tryLockExclusive (fd: number): boolean {
  if (!Number.isInteger(fd) || fd < 0) throw new AgentError('ERR_ARG_INVALID', `expected an open file descriptor, got ${String(fd)}`)
  const lib = binding()
  return callNative(() => lib.tryLockExclusive(fd))
}

/** Opens a client's CUDA IPC handle (64-byte raw or 66-byte PyTorch form) on `device`. */
export function openDeviceMemory (options: { device: number, handle: Uint8Array }): DeviceMemory {
  return cudaIpc.openDeviceMemory(binding(), cudaUnavailable(), options)
}

export async function copyDeviceToHost (src: DeviceRange, dst: HostRange, options: DeviceCopyOptions = {}): Promise<void> {
  await cudaIpc.copyDeviceToHost(binding(), cudaUnavailable(), src, dst, options)
}

export async function copyHostToDevice (src: HostRange, dst: DeviceRange, options: DeviceCopyOptions = {}): Promise<void> {
  await cudaIpc.copyHostToDevice(binding(), cudaUnavailable(), src, dst, options)
}

/** A UCX worker of this process (native/ucx.ts): ERR_UCX_UNAVAILABLE when the addon was built without UCX. */
export function createUcxWorker (): UcxWorker {
  return ucx.createUcxWorker(binding())
}
