/**
 * The weight-transfer agent (RLBoost §4.3) as one service: committed versions
 * (version-store), publishing (publisher), the authenticated data server
 * (tcp-server) and pulling (puller) over the transport interface.
 */
import { join } from 'node:path'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { StateManager } from '../state/state-manager.ts'
import type { AvailabilitySections } from '../../mesh/membership/availability-publisher.ts'
import type { PeerView } from '../../mesh/membership/mesh-views.ts'
import { createDataAuth } from './data-auth.ts'
import { findHolders, pickHolder, swarmPeers, weightsAdvert } from './holders.ts'
import { createSwarmHoldings } from './swarm-holdings.ts'
import { presetOptionsFromMetadata, presetRules, type PresetOptions } from './layout-presets.ts'
import { createPublisher, type PublishRequest, type TensorSpec, type WeightsRegion } from './publisher.ts'
import { createPuller, type PullResult } from './puller.ts'
import type { PullFileTarget } from './pull-file.ts'
import { layoutId, type LayoutRule, type TargetLayout } from './reshard.ts'
import { capabilities, createUcxWorker, type UcxWorker } from '../../native/index.ts'
import { createTcpConnector } from './tcp-client.ts'
import { createUcxConnector } from './ucx-connector.ts'
import { createUcxServe, type UcxServe } from './ucx-serve.ts'
import { createTcpWeightServer } from './tcp-server.ts'
import type { WeightServerCounters } from './transport.ts'
import { createVersionStore, type ModelOwner, type WeightsManifest } from './version-store.ts'
import type { WeightsConfig } from './weights-config.ts'
import type { PublishInProgress, PullInProgress, VersionList, VersionSummary } from '../api/wire/weights.ts'

export interface WeightsServiceOptions extends WeightsConfig {
  /** Directory of the manifest files (<stateDir>/weights). */
  manifestDir: string
}

export interface WeightsServiceComponents {
  stateManager: StateManager
  /** The cluster key (mesh/membership/cluster-key.ts format), shared by every agent. */
  clusterKey: Uint8Array
  logger: Logger
  /** The local agent's view of its mesh peers; undefined while the mesh is not running. Used by pulls without `from`. */
  meshPeers?: () => PeerView[] | undefined
  /** Tells the mesh that advert() changed (the served versions); a no-op while the mesh is not running. */
  availabilityChanged?: () => void
}

/** A pull's target layout as the API takes it: rules, or a preset with its parameters. */
export interface LayoutSpec {
  tp: number
  rank: number
  rules?: LayoutRule[]
  preset?: string
  presetOptions?: PresetOptions
}

export interface PullOptions {
  /** host:port of the serving agent; absent: a holder advertised in the mesh (holders.ts pickHolder). */
  from?: string
  model: string
  version: number
  layout?: LayoutSpec
  /** Full holders of the same version to resume from if `from` drops it mid-pull (a pull without `from` gets them from the mesh). */
  fallbacks?: string[]
  streams?: number
  /** Write to this safetensors file instead of keys (puller.ts, pull-file.ts). */
  out?: PullFileTarget
  /** Swarm peers to fetch tensors from (data addresses); absent: the mesh's agents pulling or holding the version whole. */
  peers?: string[]
  onProgress?: (doneBytes: number, totalBytes: number) => void
  signal?: AbortSignal
}

export type { PublishInProgress, PullInProgress, VersionSummary }


export interface WeightsService {
  start(): Promise<void>
  stop(): Promise<void>
  /** host:port of the data server. */
  address(): string
  /** How the data server serves weights: "tcp", and "ucx" unless `ucxUnavailable` says why not. */
  served(): { transports: Array<'ucx' | 'tcp'>, ucxUnavailable?: string }
  /** See Publisher.createRegion: the model is claimed for `owner` (a uid; undefined = the agent) if nobody owns it, in the tick this is called. */
  createRegion(model: string, version: number | undefined, tensors: TensorSpec[], owner?: number): Promise<WeightsRegion>
  /** Removes a region handed out and never published (a trainer giving up on that version). */
  discardRegion(name: string): Promise<void>
  /** See Publisher.publish: the model is claimed for `owner` as createRegion does; list() shows it in flight. */
  publish(request: PublishRequest, owner?: number): Promise<WeightsManifest>
  pull(options: PullOptions): Promise<PullResult>
  /** Versions held, manifests found damaged at start, connections pulling from this agent, and the pulls and publishes this agent is making. */
  list(): Pick<VersionList, 'versions' | 'damaged' | 'pulls' | 'pulling' | 'publishing' | 'distributing' | 'droppedPeers' | 'ucx'>
  manifest(model: string, version: number): WeightsManifest
  retire(model: string, version: number): Promise<void>
  /** Who owns `model` here (version-store.ts "Ownership"): a uid, 'agent', or undefined when nobody does. */
  modelOwner(model: string): ModelOwner | undefined
  /** This agent's `weights` section of its mesh availability record: data address and the versions it serves. */
  advert(): AvailabilitySections
  /** Totals since start and what is in flight now, without copying the version list (for the metrics endpoint). */
  counters(): WeightsCounters
}

export interface WeightsCounters {
  /** The data server's: bytes served, connections accepted / refused / in their handshake / authenticated. */
  server: WeightServerCounters
  /** Bytes that arrived from serving agents in this agent's pulls. */
  pulledBytes: number
  /** Pulls this agent finished, by outcome. */
  pulls: { completed: number, failed: number }
  /** Pulls this agent is making now. */
  pulling: number
  /** Connections reading a version from this agent now. */
  serving: number
  /** Versions held (complete or partial). */
  versions: number
}

/** Resolves a LayoutSpec against a manifest (presets take head counts from its metadata unless given). */
export function resolveLayout (spec: LayoutSpec, manifest: WeightsManifest): TargetLayout {
  if ((spec.rules === undefined) === (spec.preset === undefined)) throw new AgentError('ERR_LAYOUT_INVALID', 'a layout needs either rules or a preset')
  const given = Object.keys(spec.presetOptions ?? {})
  if (spec.rules !== undefined && given.length > 0) {
    throw new AgentError('ERR_LAYOUT_INVALID', `${given.join(', ')} shape a preset; layout rules state their own head counts and vocab split (heads, kvHeads, qkv, vocab in the rules)`)
  }
  const rules = spec.rules ?? presetRules(spec.preset!, { ...presetOptionsFromMetadata(manifest.metadata), ...spec.presetOptions })
  return { tp: spec.tp, rank: spec.rank, rules }
}

/** Dropped swarm peers `list()` remembers. */
const maxDroppedPeers = 16

export function createWeightsService (options: WeightsServiceOptions, components: WeightsServiceComponents): WeightsService {
  const { stateManager, logger } = components
  const auth = createDataAuth(components.clusterKey)
  /** The data server's UCX side, when it serves UCX (below): a retired version's keys are revoked at once. */
  let ucxServe: UcxServe | undefined
  const committed = (model: string, version: number): boolean => versions.list().some(m => m.model === model && m.version === version)
  const versions = createVersionStore({ dir: options.manifestDir, retainVersions: options.retainVersions }, {
    stateManager, logger, changed: () => { ucxServe?.revoke(committed); components.availabilityChanged?.() },
  })
  const publisher = createPublisher({ chunkBytes: options.chunkBytes, durable: options.durable, owner: options.manifestDir }, { stateManager, versions, logger })
  const swarm = createSwarmHoldings(() => components.availabilityChanged?.())
  // UCX (PROTOCOL.md "RDMA (UCX)"): served when listed (and uploads are not paced), used by pulls when listed
  // before tcp. The worker is made at first use.
  const ucxListed = options.transports.includes('ucx')
  const ucxReady = ucxListed && capabilities.ucx.compiled
  const ucxRefusal = !ucxListed ? 'weights.transports does not list "ucx"'
    : !ucxReady ? 'its native addon was built without UCX'
      : options.uploadBytesPerSecond > 0 ? 'weights.uploadBytesPerSecond paces what it serves, and one-sided reads cannot be paced' : undefined
  if (ucxListed && ucxRefusal !== undefined) logger.info({ transports: options.transports }, `weights served over TCP only: ${ucxRefusal}${ucxReady ? '' : ' (install libucx-dev and rebuild for UCX); pulls read over TCP too'}`)
  let ucxWorker: UcxWorker | undefined
  const worker = (): UcxWorker => (ucxWorker ??= createUcxWorker())
  const tcpConnector = createTcpConnector(auth)
  const connector = ucxReady && options.transports.indexOf('ucx') < options.transports.indexOf('tcp')
    ? createUcxConnector(tcpConnector, { ucxOverTcp: options.ucxOverTcp }, { worker, logger })
    : tcpConnector
  const server = createTcpWeightServer({
    listen: options.dataListen,
    serveWindowBytes: options.serveWindowBytes,
    chunkBytes: options.chunkBytes,
    authTimeoutMs: options.authTimeoutMs,
    maxPendingConnections: options.maxPendingConnections,
    maxPendingPerAddress: options.maxPendingPerAddress,
    maxConnections: options.maxConnections,
    frameTimeoutMs: options.frameTimeoutMs,
    idleTimeoutMs: options.idleTimeoutMs,
    uploadBytesPerSecond: options.uploadBytesPerSecond,
  }, { stateManager, versions, auth, logger, swarm, ...(ucxRefusal === undefined ? { ucx: ucxServe = createUcxServe({ stateManager, worker }) } : { ucxRefusal }) })
  const pulling = new Set<PullInProgress>()
  const publishing = new Set<PublishInProgress>()
  const pullTotals = { pulledBytes: 0, completed: 0, failed: 0 }
  /** Swarm peers this agent's pulls dropped, newest last (at most maxDroppedPeers). */
  const droppedPeers: VersionList['droppedPeers'] = []
  const puller = createPuller({ chunkBytes: options.chunkBytes, windowBytes: options.pullWindowBytes, pieceTimeoutMs: options.swarmPeerTimeoutMs }, {
    stateManager, connector, versions, logger, received: bytes => { pullTotals.pulledBytes += bytes }, swarm,
  })

  return {
    async start () {
      await versions.load()
      await publisher.start()
      await server.start()
    },
    async stop () {
      await server.stop()
      await publisher.close()
      ucxWorker?.close()
    },
    address: () => server.address,
    served: () => ucxRefusal === undefined ? { transports: ['ucx', 'tcp'] } : { transports: ['tcp'], ucxUnavailable: ucxRefusal },
    createRegion: (model, version, tensors, owner) => publisher.createRegion(model, version, tensors, owner),
    discardRegion: name => publisher.discardRegion(name),
    async publish (request, owner) {
      const progress: PublishInProgress = { model: request.model, version: request.version ?? 'next', stage: request.source.kind === 'safetensors' ? 'reading' : 'checksumming', doneBytes: 0, totalBytes: 0 }
      publishing.add(progress)
      try {
        return await publisher.publish(request, { owner, onProgress: (stage, done, totalBytes) => { progress.stage = stage; progress.doneBytes = done; progress.totalBytes = totalBytes } })
      } finally {
        publishing.delete(progress)
      }
    },
    async pull (o) {
      const chosen = o.from !== undefined ? { address: o.from, fallbacks: o.fallbacks ?? [] } : holderOf(o.model, o.version, o.layout)
      const from = chosen.address
      const progress: PullInProgress = { from, model: o.model, version: o.version === -1 ? 'latest' : o.version, doneBytes: 0, totalBytes: 0 }
      // A swarm needs other agents with a data server in the mesh. Without any, the pull walks its tensors in
      // order, as pulls from one source do (concurrent pullers of one server then share its NVMe reads).
      const swarmPossible = (components.meshPeers?.() ?? []).some(p => p.state === 'alive' && p.record?.addresses.weights !== undefined)
      pulling.add(progress)
      let ok = false
      try {
        const result = await puller.pull({
          from,
          fallbacks: chosen.fallbacks,
          model: o.model,
          version: o.version,
          streams: o.streams ?? options.streams,
          onProgress: (done, totalBytes) => { progress.doneBytes = done; progress.totalBytes = totalBytes; o.onProgress?.(done, totalBytes) },
          ...(o.layout !== undefined ? { layout: (m: WeightsManifest) => resolveLayout(o.layout!, m) } : {}),
          ...(o.signal !== undefined ? { signal: o.signal } : {}),
          ...(o.out !== undefined ? { out: o.out } : {}),
          // The swarm: other agents of the mesh pulling or holding the version whole, or (sliced) the pull's layout.
          ...(components.meshPeers !== undefined ? { laterHolders: (version: number) => findHolders(components.meshPeers?.() ?? [], o.model, version).filter(h => h.layout === undefined && h.version === version).map(h => h.address) } : {}),
          ...(o.peers !== undefined ? { peers: () => o.peers! } : swarmPossible ? { peers: (version: number, layout?: string) => swarmPeers(components.meshPeers?.() ?? [], o.model, version, from, Math.random, layout) } : {}),
        })
        ok = true
        for (const d of result.droppedSources ?? []) droppedPeers.push({ ...d, model: result.model, version: result.version, atMs: Date.now() })
        droppedPeers.splice(0, Math.max(0, droppedPeers.length - maxDroppedPeers))
        return result
      } finally {
        pulling.delete(progress)
        pullTotals[ok ? 'completed' : 'failed']++
      }
    },
    list: () => ({
      versions: versions.list().map(m => ({
        model: m.model, version: m.version, committedAtMs: m.committedAtMs, durable: m.durable, owner: versions.ownerOf(m.model) ?? 'agent',
        tensors: m.tensors.length, bytes: m.partial !== undefined ? m.partial.slices.reduce((a, s) => a + s.bytes, 0) : m.totalBytes,
        ...(m.partial !== undefined ? { partial: { layout: m.partial.layout, tp: m.partial.tp, rank: m.partial.rank } } : {}),
      })),
      damaged: versions.damaged(),
      pulls: server.activePulls(),
      pulling: [...pulling].map(p => ({ ...p })),
      publishing: [...publishing].map(p => ({ ...p })),
      distributing: distributing(),
      droppedPeers: droppedPeers.map(d => ({ ...d })),
      ucx: ucxServe?.served() ?? [],
    }),
    manifest: (model, version) => versions.get(model, version),
    async retire (model, version) {
      const retiring = versions.retire(model, version)
      // The version left the committed set synchronously: revoke its UCX keys now, not after the durable writes.
      ucxServe?.revoke(committed)
      await retiring
    },
    modelOwner: model => versions.ownerOf(model),
    counters: () => ({
      server: server.counters(),
      pulledBytes: pullTotals.pulledBytes,
      pulls: { completed: pullTotals.completed, failed: pullTotals.failed },
      pulling: pulling.size,
      serving: server.activePulls().length,
      versions: versions.list().length,
    }),
    advert: () => weightsAdvert(server.address, [
      ...versions.list().map(m => ({ model: m.model, version: m.version, ...(m.partial !== undefined ? { layout: m.partial.layout } : {}) })),
      ...swarm.list().map(h => ({ model: h.model, version: h.version, ...(h.layout !== undefined ? { layout: h.layout } : {}), pulling: true as const })),
    ]),
  }

  /**
   * Versions being pulled somewhere (mesh adverts with `pulling`, and this agent's swarm holdings), whole
   * or as one layout's slices: who holds and who pulls each (a sliced entry counts the holders of its layout).
   */
  function distributing (): VersionList['distributing'] {
    const peers = (components.meshPeers?.() ?? []).filter(p => p.state === 'alive')
    const here = swarm.list()
    type Entry = { model: string, version: number, layout?: string | undefined }
    const idOf = (e: Entry): string => `${e.model}\u0000${e.version}\u0000${e.layout ?? ''}`
    const same = (a: Entry, b: Entry): boolean => idOf(a) === idOf(b)
    const found = new Map<string, Entry>()
    for (const h of here) found.set(idOf(h), h)
    for (const p of peers) for (const w of p.record?.weights ?? []) if (w.pulling === true) found.set(idOf(w), w)
    return [...found.values()].map(({ model, version, layout }) => {
      const adverts = peers.map(p => (p.record?.weights ?? []).find(w => same(w, { model, version, layout })))
      const mine = here.find(h => same(h, { model, version, layout }))
      const holdsHere = versions.list().some(m => m.model === model && m.version === version && m.partial?.layout === layout)
      return {
        model, version, ...(layout !== undefined ? { layout } : {}),
        holders: adverts.filter(w => w !== undefined && w.pulling !== true).length + (holdsHere ? 1 : 0),
        pulling: adverts.filter(w => w?.pulling === true).length + (mine !== undefined ? 1 : 0),
        ...(mine !== undefined ? { here: { tensors: mine.tensors, heldTensors: mine.heldTensors, heldBytes: mine.heldBytes, totalBytes: mine.totalBytes } } : {}),
      }
    }).sort((a, b) => a.model < b.model ? -1 : a.model > b.model ? 1 : a.version - b.version || ((a.layout ?? '') < (b.layout ?? '') ? -1 : 1))
  }

  /**
   * The data address of an alive peer advertising the version (the highest
   * one for latest), and the full holders to fall back on. A layout given by
   * rules has a layout id before any manifest is read, so holders of exactly
   * its slices qualify; a preset's rules depend on the manifest's metadata,
   * so such pulls go to full holders.
   */
  function holderOf (model: string, version: number, layout: LayoutSpec | undefined): { address: string, fallbacks: string[] } {
    const peers = components.meshPeers?.()
    if (peers === undefined) throw new AgentError('ERR_MESH_UNAVAILABLE', 'a pull without a serving agent\'s address (from) finds one in the mesh, which is not running on this agent')
    const id = layout?.rules !== undefined ? layoutId({ tp: layout.tp, rank: layout.rank, rules: layout.rules }) : undefined
    const holder = pickHolder(peers, model, version, Math.random, id)
    logger.info({ model, version, holder: holder.node, address: holder.address, advertised: holder.version, layout: holder.layout ?? null }, 'weights holder chosen from the mesh')
    return holder
  }
}

export const manifestDirOf = (stateDir: string): string => join(stateDir, 'weights')
