/**
 * Committed weight versions and their manifests (RLBoost §4.3: the trainer's
 * full weights in host memory managed by the agent, served by version).
 *
 * Contracts:
 * - A version is visible only once committed: its tensors are stored keys
 *   (and on NVMe when `durable`), their chunk checksums computed, and its
 *   manifest file written durably (temp file, fsync, rename, fsync of the
 *   directory). A crash before the rename leaves no manifest, so the version
 *   never existed. Once `commit` resolved (the publish was acknowledged), a
 *   durable version is found again by every later start, whatever key
 *   namespace its tensors are stored under.
 * - Start-up never deletes a manifest it cannot explain. The one it can: a
 *   version at or below `retiredUpTo` (a retire interrupted between its two
 *   steps), which it finishes. A manifest that cannot be read, or whose keys
 *   are not all stored, is kept and reported as damaged (`damaged()`, the
 *   log says why); its version number stays taken, and `retire` removes it.
 * - Versions of a model are monotonic: a new one must exceed every committed,
 *   retired or in-progress version. Committed versions are immutable.
 * - Retention keeps the last `retainVersions` of each model; retiring removes
 *   the manifest first (new readers get ERR_WEIGHTS_RETIRED), then drops the
 *   keys the version owns (StateManager.drop waits for in-flight readers).
 * - Ownership (agent/api/AUTHORIZATION.md "Model ownership"): a model is
 *   owned by the uid whose reservation created its record (the first publish
 *   or region hand-out on this agent), or by the agent itself when the first
 *   reservation named no uid (a pull, an in-process publisher). The owner
 *   never changes. A reservation that ends without a commit leaves a model
 *   with no version, committed or retired, unowned again. A uid owner is
 *   written durably (`owner.json`) before the model's first manifest, and is
 *   kept as long as the model directory: every version retired, the name is
 *   still its owner's. A model directory without `owner.json` (written by an
 *   agent before owners were recorded, or owned by the agent) is the agent's.
 *   The store records; who may publish or retire is the API's decision.
 * Manifest files: `<dir>/<model>/v<version>.json`; `<dir>/<model>/retired.json`
 * (`{ "retiredUpTo": N }`, written durably before a manifest is removed) keeps
 * versions monotonic and "retired" distinguishable from "never existed" across
 * restarts; `<dir>/<model>/owner.json` (`{ "uid": N }`). All of it runs on the
 * event loop.
 */
import { mkdir, readdir, readFile, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { mkdirDurably, writeFileDurably } from '../../core/durable-file.ts'
import { formatKey, parseKey, type Dtype } from '../state/keys.ts'
import type { StateManager } from '../state/state-manager.ts'
import { latestVersion, modelNamePattern } from './protocol.ts'
import type { DamagedVersion } from '../api/wire/weights.ts'

export interface ManifestTensor {
  name: string
  dtype: Dtype
  shape: number[]
  bytes: number
  /** The StateManager key holding the tensor's bytes. */
  key: string
  /** crc32c of each chunkBytes-sized chunk of the tensor (the last may be shorter). */
  chunkChecksums: number[]
}

export interface WeightsManifest {
  model: string
  version: number
  /** Bytes per checksummed chunk. */
  chunkBytes: number
  totalBytes: number
  committedAtMs: number
  /** Free-form model metadata (safetensors __metadata__, e.g. num_key_value_heads). */
  metadata: Record<string, string>
  /** Whether retiring the version drops its keys (false when published from keys the trainer owns). */
  ownsKeys: boolean
  /** Whether the keys are on NVMe (the version survives a restart). */
  durable: boolean
  tensors: ManifestTensor[]
  /**
   * Set when this agent holds only one tensor-parallel rank's slices of the
   * version (a sliced pull: PROTOCOL.md "Partial holders"). `tensors` is then
   * the full holder's table (whole-tensor checksums; its `key`s are empty:
   * nothing of it is stored here whole), and the agent serves READs of
   * exactly these slices.
   */
  partial?: PartialHolding
}

/** The (layout, rank) slices of a version an agent holds and serves. */
export interface PartialHolding {
  /** layoutId(): tp, rank and a digest of the resolved rules. */
  layout: string
  tp: number
  rank: number
  slices: HeldSlice[]
}

/** One held slice: what a READ names (tensor index, dim, ranges) and the stored key with its checksums. */
export interface HeldSlice {
  index: number
  dim: number | null
  ranges: Array<{ start: number, count: number }>
  shape: number[]
  bytes: number
  /** The StateManager key holding the slice's contiguous bytes ('' for a slice of 0 bytes). */
  key: string
  /** crc32c of each chunkBytes window of the slice's bytes (the manifest's chunkBytes). */
  chunkChecksums: number[]
}

/** The keys a version's manifest names as stored on this agent. */
export function storedKeysOf (manifest: WeightsManifest): string[] {
  return manifest.partial !== undefined ? manifest.partial.slices.filter(s => s.key !== '').map(s => s.key) : manifest.tensors.map(t => t.key)
}

export type { DamagedVersion }

/** A model's owner: the uid that first published it on this agent, or 'agent' (pulled, or published in-process). */
export type ModelOwner = number | 'agent'

export interface VersionStore {
  /** Reads the manifests on disk; those it cannot serve are kept and reported (damaged()). */
  load(): Promise<void>
  /**
   * Reserves `version` of `model` for a publish in progress; ERR_WEIGHTS_VERSION_EXISTS if not above every known one.
   * A model nobody owns is owned from now on by `owner` (a uid; undefined = the agent); an owned one keeps its owner.
   */
  reserve(model: string, version: number, owner?: number): { release(): void }
  /** Who owns `model` on this agent; undefined when nobody does (no version committed, retired, damaged or reserved). */
  ownerOf(model: string): ModelOwner | undefined
  /** The next version number a publish without one gets. */
  nextVersion(model: string): number
  /** Makes a reserved version visible (writing its manifest when durable), then applies retention. */
  commit(manifest: WeightsManifest): Promise<void>
  /** A committed version (`-1` = latest); ERR_WEIGHTS_NOT_FOUND or ERR_WEIGHTS_RETIRED. */
  get(model: string, version: number): WeightsManifest
  list(): WeightsManifest[]
  /** Manifests found at start that are not served, by model and version. */
  damaged(): DamagedVersion[]
  /** Retires a committed version, or removes a damaged one's manifest. */
  retire(model: string, version: number): Promise<void>
}

export interface VersionStoreOptions {
  /** Directory of the manifest files. */
  dir: string
  /** Versions kept per model; older ones are retired on commit. */
  retainVersions: number
}

export interface VersionStoreComponents {
  stateManager: StateManager
  logger: Logger
  /** Called after the set of committed versions changed (load, commit, retire); must not throw. */
  changed?: () => void
}

/** The key of a tensor of a published version: namespace weights/<model>, whole tensor. */
export function weightsKey (model: string, name: string, dtype: Dtype, shape: number[], version: number, offsets: number[] = shape.map(() => 0)): string {
  return formatKey({ namespace: `weights/${model}`, fqn: name, role: 'param', offsets, shape, dtype, version })
}

export function checkModelName (model: string): string {
  if (!modelNamePattern.test(model)) throw new AgentError('ERR_BAD_REQUEST', `model name ${JSON.stringify(model)} may only contain letters, digits, "_", "-", "." (1..128), and may not be "." or ".."`)
  return model
}

interface ModelVersions {
  committed: Map<number, WeightsManifest>
  /** Manifests kept but not served; `manifest` when the file could be read. */
  damaged: Map<number, DamagedVersion & { manifest?: WeightsManifest }>
  reserved: Set<number>
  /** Highest version ever retired (versions at or below are gone). */
  retiredUpTo: number
  /** Set by the first reservation (or load); undefined: nobody owns the model. */
  owner: ModelOwner | undefined
  /** The owner is on disk (owner.json, or a model directory found at start). */
  ownerKept: boolean
}

export function createVersionStore (options: VersionStoreOptions, components: VersionStoreComponents): VersionStore {
  const { stateManager, logger } = components
  const models = new Map<string, ModelVersions>()
  const modelOf = (model: string): ModelVersions => {
    let m = models.get(model)
    if (m === undefined) { m = { committed: new Map(), damaged: new Map(), reserved: new Set(), retiredUpTo: -1, owner: undefined, ownerKept: false }; models.set(model, m) }
    return m
  }
  /** A reservation ended: a model that holds nothing and whose owner is not on disk has no owner again. */
  const forgetOwnerIfUnused = (m: ModelVersions): void => {
    if (!m.ownerKept && m.reserved.size === 0 && m.committed.size === 0 && m.damaged.size === 0 && m.retiredUpTo < 0) m.owner = undefined
  }
  /** Writes a uid owner before the model's first manifest (the agent's ownership is the absence of the file). */
  async function keepOwner (model: string, m: ModelVersions): Promise<void> {
    if (m.ownerKept) return
    if (typeof m.owner === 'number') {
      await mkdirDurably(join(options.dir, model), 0o755)
      await writeFileDurably(join(options.dir, model, 'owner.json'), JSON.stringify({ uid: m.owner }), 0o640)
    }
    m.ownerKept = true
  }
  const highest = (m: ModelVersions): number => Math.max(m.retiredUpTo, ...m.committed.keys(), ...m.damaged.keys(), ...m.reserved)
  const manifestFile = (model: string, version: number): string => join(options.dir, model, `v${version}.json`)

  async function retire (model: string, version: number): Promise<void> {
    const m = models.get(model)
    const damaged = m?.damaged.get(version)
    const manifest = m?.committed.get(version) ?? damaged?.manifest
    if (m === undefined || (manifest === undefined && damaged === undefined)) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `no committed version ${version} of model ${model}`)
    m.committed.delete(version)
    m.damaged.delete(version)
    m.retiredUpTo = Math.max(m.retiredUpTo, version)
    await keepOwner(model, m)
    await mkdirDurably(join(options.dir, model), 0o755)
    await writeFileDurably(join(options.dir, model, 'retired.json'), JSON.stringify({ retiredUpTo: m.retiredUpTo }), 0o640)
    if (damaged !== undefined || manifest!.durable) await unlink(manifestFile(model, version)).catch(() => {})
    if (manifest?.ownsKeys === true) {
      // A damaged version's keys may be gone already; drop those still stored.
      const stored = new Set(stateManager.storedKeys(`weights/${model}/`).map(k => k.text))
      await stateManager.drop({ keys: storedKeysOf(manifest).filter(k => damaged === undefined || stored.has(k)) })
    }
    logger.info({ model, version, damaged: damaged !== undefined }, 'weights version retired')
    components.changed?.()
  }

  /** Keeps a manifest start-up cannot serve, and says why. */
  function keepDamaged (entry: DamagedVersion & { manifest?: WeightsManifest }): void {
    modelOf(entry.model).damaged.set(entry.version, entry)
    logger.error({ model: entry.model, version: entry.version, file: entry.file, reason: entry.reason },
      'weights version damaged: its manifest is kept but not served (agentctl weights list shows it; agentctl weights retire removes it)')
  }

  return {
    async load () {
      await mkdir(options.dir, { recursive: true })
      // Every stored key, whatever its namespace: a version published from a trainer's keys names them.
      const stored = new Set(stateManager.storedKeys().map(k => k.text))
      for (const entry of await readdir(options.dir, { withFileTypes: true }).catch(() => [])) {
        const model = entry.name
        // Only model directories: a stray file or a name that is not a model's is reported and skipped, never fatal.
        if (!entry.isDirectory() || !modelNamePattern.test(model)) {
          logger.warn({ entry: join(options.dir, model) }, 'weights: skipping an entry of the weights directory that is not a model directory')
          continue
        }
        const retired = await readFile(join(options.dir, model, 'retired.json'), 'utf8').then(text => (JSON.parse(text) as { retiredUpTo?: unknown }).retiredUpTo, () => undefined)
        if (Number.isSafeInteger(retired)) modelOf(model).retiredUpTo = retired as number
        modelOf(model).owner = await readOwner(join(options.dir, model, 'owner.json'), logger)
        modelOf(model).ownerKept = true
        for (const file of await readdir(join(options.dir, model))) {
          const match = /^v(0|[1-9]\d*)\.json$/.exec(file)
          if (match === null) continue
          const version = Number(match[1])
          const path = join(options.dir, model, file)
          let manifest: WeightsManifest
          try {
            manifest = JSON.parse(await readFile(path, 'utf8')) as WeightsManifest
            if (manifest.model !== model || manifest.version !== version || !Array.isArray(manifest.tensors)) throw new Error('its model or version does not match its file name')
            for (const k of storedKeysOf(manifest)) parseKey(k)
          } catch (err) {
            keepDamaged({ model, version, file: path, reason: `unreadable: ${(err as Error).message}` })
            continue
          }
          if (version <= modelOf(model).retiredUpTo) {
            // retire() writes retired.json, then removes the manifest: a crash in between is finished here.
            logger.info({ model, version, file: path }, 'weights version was retired before a restart: removing its manifest')
            await unlink(path).catch(() => {})
            if (manifest.ownsKeys) await stateManager.drop({ keys: storedKeysOf(manifest).filter(k => stored.has(k)) })
            continue
          }
          const keys = storedKeysOf(manifest)
          const missing = keys.filter(k => !stored.has(k))
          if (missing.length > 0) {
            keepDamaged({ model, version, file: path, manifest, reason: `${missing.length} of ${keys.length} keys are not stored on this node (first: ${missing[0]})` })
            continue
          }
          modelOf(model).committed.set(version, manifest)
        }
      }
      const all = [...models.values()]
      logger.info({ models: models.size, versions: all.reduce((a, m) => a + m.committed.size, 0), damaged: all.reduce((a, m) => a + m.damaged.size, 0) }, 'weights versions loaded')
      components.changed?.()
    },
    reserve (model, version, owner) {
      checkModelName(model)
      if (!Number.isSafeInteger(version) || version < 0) throw new AgentError('ERR_BAD_REQUEST', `version must be a non-negative integer, got ${version}`)
      const m = modelOf(model)
      const top = highest(m)
      if (version <= top) throw new AgentError('ERR_WEIGHTS_VERSION_EXISTS', `version ${version} of ${model} is not above ${top}, the highest committed, retired or in-progress version (versions are monotonic)`)
      m.reserved.add(version)
      m.owner ??= owner ?? 'agent'
      return { release: () => { if (m.reserved.delete(version)) forgetOwnerIfUnused(m) } }
    },
    ownerOf: model => models.get(model)?.owner,
    nextVersion: model => highest(modelOf(checkModelName(model))) + 1,
    async commit (manifest) {
      const m = modelOf(manifest.model)
      if (!m.reserved.has(manifest.version)) throw new AgentError('ERR_INTERNAL', `version ${manifest.version} of ${manifest.model} was not reserved`)
      // Before the manifest: a version found at start always has its owner on disk.
      await keepOwner(manifest.model, m)
      if (manifest.durable) {
        await mkdirDurably(join(options.dir, manifest.model), 0o755)
        await writeFileDurably(manifestFile(manifest.model, manifest.version), JSON.stringify(manifest), 0o640)
      }
      m.reserved.delete(manifest.version)
      m.committed.set(manifest.version, manifest)
      logger.info({ model: manifest.model, version: manifest.version, tensors: manifest.tensors.length, bytes: manifest.totalBytes }, 'weights version committed')
      const old = [...m.committed.keys()].sort((a, b) => a - b).slice(0, Math.max(0, m.committed.size - options.retainVersions))
      for (const version of old) await retire(manifest.model, version)
      components.changed?.()
    },
    get (model, version) {
      const m = models.get(model)
      if (version === latestVersion) {
        const latest = m === undefined || m.committed.size === 0 ? undefined : Math.max(...m.committed.keys())
        if (latest === undefined) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `no committed version of model ${model} on this agent`)
        return m!.committed.get(latest)!
      }
      const manifest = m?.committed.get(version)
      if (manifest !== undefined) return manifest
      const damaged = m?.damaged.get(version)
      if (damaged !== undefined) throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `version ${version} of ${model} is damaged and not served: ${damaged.reason}`)
      if (m !== undefined && version <= m.retiredUpTo) throw new AgentError('ERR_WEIGHTS_RETIRED', `version ${version} of ${model} was retired (latest: ${m.committed.size > 0 ? Math.max(...m.committed.keys()) : 'none'})`)
      throw new AgentError('ERR_WEIGHTS_NOT_FOUND', `no committed version ${version} of model ${model} on this agent`)
    },
    list: () => [...models.values()].flatMap(m => [...m.committed.values()]).sort(byModelAndVersion),
    damaged: () => [...models.values()].flatMap(m => [...m.damaged.values()]).map(({ model, version, file, reason }) => ({ model, version, file, reason })).sort(byModelAndVersion),
    retire,
  }
}

/**
 * owner.json's uid; 'agent' when there is none (a model the agent owns, or one
 * from before owners were recorded), or when it cannot be read (logged: only
 * an admin may then publish or retire the model).
 */
async function readOwner (file: string, logger: Logger): Promise<ModelOwner> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') logger.warn({ file, err }, 'weights: cannot read a model\'s owner; the model is left to the agent (admins)')
    return 'agent'
  }
  let uid: unknown
  try { uid = (JSON.parse(text) as { uid?: unknown }).uid } catch {}
  if (Number.isSafeInteger(uid) && (uid as number) >= 0) return uid as number
  logger.warn({ file }, 'weights: a model\'s owner file does not name a uid; the model is left to the agent (admins)')
  return 'agent'
}

const byModelAndVersion = (a: { model: string, version: number }, b: { model: string, version: number }): number =>
  a.model < b.model ? -1 : a.model > b.model ? 1 : a.version - b.version
