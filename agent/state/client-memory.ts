/**
 * Memory a client names in a request (DESIGN "Data never travels in JSON"):
 * a POSIX shared-memory object plus offset, or a CUDA IPC handle plus offset.
 * The agent maps it, copies on native threads/streams, and releases the
 * mapping when the request is done. Errors map to the StateManager's codes:
 * ERR_SOURCE_NOT_FOUND, ERR_SIZE_MISMATCH, ERR_CUDA_UNAVAILABLE.
 */
import { AgentError } from '../../core/errors.ts'
import {
  capabilities, checksum, copyDeviceToHost, copyHost, copyHostToDevice, openDeviceMemory,
  type DeviceMemory, type HostRange,
} from '../../native/index.ts'
import type { ShmLease, ShmMappingCache } from './shm-mapping-cache.ts'

export type MemorySpec =
  | { kind: 'shm', name: string, offset: number }
  | { kind: 'cuda-ipc', device: number, handle: string, offset: number, event?: string }

/** `bytes` bytes of client memory at the spec's offset. */
export interface ClientMemory {
  readonly bytes: number
  /** Copies the client's bytes into `dst` (dst.length === bytes). */
  readInto(dst: HostRange): Promise<void>
  /** Copies `src` (src.length === bytes) into the client's memory. */
  writeFrom(src: HostRange): Promise<void>
  /** crc32c of the client's bytes; `scratch` is a pool range of `bytes` for device memory. */
  checksum(scratch: () => Promise<{ range: HostRange, release: () => void }>): Promise<number>
}

/**
 * Opens client memory specs for one request: shared-memory objects through
 * the mapping cache (mapped once, reused across requests), IPC handles once
 * per request; `close()` releases them.
 */
export interface ClientMemoryScope {
  open(spec: MemorySpec, bytes: number, where: string): ClientMemory
  close(): void
}

export function createClientMemoryScope (mappings: ShmMappingCache): ClientMemoryScope {
  const shm = new Map<string, ShmLease>()
  const device = new Map<string, DeviceMemory>()

  function openShm (name: string, where: string): ShmLease['object'] {
    let lease = shm.get(name)
    if (lease === undefined) {
      try {
        lease = mappings.acquire(name)
      } catch (err) {
        const code = (err as AgentError).code
        if (code === 'ERR_SHM_NOT_FOUND' || code === 'ERR_SHM_TOO_SMALL') {
          throw new AgentError('ERR_SOURCE_NOT_FOUND', `${where}: shared-memory object "${name}" does not exist or is empty`, { cause: err })
        }
        if (code === 'ERR_ARG_INVALID') throw new AgentError('ERR_BAD_REQUEST', `${where}: ${(err as Error).message}`, { cause: err })
        throw err
      }
      shm.set(name, lease)
    }
    return lease.object
  }

  function openDevice (spec: Extract<MemorySpec, { kind: 'cuda-ipc' }>, where: string): DeviceMemory {
    if (!capabilities.cuda.available) {
      throw new AgentError('ERR_CUDA_UNAVAILABLE', `${where}: CUDA IPC needs a usable GPU on this node (${capabilities.cuda.reason ?? 'unavailable'})`)
    }
    const id = `${spec.device}:${spec.handle}`
    let mem = device.get(id)
    if (mem === undefined) {
      mem = openDeviceMemory({ device: spec.device, handle: Buffer.from(spec.handle, 'base64') })
      device.set(id, mem)
    }
    return mem
  }

  return {
    open (spec, bytes, where) {
      if (spec.kind === 'shm') {
        const obj = openShm(spec.name, where)
        if (spec.offset + bytes > obj.sizeBytes) {
          throw new AgentError('ERR_SIZE_MISMATCH', `${where}: ${bytes} bytes at offset ${spec.offset} exceed shared-memory object "${spec.name}" of ${obj.sizeBytes} bytes`)
        }
        const range = obj.range(spec.offset, bytes)
        return {
          bytes,
          readInto: dst => copyHost(dst, range),
          writeFrom: src => copyHost(range, src),
          checksum: async () => await checksum(range),
        }
      }
      const mem = openDevice(spec, where)
      if (mem.sizeBytes > 0 && spec.offset + bytes > mem.sizeBytes) {
        throw new AgentError('ERR_SIZE_MISMATCH', `${where}: ${bytes} bytes at offset ${spec.offset} exceed the IPC allocation of ${mem.sizeBytes} bytes`)
      }
      const range = { memory: mem, offset: spec.offset, length: bytes }
      const waitEvent = spec.event !== undefined ? { waitEvent: Buffer.from(spec.event, 'base64') } : {}
      return {
        bytes,
        readInto: dst => copyDeviceToHost(range, dst, waitEvent),
        writeFrom: src => copyHostToDevice(src, range, waitEvent),
        async checksum (scratch) {
          const { range: tmp, release } = await scratch()
          try {
            await copyDeviceToHost(range, tmp, waitEvent)
            return await checksum(tmp)
          } finally {
            release()
          }
        },
      }
    },
    close () {
      for (const lease of shm.values()) lease.release()
      for (const mem of device.values()) mem.close()
      shm.clear()
      device.clear()
    },
  }
}

/**
 * Keeps the CUDA IPC handles named in `specs` open until the returned
 * function is called, so the copies of later requests on the same memory
 * (a live worker's state, offloaded and onloaded at every context switch)
 * reuse one mapping instead of opening the handle each time. Shared memory
 * needs none (the mapping cache keeps it). Close before the client frees
 * the memory: CUDA leaves freeing mapped memory undefined.
 */
export function pinClientMemory (specs: readonly MemorySpec[]): () => void {
  if (!capabilities.cuda.available) return () => {}
  const open = new Map<string, DeviceMemory>()
  try {
    for (const spec of specs) {
      if (spec.kind !== 'cuda-ipc' || open.has(`${spec.device}:${spec.handle}`)) continue
      open.set(`${spec.device}:${spec.handle}`, openDeviceMemory({ device: spec.device, handle: Buffer.from(spec.handle, 'base64') }))
    }
  } catch (err) {
    for (const mem of open.values()) mem.close()
    throw new AgentError('ERR_SOURCE_NOT_FOUND', `cannot open the worker's CUDA IPC memory: ${(err as Error).message}`, { cause: err })
  }
  return () => { for (const mem of open.values()) mem.close(); open.clear() }
}
