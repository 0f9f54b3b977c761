/**
 * Shared-memory objects adopted as the host storage of stored keys
 * (StateManager.adoptShm, zero copy): the plan that decides which keys of a
 * request are adopted, the mapping of the object, and the reference count
 * that unmaps it with its last key.
 *
 * Contracts:
 * - Units: bytes; offsets are byte offsets into the object.
 * - Ownership: a region owns its mapping (`object`) from `add` until the
 *   `release` of its last key; the caller's entries point at the region and
 *   give their share back through `release` (when dropped, and all at stop).
 * - Ordering: `planShmAdoption` and `mapForAdoption` throw before anything is
 *   recorded; `add` and `release` never throw, so a caller that planned and
 *   mapped first stores every key of the request in one tick or none.
 * All on the event loop; nothing here copies bytes.
 */
import type { Logger } from 'pino'
import { constants as bufferConstants } from 'node:buffer'
import { AgentError } from '../../core/errors.ts'
import { openSharedMemory, type HostMemory, type SharedMemoryObject } from '../../native/index.ts'
import type { StateKey } from './keys.ts'

/** A shared-memory object adopted as the host storage of some keys. */
export interface AdoptedShm {
  name: string
  object: SharedMemoryObject
  /**
   * The mapping as HostMemory whose views are subarrays of one Buffer over it:
   * a fresh external Buffer per weight reply costs full garbage collections
   * (see native/host-memory.ts). Dropped when the mapping is closed.
   */
  memory: HostMemory
  /** Keys whose host copy is in this mapping, and their bytes; unmapped at 0 keys. */
  keys: number
  bytes: number
}

/** A key of an adoptShm request that nothing stores or writes yet, at `offset` in the object. */
export interface FreshAdoption { key: StateKey, offset: number }

/**
 * Splits an adoptShm request into keys to adopt (`fresh`) and keys already
 * stored (`existing`: the caller counts them as replicas). Items are checked
 * in order and the first bad one throws ERR_BAD_REQUEST: an offset that is not
 * a non-negative integer, a key given twice, a key another request is writing.
 * `keys[i]` is the parsed key of `offsets[i]`'s item.
 */
export function planShmAdoption<E> (
  keys: readonly StateKey[],
  offsets: readonly number[],
  storedEntry: (text: string) => E | undefined,
  beingWritten: (text: string) => boolean,
): { fresh: FreshAdoption[], existing: E[] } {
  const fresh: FreshAdoption[] = []
  const existing: E[] = []
  const seen = new Set<string>()
  keys.forEach((key, i) => {
    const offset = offsets[i]!
    if (!Number.isSafeInteger(offset) || offset < 0) throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].offset must be a non-negative integer`)
    if (seen.has(key.text)) throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].key: ${key.text} appears twice`)
    seen.add(key.text)
    const entry = storedEntry(key.text)
    if (entry !== undefined) existing.push(entry)
    else if (!beingWritten(key.text)) fresh.push({ key, offset })
    else throw new AgentError('ERR_BAD_REQUEST', `tensors[${i}].key: ${key.text} is being written by another request`)
  })
  return { fresh, existing }
}

/**
 * The object `source` names mapped (or the caller's mapping), once every fresh
 * key's range lies inside it. ERR_SOURCE_NOT_FOUND when it cannot be mapped,
 * ERR_SIZE_MISMATCH for a range past its end; on failure a mapping made here
 * is closed and a caller's mapping stays the caller's.
 */
export function mapForAdoption (source: string | SharedMemoryObject, fresh: readonly FreshAdoption[]): SharedMemoryObject {
  const name = typeof source === 'string' ? source : source.name
  let object: SharedMemoryObject
  try {
    object = typeof source === 'string' ? openSharedMemory(name) : source
  } catch (err) {
    throw new AgentError('ERR_SOURCE_NOT_FOUND', `shared-memory object "${name}": ${(err as Error).message}`, { cause: err })
  }
  const tooFar = fresh.find(f => f.offset + f.key.bytes > object.sizeBytes)
  if (tooFar !== undefined) {
    if (typeof source === 'string') object.close()
    throw new AgentError('ERR_SIZE_MISMATCH', `${tooFar.key.text}: ${tooFar.key.bytes} bytes at offset ${tooFar.offset} exceed shared-memory object "${name}" of ${object.sizeBytes} bytes`)
  }
  return object
}

export interface AdoptedShmRegions {
  /** Records `object` as the host storage of `fresh` (at least one key): the region takes the mapping. Never throws. */
  add(object: SharedMemoryObject, fresh: readonly FreshAdoption[]): AdoptedShm
  /** Gives up one key's share (`bytes`) of `region`, unmapping it with the last key. Never throws. */
  release(region: AdoptedShm, bytes: number): void
  /** Regions mapped now and the key bytes they hold, for residency(). */
  totals(): { regions: number, bytes: number }
}

export interface AdoptedShmRegionsComponents {
  logger: Logger
}

export function createAdoptedShmRegions (components: AdoptedShmRegionsComponents): AdoptedShmRegions {
  const { logger } = components
  const regions = new Set<AdoptedShm>()
  return {
    add (object, fresh) {
      const region: AdoptedShm = { name: object.name, object, memory: adoptedMemory(object), keys: fresh.length, bytes: 0 }
      for (const f of fresh) region.bytes += f.key.bytes
      regions.add(region)
      logger.debug({ region: region.name, keys: region.keys, bytes: region.bytes }, 'shared-memory region adopted')
      return region
    },
    release (region, bytes) {
      region.keys--
      region.bytes -= bytes
      if (region.keys === 0) {
        regions.delete(region)
        region.object.close()
        logger.debug({ region: region.name }, 'adopted shared-memory region unmapped')
      }
    },
    totals () {
      let bytes = 0
      for (const r of regions) bytes += r.bytes
      return { regions: regions.size, bytes }
    },
  }
}

function adoptedMemory (object: SharedMemoryObject): HostMemory {
  let whole: Buffer | undefined
  return {
    region: object.region,
    sizeBytes: object.sizeBytes,
    label: object.label,
    viewBytes (offset, length) {
      if (object.sizeBytes > bufferConstants.MAX_LENGTH) return object.viewBytes(offset, length)
      whole ??= object.viewBytes(0, object.sizeBytes)
      return whole.subarray(offset, offset + length)
    },
  }
}
