/**
 * Wire schemas of /v1/weights: request bodies, answers and the views of
 * versions and pulls. The weights service's answers (PullResult,
 * PublishRequest, VersionSummary, ...) are these types; its manifest and
 * region carry a narrower dtype (agent/state/keys.ts Dtype) and are checked
 * against WeightsManifest and WeightsRegion at the routes.
 */
import { Type, type Static } from '@sinclair/typebox'

const uint = Type.Integer({ minimum: 0 })
const Model = Type.String({ pattern: '^(?!\\.{1,2}$)[A-Za-z0-9_.-]{1,128}$', description: 'letters, digits, "_", "-", "." (1..128); not "." or ".."' })
const VersionOrLatest = Type.Union([uint, Type.Literal('latest')])
const Dtype = Type.String({ minLength: 1, maxLength: 16 })
const Metadata = Type.Record(Type.String(), Type.String())

export const TensorSpecSchema = Type.Object({ name: Type.String({ minLength: 1, maxLength: 512 }), dtype: Dtype, shape: Type.Array(uint, { maxItems: 8 }) }, { additionalProperties: false })

/** POST /v1/weights/regions. */
export const RegionBodySchema = Type.Object({ model: Model, version: Type.Optional(uint), tensors: Type.Array(TensorSpecSchema, { minItems: 1, maxItems: 100_000 }) }, { additionalProperties: false })

export const PublishSourceSchema = Type.Union([
  Type.Object({ kind: Type.Literal('keys'), prefix: Type.String({ minLength: 1, maxLength: 1024 }) }, { additionalProperties: false }),
  Type.Object({ kind: Type.Literal('region'), region: Type.String({ minLength: 1, maxLength: 255 }) }, { additionalProperties: false }),
  Type.Object({ kind: Type.Literal('safetensors'), path: Type.String({ minLength: 2, maxLength: 4096, description: 'absolute path, readable by the agent' }) }, { additionalProperties: false }),
])

/** POST /v1/weights/publish. */
export const PublishBodySchema = Type.Object({
  model: Model,
  version: Type.Optional(Type.Integer({ minimum: 0, description: 'default: one above the highest known version of the model' })),
  source: PublishSourceSchema,
  metadata: Type.Optional(Metadata),
}, { additionalProperties: false })

const LayoutBody = Type.Object({
  tp: Type.Integer({ minimum: 1, maximum: 4096 }),
  rank: uint,
  rules: Type.Optional(Type.Array(Type.Unknown(), { maxItems: 1024, description: 'layout rules, as in a rules file { "rules": [...] }' })),
  preset: Type.Optional(Type.String({ maxLength: 32 })),
  heads: Type.Optional(Type.Integer({ minimum: 1, maximum: 1 << 20 })),
  kvHeads: Type.Optional(Type.Integer({ minimum: 1, maximum: 1 << 20 })),
  intermediateSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 1 << 30, description: 'the MLP\'s intermediate size, for a fused gate_up (default: two equal halves)' })),
  // The engines of reshard.ts vocabEngines (the planner imports from here, not the other way).
  engine: Type.Optional(Type.Union([Type.Literal('vllm'), Type.Literal('sglang'), Type.Literal('megatron')], { description: 'whose vocab split a preset follows (default vllm; sglang splits as vllm; megatron pads to 128 × tp)' })),
}, { additionalProperties: false })

/** POST /v1/weights/pull. */
export const PullBodySchema = Type.Object({
  from: Type.Optional(Type.String({ minLength: 3, maxLength: 300, description: 'host:port of the serving agent\'s data server; absent: an alive agent that advertises the version in the mesh (the highest version for latest)' })),
  model: Model,
  version: VersionOrLatest,
  layout: Type.Optional(LayoutBody),
  streams: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
  out: Type.Optional(Type.Object({
    path: Type.String({ minLength: 1, maxLength: 4096, pattern: '^/.*\\.safetensors$', description: 'absolute path of the file (inside api.pathRoots); it gets its name once complete, the bytes land in <path>.pull-partial, journaled in <path>.pull-journal (a repeat resumes)' }),
    overwrite: Type.Optional(Type.Boolean({ description: 'replace a file that exists (default: refuse, before a byte moves)' })),
    metadata: Type.Optional(Type.Record(Type.String({ maxLength: 256 }), Type.String({ maxLength: 65536 }), { description: 'more __metadata__ entries; agentd.model, agentd.version, agentd.tp, agentd.rank and agentd.padded_shapes are set by the agent' })),
  }, { additionalProperties: false, description: 'write the version (or this rank\'s shard) to one safetensors file straight from the network, instead of StateManager keys: nothing is stored, no slice needs the host pool whole' })),
}, { additionalProperties: false })

/** POST /v1/weights/retire. */
export const RetireBodySchema = Type.Object({ model: Model, version: uint }, { additionalProperties: false })

export const ManifestParamsSchema = Type.Object({ model: Model, version: Type.String({ pattern: '^(latest|0|[1-9][0-9]*)$' }) })
export const RegionParamsSchema = Type.Object({ region: Type.String({ minLength: 1, maxLength: 255 }) })

export const PullResultSchema = Type.Object({
  from: Type.String({ description: 'data address the pull started from (given, or the holder chosen from the mesh)' }),
  model: Type.String(),
  version: uint,
  bytes: Type.Integer({ minimum: 0, description: 'bytes of the slices this pull produced (needed bytes, including those already stored)' }),
  bytesReceived: Type.Integer({ minimum: 0, description: 'payload bytes received over the network (refetches included)' }),
  seconds: Type.Number(),
  tensors: uint,
  keys: Type.Array(Type.String()),
  names: Type.Array(Type.String(), { description: 'the tensor each key holds, by its name in the version (parallel to keys)' }),
  paddedShapes: Type.Optional(Type.Record(Type.String(), Type.Array(uint), { description: 'keys whose engine parameter is larger than the slice (vocab padding): the parameter\'s shape; rows past the key\'s are padding (zeros). A key of 0 rows is absent from keys and listed here' })),
  refetchedPieces: uint,
  reconnects: uint,
  switchedTo: Type.Array(Type.String(), { description: 'data addresses the pull resumed from after its source dropped the version' }),
  file: Type.Optional(Type.String({ description: 'with out: the file written (keys and names are then empty)' })),
  sources: Type.Record(Type.String(), uint, { description: 'verified payload bytes per source (data address): the holder pulled from, and swarm peers' }),
  droppedSources: Type.Optional(Type.Array(Type.Object({ address: Type.String(), reason: Type.String() }), { description: 'swarm peers no longer used by this pull, and why (failed, too slow, or served a chunk that did not match the manifest)' })),
  ucx: Type.Optional(Type.Object({
    bytes: Type.Integer({ minimum: 0, description: 'payload bytes read one-sided with UCX (the rest came over TCP)' }),
    transports: Type.Array(Type.String(), { description: 'the UCX transports that carried them (transport/device, e.g. rc_mlx5/mlx5_0:1, tcp/eth0, posix/memory)' }),
    fallback: Type.Optional(Type.String({ description: 'why no byte came over UCX (the server does not serve UCX, the version does not fit its pool, ...)' })),
  }, { description: 'present when the pull tried UCX (weights.transports lists "ucx" before "tcp")' })),
})

export const WeightsManifestSchema = Type.Object({
  model: Type.String(), version: uint, chunkBytes: uint, totalBytes: uint, committedAtMs: uint, metadata: Metadata, ownsKeys: Type.Boolean(), durable: Type.Boolean(),
  tensors: Type.Array(Type.Object({ name: Type.String(), dtype: Type.String(), shape: Type.Array(uint), bytes: uint, key: Type.String(), chunkChecksums: Type.Array(uint) })),
  partial: Type.Optional(Type.Object({
    layout: Type.String(), tp: uint, rank: uint,
    slices: Type.Array(Type.Object({
      index: uint, dim: Type.Union([uint, Type.Null()]), ranges: Type.Array(Type.Object({ start: uint, count: uint })), shape: Type.Array(uint), bytes: uint, key: Type.String(), chunkChecksums: Type.Array(uint),
    })),
  }, { description: 'set when this agent holds only these (layout, rank) slices: tensors is then the full holder\'s table (keys empty)' })),
})

export const VersionSummarySchema = Type.Object({
  model: Type.String(), version: uint, tensors: uint,
  bytes: Type.Integer({ minimum: 0, description: 'bytes held: the version\'s, or its slices\' for a partial holding' }),
  committedAtMs: uint, durable: Type.Boolean(),
  owner: Type.Union([uint, Type.Literal('agent')], { description: 'who owns the model on this agent: the uid that first published it here, or "agent" (pulled, or from before owners were recorded); only the owner or an admin publishes or retires its versions' }),
  partial: Type.Optional(Type.Object({ layout: Type.String(), tp: uint, rank: uint }, { description: 'set when this agent holds and serves only these (layout, rank) slices of the version' })),
})
/** A manifest file start-up found and could not make a version of. */
export const DamagedVersionSchema = Type.Object({
  model: Type.String(), version: uint,
  file: Type.String({ description: 'the manifest file, kept as found' }),
  reason: Type.String({ description: 'why it is not served, e.g. "2 of 3 keys are not stored (first: ...)"' }),
})
/** Who is pulling from this agent (for `agentctl weights list`). */
export const ActivePullSchema = Type.Object({ remote: Type.String(), model: Type.String(), version: uint, bytesSent: uint, connectedAtMs: uint })
export const PullInProgressSchema = Type.Object({ from: Type.String(), model: Type.String(), version: Type.Union([uint, Type.Literal('latest')]), doneBytes: uint, totalBytes: uint })
/** A publish this agent is making (for agentctl's progress bar): how far its current stage is. */
export const PublishInProgressSchema = Type.Object({
  model: Type.String(),
  version: Type.Union([uint, Type.Literal('next')], { description: 'as requested; "next" when the agent picks it' }),
  stage: Type.Union([Type.Literal('reading'), Type.Literal('checksumming'), Type.Literal('persisting')], { description: 'reading a safetensors file, checksumming every chunk, persisting to NVMe (durable agents)' }),
  doneBytes: uint,
  totalBytes: uint,
})

/** GET /v1/weights. */
export const VersionListSchema = Type.Object({
  address: Type.String(),
  versions: Type.Array(VersionSummarySchema),
  damaged: Type.Array(DamagedVersionSchema, { description: 'manifests found at start that are not served (kept as found; retiring the version removes one)' }),
  pulls: Type.Array(ActivePullSchema, { description: 'connections pulling from this agent' }),
  pulling: Type.Array(PullInProgressSchema, { description: 'pulls this agent is making' }),
  publishing: Type.Array(PublishInProgressSchema, { description: 'publishes this agent is making' }),
  distributing: Type.Array(Type.Object({
    model: Type.String(), version: uint,
    layout: Type.Optional(Type.String({ description: 'set when the version is being pulled as these (layout, rank) slices: a layout id' })),
    holders: uint,
    pulling: uint,
    here: Type.Optional(Type.Object({ tensors: uint, heldTensors: uint, heldBytes: uint, totalBytes: uint }, { description: 'this agent\'s own pull of it, as it serves it' })),
  }), { description: 'versions being pulled somewhere in the mesh (the swarm), whole or as one layout\'s slices: agents holding each and agents pulling it (this one included), from the mesh adverts' }),
  droppedPeers: Type.Array(Type.Object({ address: Type.String(), reason: Type.String(), model: Type.String(), version: uint, atMs: uint }), { description: 'swarm peers this agent\'s completed pulls stopped using, and why (the last 16)' }),
  ucx: Type.Optional(Type.Array(Type.Object({
    model: Type.String(), version: uint,
    bytes: uint,
    connections: Type.Integer({ minimum: 1, description: 'pullers\' connections that opened it (UCX_OPEN); retiring the version closes them' }),
  }), { description: 'versions this agent\'s data server holds pinned and mapped for one-sided UCX reads' })),
})

export const WeightsRegionSchema = Type.Object({
  region: Type.String({ description: 'name of the shared-memory object (/dev/shm/<region>) to write into' }),
  model: Type.String(), version: uint, bytes: uint,
  tensors: Type.Array(Type.Object({ name: Type.String(), dtype: Type.String(), shape: Type.Array(uint), offset: uint, bytes: uint })),
})

export const DiscardedSchema = Type.Object({ discarded: Type.Literal(true) })
export const RetiredSchema = Type.Object({ retired: Type.Literal(true) })

export type TensorSpec = Static<typeof TensorSpecSchema>
export type RegionBody = Static<typeof RegionBodySchema>
export type PublishSource = Static<typeof PublishSourceSchema>
export type PublishBody = Static<typeof PublishBodySchema>
/** What the weights service publishes from (the body of POST /v1/weights/publish). */
export type PublishRequest = PublishBody
export type PullBody = Static<typeof PullBodySchema>
export type RetireBody = Static<typeof RetireBodySchema>
export type PullResult = Static<typeof PullResultSchema>
export type WeightsManifest = Static<typeof WeightsManifestSchema>
export type VersionSummary = Static<typeof VersionSummarySchema>
export type DamagedVersion = Static<typeof DamagedVersionSchema>
export type ActivePull = Static<typeof ActivePullSchema>
export type PullInProgress = Static<typeof PullInProgressSchema>
export type PublishInProgress = Static<typeof PublishInProgressSchema>
export type VersionList = Static<typeof VersionListSchema>
export type WeightsRegion = Static<typeof WeightsRegionSchema>
