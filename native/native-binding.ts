/**
 * The raw interface of the compiled addon (native/src/*.cc). Only
 * native/index.ts loads it; the modules beside it receive it as an argument.
 * Every number is a byte count or offset that TypeScript has validated; every
 * function may throw (or reject with) an Error carrying a stable `code`, which
 * `fromNativeError` turns into an AgentError.
 */

/** Host memory the addon owns: the pinned pool or a mapped shm object. */
export interface NativeRegion {
  /** Drops this handle; the mapping goes when in-flight work and views let go. Idempotent. */
  close (): void
  /** A Buffer over [offset, offset + length) of the region, no copy. */
  view (offset: number, length: number): Buffer
  info (): NativeRegionInfo
}

export type NativeRegionInfo =
  | {
    kind: 'hostPool'
    bytes: number
    mappedBytes: number
    hugePages: 'hugetlb' | 'transparent' | 'none'
    locked: boolean
    cudaRegistered: boolean
    cudaRegistrationChunkBytes: number
  }
  | { kind: 'sharedMemory', name: string, bytes: number }

export interface NativeFileInfo {
  path: string
  /** Whether the file is open with O_DIRECT. */
  directIo: boolean
  /** Why not, when directIo is false (e.g. tmpfs). */
  directIoReason: string | null
  /** File offsets and lengths of direct transfers, bytes (>= 4096). */
  alignment: number
  /** Buffer addresses of direct transfers, bytes (>= 4096). */
  memoryAlignment: number
  alignmentSource: 'statx' | 'blockSize'
  sizeBytes: number
}

export interface NativeTransferResult {
  bytes: number
  /** Chunks that went through an aligned bounce buffer (unaligned head/tail). */
  bouncedChunks: number
}

export interface NativeFile {
  read (region: NativeRegion, regionOffset: number, fileOffset: number, length: number,
    queueDepth: number, blockBytes: number, sync: boolean): Promise<NativeTransferResult>
  write (region: NativeRegion, regionOffset: number, fileOffset: number, length: number,
    queueDepth: number, blockBytes: number, sync: boolean): Promise<NativeTransferResult>
  sync (): Promise<void>
  info (): NativeFileInfo
  close (): void
}

export interface NativeDeviceMapping {
  info (): { device: number, sizeBytes: number, openHandles: number }
  close (): void
}

export interface NativeCudaDevice {
  index: number
  name: string
  /** "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it. */
  uuid: string
  /** "0000:3b:00.0" */
  pciBusId: string
  totalMemoryBytes: number
  computeCapability: string
}

export interface NativeCudaInfo {
  /** Whether the addon was built against a CUDA toolkit. */
  compiled: boolean
  available: boolean
  /** "<cuda error name>: <text>" or another reason when not available. */
  reason: string | null
  runtimeVersion: number
  driverVersion: number
  devices: NativeCudaDevice[]
}

export interface NativeCapabilities {
  /** RLIMIT_MEMLOCK in bytes; Infinity when unlimited. */
  memlock: { soft: number, hard: number }
  crc32cHardware: boolean
  cpuThreads: number
  ioMaxQueueDepth: number
  cuda: NativeCudaInfo
}

/** The addon's UCX worker (native/src/ucx_transport.cc); only native/ucx.ts uses it. */
export interface NativeUcxWorker {
  address (): Buffer
  connect (address: Buffer): { id: number, peerFailure: boolean }
  endpointInfo (endpoint: number): string
  endpointFailure (endpoint: number): string
  closeEndpoint (endpoint: number): void
  map (region: NativeRegion, offset: number, length: number): { id: number, rkey: Buffer, address: bigint }
  unmap (id: number): void
  unpackRkey (endpoint: number, rkey: Buffer): number
  destroyRkey (id: number): void
  get (requestId: number, endpoint: number, rkey: number, remoteAddress: bigint, region: NativeRegion, offset: number, length: number, runs?: Float64Array): void
  close (): void
}

export interface NativeBinding {
  probeCapabilities (): NativeCapabilities
  createHostPool (bytes: number, tryHugetlb: boolean, lock: boolean, registerCuda: boolean,
    cudaChunkBytes: number): Promise<NativeRegion>
  openSharedMemory (name: string, minBytes: number): NativeRegion
  /** Faults the range's pages in for writing, on a worker thread. */
  /** false: the kernel has no MADV_POPULATE_WRITE (Linux < 5.14); nothing was allocated. */
  populateRegion (region: NativeRegion, offset: number, length: number): Promise<boolean>
  /** threads: 0 = the whole CPU pool, 1 = one plain memcpy. */
  copyHost (dst: NativeRegion, dstOffset: number, src: NativeRegion, srcOffset: number,
    length: number, threads: number): Promise<void>
  /** Copies `runs` runs of `runBytes`, `srcStride` apart in src, to consecutive dst bytes. threads: 0 = the whole CPU pool. */
  gatherHost (dst: NativeRegion, dstOffset: number, src: NativeRegion, srcOffset: number,
    runBytes: number, runs: number, srcStride: number, threads: number): Promise<void>
  /** CRC-32C (unsigned). threads: 0 = the whole CPU pool. */
  checksumRegion (region: NativeRegion, offset: number, length: number, threads: number): Promise<number>
  checksumBuffer (bytes: Uint8Array): Promise<number>
  openFile (path: string, writable: boolean, create: boolean, tryDirect: boolean): NativeFile
  probeDirectIo (probePath: string): Omit<NativeFileInfo, 'path' | 'sizeBytes'>
  peerCredentials (fd: number): { pid: number, uid: number, gid: number }
  sendUnixDatagram (path: string, message: Uint8Array): void
  /** flock(fd, LOCK_EX | LOCK_NB): true = held by this descriptor, false = held by another. */
  tryLockExclusive (fd: number): boolean
  ucxInfo (): { compiled: boolean, version: string, transports: Array<{ transport: string, device: string }> }
  /** Present only in a build with UCX. */
  UcxWorker?: new (onCompletions: (ids: number[], errors: string[]) => void) => NativeUcxWorker
  /** Present only in a build with CUDA. */
  cudaOpenIpcHandle?: (device: number, handle: Uint8Array) => NativeDeviceMapping
  cudaCopy?: (toDevice: boolean, mapping: NativeDeviceMapping, deviceOffset: number,
    region: NativeRegion, regionOffset: number, length: number, chunkBytes: number,
    waitEvent: Uint8Array | undefined) => Promise<void>
}
