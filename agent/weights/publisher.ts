/**
 * Publishing a version (RLBoost §4.3: after a step the trainer puts the full
 * weights into host memory the agent manages). Three sources:
 * - `keys`: StateManager keys already stored (whole tensors, offsets 0) — no
 *   copy; the version references them and does not drop them when retired;
 * - `region`: a shared-memory object the agent creates and hands out
 *   (`createRegion`); the trainer writes every tensor at its offset, then
 *   publishes it. Zero copy: the StateManager adopts the object's mapping as
 *   the keys' host storage (`adoptShm`), so the version is served, onloaded
 *   and persisted from the bytes the trainer wrote (see "Region lifecycle");
 * - `safetensors`: a file read by native threads straight into pool memory.
 * Every publish either commits a complete version or leaves nothing behind
 * (its reservation released, the keys it created dropped).
 *
 * Region lifecycle (one owner at a time, nothing leaks):
 * - hand-out refuses, before creating anything, a tensor table that does not
 *   validate, a region the namespace quota of weights/<model> could not take
 *   at publish (this model's other open regions counted), and one larger
 *   than the free space of /dev/shm (statfs, less regions being created
 *   alongside): ERR_BAD_REQUEST, ERR_QUOTA_EXCEEDED, ERR_TIER_FULL.
 * - handed out: /dev/shm/agentd-weights-<agent tag>-<model>-v<version>-<random>,
 *   mode 0600, the version reserved, mapped by the agent and every page
 *   allocated (MADV_POPULATE_WRITE on a native thread) before the reply, so
 *   a tmpfs or memory limit that cannot hold it fails the hand-out
 *   (ERR_TIER_FULL; the object and mapping removed, the version released)
 *   instead of the trainer's writes (SIGBUS), and the publish's checksum
 *   pass takes no page faults. Only this publisher knows it; it is
 *   removed by `discardRegion`, at `close()` (agent shutdown) or, after a
 *   crash, by `start()` of the next run of the same agent (the tag is derived
 *   from `owner`), so an abandoned region never outlives its agent's run.
 * - publish, validation (known region, same model and version, not already
 *   being published): a failure changes nothing, the region stays handed out
 *   for a corrected retry.
 * - publish past validation consumes the region: the StateManager takes the
 *   agent's mapping of it and adopts its ranges as the keys (the mapping is
 *   of the object the agent created, whatever the name points at by now),
 *   then the name is unlinked from /dev/shm
 *   BEFORE the chunk checksums are taken (no new writer can open it), then
 *   persistence (durable: written to NVMe and fsynced, as for other sources)
 *   and the manifest commit. A failure there drops the adopted keys (which
 *   unmaps the object, freeing its memory) and releases the version: the
 *   trainer asks for a new region.
 * - committed: the mapping lives as long as the version's keys; retiring the
 *   version (retention) drops them and unmaps it.
 * Immutability: a trainer that kept its own writable mapping after publishing
 * can still change the bytes; the kernel offers no way to revoke another
 * process's shared mapping of a /dev/shm object. So the chunk checksums
 * taken at commit are the truth: pullers verify whole chunks against the
 * manifest, the data server verifies the committed chunks a sliced or
 * unaligned read covers before it checksums its reply (tcp-server.ts), and
 * NVMe copies are verified when read back. A scribbled chunk fails the pull
 * with ERR_DATA_CORRUPT; it is never served as valid. Trainers must stop
 * writing (close their mapping) once they publish.
 */
import { createHash, randomBytes } from 'node:crypto'
import { open, readdir, statfs, unlink } from 'node:fs/promises'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { checksum, openDirectFile, openSharedMemory, populateHostRange, type HostRange, type SharedMemoryObject } from '../../native/index.ts'
import { dtypeBytes, type Dtype } from '../state/keys.ts'
import { safetensorsDtype } from '../state/materialize.ts'
import type { StateManager } from '../state/state-manager.ts'
import { checkModelName, weightsKey, type ManifestTensor, type VersionStore, type WeightsManifest } from './version-store.ts'
import type { PublishRequest, PublishSource } from '../api/wire/weights.ts'

export interface TensorSpec { name: string, dtype: Dtype, shape: number[] }

export type { PublishRequest, PublishSource }

export interface RegionTensor { name: string, dtype: Dtype, shape: number[], offset: number, bytes: number }
export interface WeightsRegion {
  /** The shared-memory object (/dev/shm/<name>) to write into. */
  region: string
  model: string
  version: number
  bytes: number
  tensors: RegionTensor[]
}

export interface PublisherOptions {
  chunkBytes: number
  /** Persist published tensors to NVMe (the version survives a restart). */
  durable: boolean
  /**
   * Identifies this agent in region names (any string stable across its
   * restarts, e.g. its manifest directory): `start()` removes regions a
   * previous run of the same agent left behind, and no other agent's.
   */
  owner: string
}

export interface PublisherComponents {
  stateManager: StateManager
  versions: VersionStore
  logger: Logger
  /** Allocates a region's pages at hand-out; false when the kernel cannot. Default: populateHostRange (MADV_POPULATE_WRITE on a native thread). */
  populate?: (range: HostRange) => Promise<boolean>
}

/**
 * A publish's stages, in order: `reading` a safetensors file into the pool
 * (that source only), `checksumming` every chunk, `persisting` to NVMe
 * (durable agents only; reported when it starts and when it ends).
 */
export type PublishStage = 'reading' | 'checksumming' | 'persisting'

/** Called on the event loop after each tensor of a stage: `doneBytes` of the version's `totalBytes` went through `stage`. */
export type PublishProgress = (stage: PublishStage, doneBytes: number, totalBytes: number) => void

export interface Publisher {
  /** Removes the regions a previous run of this agent handed out and never published (a crash skips close()). */
  start(): Promise<void>
  /**
   * Hands out a region, its version reserved for `owner` (a uid; undefined =
   * the agent) until published or discarded: the model is claimed for
   * `owner` if nobody owns it (version-store.ts "Ownership"), in the tick
   * this is called, before the returned promise settles.
   */
  createRegion(model: string, version: number | undefined, tensors: TensorSpec[], owner?: number): Promise<WeightsRegion>
  /**
   * Publishes a version; one from keys or a file reserves it for `owner` as
   * createRegion does, in the tick this is called; `onProgress` follows it.
   */
  publish(request: PublishRequest, options?: { owner?: number, onProgress?: PublishProgress }): Promise<WeightsManifest>
  /** Removes a region handed out and not published (its version is released); ERR_WEIGHTS_NOT_FOUND if unknown. */
  discardRegion(name: string): Promise<void>
  /** Removes regions not yet published. */
  close(): Promise<void>
}

/** Where shm_open(3) objects live (the StateManager maps regions by name through it). */
const shmDir = '/dev/shm'

const tensorNamePattern = /^[A-Za-z0-9_.-]{1,512}$/
const fromSafetensors = new Map(Object.entries(safetensorsDtype).map(([ours, theirs]) => [theirs, ours as Dtype]))

function checkTensor (t: TensorSpec, where: string): number {
  if (typeof t.name !== 'string' || !tensorNamePattern.test(t.name)) throw new AgentError('ERR_BAD_REQUEST', `${where}: tensor name ${JSON.stringify(t.name)} may only contain letters, digits, "_", "-", "."`)
  if (!Object.hasOwn(dtypeBytes, t.dtype)) throw new AgentError('ERR_BAD_REQUEST', `${where} (${t.name}): unknown dtype ${JSON.stringify(t.dtype)}`)
  if (!Array.isArray(t.shape) || t.shape.length > 8 || !t.shape.every(d => Number.isSafeInteger(d) && d >= 1)) throw new AgentError('ERR_BAD_REQUEST', `${where} (${t.name}): shape must be up to 8 positive integers`)
  const bytes = t.shape.reduce((a, b) => a * b, 1) * dtypeBytes[t.dtype]
  if (!Number.isSafeInteger(bytes)) throw new AgentError('ERR_BAD_REQUEST', `${where} (${t.name}): shape ${JSON.stringify(t.shape)} is larger than ${Number.MAX_SAFE_INTEGER} bytes`)
  return bytes
}

/** A tensor's bytes from its (validated) shape and dtype. */
function tensorBytes (t: TensorSpec): number {
  return t.shape.reduce((a, b) => a * b, 1) * dtypeBytes[t.dtype]
}

function checkUniqueNames (tensors: readonly { name: string }[]): void {
  const seen = new Set<string>()
  for (const t of tensors) {
    if (seen.has(t.name)) throw new AgentError('ERR_BAD_REQUEST', `tensor ${t.name} appears twice`)
    seen.add(t.name)
  }
  if (tensors.length === 0) throw new AgentError('ERR_BAD_REQUEST', 'a version needs at least one tensor')
}

/** crc32c of each chunk of a stored range, on native threads. */
export async function chunkChecksums (range: HostRange, chunkBytes: number): Promise<number[]> {
  const sums: Array<Promise<number>> = []
  for (let at = 0; at < range.length; at += chunkBytes) {
    sums.push(checksum({ memory: range.memory, offset: range.offset + at, length: Math.min(chunkBytes, range.length - at) }))
  }
  return await Promise.all(sums)
}

/** Reads a safetensors header: tensors in file order with their data offsets (relative to the data section). */
export async function readSafetensorsHeader (path: string): Promise<{ dataStart: number, metadata: Record<string, string>, tensors: Array<TensorSpec & { start: number, end: number }> }> {
  const bad = (why: string): AgentError => new AgentError('ERR_BAD_REQUEST', `${path} is not a valid safetensors file: ${why}`)
  let handle
  try {
    handle = await open(path, 'r')
  } catch (cause) {
    throw new AgentError('ERR_SOURCE_NOT_FOUND', `cannot open ${path}: ${(cause as Error).message}`, { cause })
  }
  try {
    const size = (await handle.stat()).size
    const lengthBytes = Buffer.alloc(8)
    if ((await handle.read(lengthBytes, 0, 8, 0)).bytesRead !== 8) throw bad('shorter than 8 bytes')
    const headerLength = Number(lengthBytes.readBigUInt64LE(0))
    if (headerLength > 100 * 2 ** 20 || 8 + headerLength > size) throw bad(`header length ${headerLength} does not fit the file`)
    const text = Buffer.alloc(headerLength)
    await handle.read(text, 0, headerLength, 8)
    let header: Record<string, unknown>
    try { header = JSON.parse(text.toString('utf8')) as Record<string, unknown> } catch { throw bad('the header is not JSON') }
    const metadata: Record<string, string> = {}
    for (const [k, v] of Object.entries((header.__metadata__ ?? {}) as Record<string, unknown>)) if (typeof v === 'string') metadata[k] = v
    const dataStart = 8 + headerLength
    const tensors = Object.entries(header).filter(([name]) => name !== '__metadata__').map(([name, value]) => {
      const v = value as { dtype?: unknown, shape?: unknown, data_offsets?: unknown }
      const dtype = fromSafetensors.get(String(v.dtype))
      if (dtype === undefined) throw bad(`${name}: unsupported dtype ${JSON.stringify(v.dtype)}`)
      const offsets = v.data_offsets as number[] | undefined
      if (!Array.isArray(offsets) || offsets.length !== 2) throw bad(`${name}: data_offsets missing`)
      const spec = { name, dtype, shape: v.shape as number[] }
      const bytes = checkTensor(spec, path)
      const [start, end] = offsets as [number, number]
      if (end - start !== bytes || dataStart + end > size) throw bad(`${name}: data_offsets [${start}, ${end}] do not match ${bytes} bytes inside the file`)
      return { ...spec, start, end }
    })
    return { dataStart, metadata, tensors: tensors.sort((a, b) => a.start - b.start) }
  } finally {
    await handle.close()
  }
}

export function createPublisher (options: PublisherOptions, components: PublisherComponents): Publisher {
  const { stateManager: sm, versions, logger } = components
  /** `mapping`: the agent's own mapping of the region, until the StateManager adopts it. */
  const regions = new Map<string, WeightsRegion & { release(): void, publishing: boolean, mapping: SharedMemoryObject | undefined }>()
  const populate = components.populate ?? populateHostRange
  let populateUnsupportedSaid = false
  /** Bytes of regions between their space check and their last page allocated (statfs does not show them yet), this one's included. */
  let creatingBytes = 0
  /** Tensor bytes per model of regions being handed out (not yet in `regions`), for the quota check. */
  const creating = new Map<string, number>()
  /** ERR_TIER_FULL unless `bytes` fit in /dev/shm's free space beside the other regions being created. */
  async function checkShmSpace (bytes: number): Promise<void> {
    let freeBytes: number
    try {
      const fs = await statfs(shmDir)
      freeBytes = fs.bavail * fs.bsize
    } catch (cause) {
      throw new AgentError('ERR_IO', `cannot read the free space of ${shmDir}: ${(cause as Error).message}`, { cause })
    }
    const others = creatingBytes - bytes
    if (bytes > freeBytes - others) {
      throw new AgentError('ERR_TIER_FULL', `a region of ${bytes} bytes does not fit in ${shmDir}: ${freeBytes} bytes free${others > 0 ? `, ${others} of them promised to regions being handed out` : ''}`)
    }
  }
  const namePrefix = `agentd-weights-${createHash('sha256').update(options.owner).digest('hex').slice(0, 8)}-`
  const removeRegion = async (name: string): Promise<void> => {
    const region = regions.get(name)
    regions.delete(name)
    region?.release()
    region?.mapping?.close()
    await unlink(`${shmDir}/${name}`).catch(() => {})
  }

  /** Checksums, persistence and commit of tensors whose keys are stored. */
  async function commitVersion (model: string, version: number, tensors: Array<TensorSpec & { key: string }>, ownsKeys: boolean, metadata: Record<string, string>, onProgress: PublishProgress): Promise<WeightsManifest> {
    const table: ManifestTensor[] = []
    const totalBytes = tensors.reduce((a, t) => a + tensorBytes(t), 0)
    let doneBytes = 0
    for (const t of tensors) {
      const pinned = await sm.readHost(t.key)
      try {
        table.push({ name: t.name, dtype: t.dtype, shape: t.shape, bytes: pinned.range.length, key: t.key, chunkChecksums: await chunkChecksums(pinned.range, options.chunkBytes) })
      } finally {
        pinned.release()
      }
      onProgress('checksumming', doneBytes += pinned.range.length, totalBytes)
    }
    if (options.durable) {
      onProgress('persisting', 0, totalBytes)
      await sm.persist(tensors.map(t => t.key))
      onProgress('persisting', totalBytes, totalBytes)
    }
    const manifest: WeightsManifest = {
      model, version, chunkBytes: options.chunkBytes, totalBytes: table.reduce((a, t) => a + t.bytes, 0), committedAtMs: Date.now(),
      metadata, ownsKeys, durable: options.durable, tensors: table,
    }
    await versions.commit(manifest)
    return manifest
  }

  async function publishKeys (model: string, version: number, prefix: string, metadata: Record<string, string>, onProgress: PublishProgress): Promise<WeightsManifest> {
    if (prefix === '' || prefix.startsWith('weights/')) throw new AgentError('ERR_BAD_REQUEST', 'publish from keys needs a prefix outside weights/ (e.g. job42/actor/)')
    const keys = sm.storedKeys(prefix).filter(k => k.role === 'param')
    if (keys.length === 0) throw new AgentError('ERR_KEY_NOT_FOUND', `no param keys stored under ${prefix}`)
    const chunked = keys.find(k => k.offsets.some(o => o !== 0))
    if (chunked !== undefined) throw new AgentError('ERR_BAD_REQUEST', `${chunked.text} is a chunk of a tensor (non-zero offsets); publish whole tensors (materialize to safetensors and publish the file for chunked state)`)
    const versionsSeen = new Set(keys.map(k => k.version))
    if (versionsSeen.size > 1) throw new AgentError('ERR_BAD_REQUEST', `keys under ${prefix} have several versions (${[...versionsSeen].join(', ')}); use a prefix that names one`)
    const tensors = keys.map(k => ({ name: k.fqn, dtype: k.dtype, shape: k.shape, key: k.text }))
    checkUniqueNames(tensors)
    return await commitVersion(model, version, tensors, false, metadata, onProgress)
  }

  async function publishSafetensors (model: string, version: number, path: string, metadata: Record<string, string>, onProgress: PublishProgress): Promise<WeightsManifest> {
    const header = await readSafetensorsHeader(path)
    checkUniqueNames(header.tensors)
    const created: string[] = []
    const file = openDirectFile(path)
    const totalBytes = header.tensors.reduce((a, t) => a + t.end - t.start, 0)
    let doneBytes = 0
    try {
      const tensors = []
      for (const t of header.tensors) {
        const key = weightsKey(model, t.name, t.dtype, t.shape, version)
        const scratch = await sm.scratch(t.end - t.start)
        try {
          await file.read(scratch.range, header.dataStart + t.start)
        } catch (err) {
          scratch.release()
          throw err
        }
        if (await sm.adopt(key, scratch)) created.push(key)
        tensors.push({ ...t, key })
        onProgress('reading', doneBytes += t.end - t.start, totalBytes)
      }
      return await commitVersion(model, version, tensors, true, { ...header.metadata, ...metadata }, onProgress)
    } catch (err) {
      if (created.length > 0) await sm.drop({ keys: created })
      throw err
    } finally {
      file.close()
    }
  }

  /** Zero copy: see "Region lifecycle" above for the order of steps and what a failure leaves. */
  async function publishRegion (model: string, requested: number | undefined, name: string, metadata: Record<string, string>, onProgress: PublishProgress): Promise<WeightsManifest> {
    const region = regions.get(name)
    if (region === undefined) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `no region ${name} handed out by this agent (POST /v1/weights/regions first; a region is consumed by its publish)`)
    const version = requested ?? region.version
    if (region.model !== model || region.version !== version) throw new AgentError('ERR_BAD_REQUEST', `region ${name} was handed out for ${region.model} v${region.version}, not ${model} v${version}`)
    if (region.publishing) throw new AgentError('ERR_WEIGHTS_VERSION_EXISTS', `region ${name} (${model} v${version}) is already being published`)
    region.publishing = true
    const tensors = region.tensors.map(t => ({ ...t, key: weightsKey(model, t.name, t.dtype, t.shape, version) }))
    let adopted: string[] = []
    try {
      adopted = sm.adoptShm(region.mapping ?? name, tensors.map(t => ({ key: t.key, offset: t.offset }))).adopted
      region.mapping = undefined // the StateManager's now
      // Unlinked before the checksums: no writer can open the region anew. The mapping keeps the bytes.
      await unlink(`${shmDir}/${name}`).catch((err: NodeJS.ErrnoException) => { if (err.code !== 'ENOENT') throw err })
      return await commitVersion(model, version, tensors, true, metadata, onProgress)
    } catch (err) {
      if (adopted.length > 0) await sm.drop({ keys: adopted })
      throw err
    } finally {
      await removeRegion(name)
    }
  }

  return {
    async start () {
      const stale = (await readdir(shmDir).catch(() => [] as string[])).filter(name => name.startsWith(namePrefix))
      for (const name of stale) await unlink(`${shmDir}/${name}`).catch(() => {})
      if (stale.length > 0) logger.warn({ regions: stale }, 'removed weights regions a previous run handed out and never published')
    },
    async createRegion (model, requested, tensors, owner) {
      checkModelName(model)
      if (!Array.isArray(tensors) || tensors.some(t => typeof t !== 'object' || t === null)) throw new AgentError('ERR_BAD_REQUEST', 'tensors must be a list of { name, dtype, shape }')
      let offset = 0
      const laidOut: RegionTensor[] = tensors.map((t, i) => {
        const bytes = checkTensor(t, `tensors[${i}]`)
        const placed = { name: t.name, dtype: t.dtype, shape: t.shape, offset, bytes }
        offset += Math.ceil(bytes / 4096) * 4096
        return placed
      })
      checkUniqueNames(tensors)
      const version = requested ?? versions.nextVersion(model)
      if (!Number.isSafeInteger(offset)) throw new AgentError('ERR_BAD_REQUEST', `the tensors add up to more than ${Number.MAX_SAFE_INTEGER} bytes`)
      const reservation = versions.reserve(model, version, owner)
      // Checked before anything is created, so the trainer learns before writing gigabytes: the quota
      // the publish's adoptShm applies, counting this model's other open regions and those being
      // handed out (checked and counted in one tick: concurrent hand-outs see each other) ...
      const tensorBytes = laidOut.reduce((a, x) => a + x.bytes, 0)
      try {
        const promised = [...regions.values()].filter(r => r.model === model).reduce((a, r) => a + r.tensors.reduce((b, x) => b + x.bytes, 0), creating.get(model) ?? 0)
        sm.checkQuota(laidOut.map(t => weightsKey(model, t.name, t.dtype, t.shape, version)), promised)
      } catch (err) {
        reservation.release()
        throw err
      }
      creating.set(model, (creating.get(model) ?? 0) + tensorBytes)
      creatingBytes += offset
      const name = `${namePrefix}${model}-v${version}-${randomBytes(6).toString('hex')}`
      let mapping: SharedMemoryObject | undefined
      try {
        // ... then the space left in /dev/shm, less the regions being created alongside.
        await checkShmSpace(offset)
        try {
          const handle = await open(`${shmDir}/${name}`, 'wx', 0o600)
          try { await handle.truncate(offset) } finally { await handle.close() }
          mapping = openSharedMemory(name)
        } catch (cause) {
          throw new AgentError('ERR_IO', `cannot create the shared-memory region ${shmDir}/${name}: ${(cause as Error).message}`, { cause })
        }
        // Every page allocated now (MADV_POPULATE_WRITE on a native thread): tmpfs or a memory limit that
        // cannot hold the region fails here, with a clear error, rather than as a SIGBUS in the trainer's
        // writes; the publish's pass over the mapping then takes no page faults.
        try {
          const populated = await populate(mapping.range(0, mapping.sizeBytes))
          if (!populated && !populateUnsupportedSaid) {
            populateUnsupportedSaid = true
            logger.warn({ region: name }, 'this kernel cannot allocate a region\'s pages at hand-out (MADV_POPULATE_WRITE needs Linux 5.14): a /dev/shm that cannot hold a region shows as SIGBUS in the writer instead of ERR_TIER_FULL here')
          }
        } catch (cause) {
          throw new AgentError('ERR_TIER_FULL', `cannot allocate the ${offset} bytes of shared-memory region ${name} (${(cause as Error).message}): /dev/shm or this agent's memory limit cannot hold it`, { cause })
        }
      } catch (err) {
        mapping?.close()
        await unlink(`${shmDir}/${name}`).catch(() => {})
        reservation.release()
        throw err
      } finally {
        creatingBytes -= offset
        creating.set(model, creating.get(model)! - tensorBytes)
      }
      const region: WeightsRegion = { region: name, model, version, bytes: offset, tensors: laidOut }
      regions.set(name, { ...region, release: reservation.release, publishing: false, mapping })
      logger.info({ model, version, region: name, bytes: offset }, 'weights region handed out')
      return region
    },
    async publish (request, { owner, onProgress = () => {} } = {}) {
      const model = checkModelName(request.model)
      const metadata = request.metadata ?? {}
      const source = request.source
      if (source.kind === 'region') return await publishRegion(model, request.version, source.region, metadata, onProgress)
      const version = request.version ?? versions.nextVersion(model)
      const reservation = versions.reserve(model, version, owner)
      try {
        if (source.kind === 'keys') return await publishKeys(model, version, source.prefix, metadata, onProgress)
        if (source.kind === 'safetensors') return await publishSafetensors(model, version, source.path, metadata, onProgress)
        throw new AgentError('ERR_BAD_REQUEST', `unknown publish source ${JSON.stringify((source as { kind: unknown }).kind)}`)
      } finally {
        reservation.release()
      }
    },
    async discardRegion (name) {
      const region = regions.get(name)
      if (region === undefined) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `no region ${name} handed out by this agent`)
      if (region.publishing) throw new AgentError('ERR_WEIGHTS_VERSION_EXISTS', `region ${name} is being published`)
      await removeRegion(name)
      logger.info({ region: name }, 'weights region discarded')
    },
    async close () {
      // A region being published is consumed by that publish (its finally removes it).
      for (const [name, region] of regions) if (!region.publishing) await removeRegion(name)
    },
  }
}

