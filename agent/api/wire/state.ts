/**
 * Wire schemas of /v1/state: how clients name their memory (shared memory or
 * a CUDA IPC handle), the offload/onload/prefetch/drop/hints/materialize
 * bodies and answers, and the residency view.
 */
import { Type, type Static } from '@sinclair/typebox'

const uint = Type.Integer({ minimum: 0 })

/** Client memory a tensor is copied from (offload) or into (onload). */
export const MemorySpecSchema = Type.Union([
  Type.Object({ kind: Type.Literal('shm'), name: Type.String({ minLength: 1, maxLength: 255 }), offset: uint }, { additionalProperties: false }),
  Type.Object({
    kind: Type.Literal('cuda-ipc'),
    device: uint,
    handle: Type.String({ description: 'base64 of the 64-byte cudaIpcMemHandle_t or PyTorch\'s 66-byte form', maxLength: 128 }),
    offset: uint,
    event: Type.Optional(Type.String({ description: 'base64 cudaIpcEventHandle_t the producer recorded after writing', maxLength: 128 })),
  }, { additionalProperties: false }),
])
const KeyText = Type.String({ minLength: 1, maxLength: 1024, description: 'canonical state key' })

/** A stored tier a key can live in. */
export const TierSchema = Type.Union([Type.Literal('host'), Type.Literal('nvme')])

/** POST /v1/state/offload. */
export const OffloadBodySchema = Type.Object({
  tensors: Type.Array(Type.Object({ key: KeyText, source: MemorySpecSchema, verify: Type.Optional(Type.Boolean()) }, { additionalProperties: false }), { minItems: 1, maxItems: 65536 }),
  durability: Type.Optional(Type.Union([Type.Literal('memory'), Type.Literal('nvme')])),
}, { additionalProperties: false })
export const OffloadResultSchema = Type.Object({ results: Type.Array(Type.Object({ key: Type.String(), tier: TierSchema, deduplicated: Type.Boolean(), durable: Type.Boolean(), verified: Type.Optional(Type.Boolean()) })) })

/** POST /v1/state/onload. */
export const OnloadBodySchema = Type.Object({
  tensors: Type.Array(Type.Object({ key: KeyText, target: MemorySpecSchema }, { additionalProperties: false }), { minItems: 1, maxItems: 65536 }),
}, { additionalProperties: false })
export const OnloadResultSchema = Type.Object({ results: Type.Array(Type.Object({ key: Type.String(), fromTier: TierSchema })) })

/** Which keys a prefetch or drop applies to: listed keys, a prefix, or both. */
export const KeySelectorSchema = Type.Object({
  keys: Type.Optional(Type.Array(KeyText, { maxItems: 65536 })),
  prefix: Type.Optional(Type.String({ maxLength: 1024 })),
}, { additionalProperties: false })

/**
 * POST /v1/state/prefetch. One object, not an intersection with KeySelectorSchema: with
 * additionalProperties false in one half, the validator stripped `tier` before the other half checked it,
 * so any value was accepted.
 */
export const PrefetchBodySchema = Type.Object({
  ...KeySelectorSchema.properties,
  tier: Type.Optional(Type.Literal('host')),
}, { additionalProperties: false })
export const PrefetchResultSchema = Type.Object({ scheduled: uint })

/** POST /v1/state/drop takes a KeySelector. */
export const DropResultSchema = Type.Object({ dropped: uint })

/** POST /v1/state/hints. */
export const HintsBodySchema = Type.Object({
  next: Type.Array(Type.Object({ prefix: Type.String({ maxLength: 1024 }), inMs: uint }, { additionalProperties: false }), { maxItems: 4096 }),
}, { additionalProperties: false })
export const HintsResultSchema = Type.Object({ ok: Type.Literal(true) })

/** POST /v1/state/materialize. */
export const MaterializeBodySchema = Type.Object({
  prefix: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'the keys under this prefix at `version`, chunks assembled (or give tensors)' })),
  version: Type.Optional(uint),
  tensors: Type.Optional(Type.Array(Type.Union([
    Type.Object({ key: Type.String({ minLength: 1, maxLength: 4096 }), name: Type.String({ minLength: 1, maxLength: 1024 }) }, { additionalProperties: false }),
    Type.Object({
      empty: Type.Object({ dtype: Type.String({ minLength: 1, maxLength: 16 }), shape: Type.Array(uint, { minItems: 1, maxItems: 8 }) }, { additionalProperties: false, description: 'a tensor of no elements (one dimension 0): a rank whose vocab part is all padding' }),
      name: Type.String({ minLength: 1, maxLength: 1024 }),
    }, { additionalProperties: false }),
  ]), {
    minItems: 1, maxItems: 65_536, description: 'instead of prefix and version: these stored keys, each written whole as the tensor `name`, in this order (or an empty tensor)',
  })),
  metadata: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 256 }), Type.String({ maxLength: 65_536 }), { maxProperties: 64, description: 'more __metadata__ entries of the file' })),
  path: Type.String({ minLength: 2, maxLength: 4096, description: 'absolute output path ending in .safetensors' }),
  maxFileBytes: Type.Optional(Type.Integer({ minimum: 1 << 20 })),
  overwrite: Type.Optional(Type.Boolean()),
}, { additionalProperties: false })
export const MaterializeResultSchema = Type.Object({ files: Type.Array(Type.String()), index: Type.Union([Type.String(), Type.Null()]), tensors: uint, bytes: uint })

/**
 * GET /v1/state/residency: the totals of the keys the filters select and one page of them, or
 * the totals alone (`summary=true`). The limits are agent/state/residency-index.ts's
 * (pageKeys, maxPageKeys).
 */
export const ResidencyQuerySchema = Type.Object({
  prefix: Type.Optional(Type.String({ maxLength: 1024, description: 'keys whose text starts with this' })),
  tier: Type.Optional(TierSchema),
  namespace: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'keys of exactly this namespace' })),
  job: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'keys of the namespace named so and of those under it (<job>/...)' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 2000, description: 'keys in the page (default 1000)' })),
  cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 1400, description: 'the nextCursor of the previous page: the page starts after the keys it ended with' })),
  summary: Type.Optional(Type.Boolean({ description: 'true: the totals only, no keys' })),
}, { additionalProperties: false })
const TierUsage = Type.Object({ capacityBytes: uint, usedBytes: uint })
export const ResidencyKeySchema = Type.Object({
  key: Type.String(), bytes: uint, tier: TierSchema, replicas: uint, lastUseMs: uint, durable: Type.Boolean(),
  region: Type.Optional(Type.String({ description: 'adopted shared-memory object holding the host copy' })),
})
export const ResidencySchema = Type.Object({
  tiers: Type.Object({ device: TierUsage, host: TierUsage, nvme: TierUsage }),
  logicalBytes: uint,
  storedBytes: uint,
  dedupRatio: Type.Union([Type.Number(), Type.Null()], { description: 'logicalBytes / storedBytes of the selected keys; null when none is selected' }),
  keyCounts: Type.Object({ host: uint, nvme: uint }, { description: 'selected keys by tier' }),
  namespaces: Type.Array(Type.Object({ namespace: Type.String(), keys: uint, logicalBytes: uint, storedBytes: uint, quotaBytes: Type.Union([uint, Type.Null()]) })),
  hostPool: Type.Object({ freeBytes: uint, largestFreeBytes: uint, fragmentation: Type.Number() }),
  shm: Type.Object({ regions: uint, bytes: uint }, { description: 'adopted shared-memory mappings holding host copies outside the pool (zero-copy weight publishes)' }),
  counters: Type.Object({ offloadCopies: uint, deduplicated: uint, spilled: uint, promoted: uint, onloadCopies: uint, shmAdopted: uint, rangeReadBytes: uint }),
  keys: Type.Optional(Type.Array(ResidencyKeySchema, { description: 'the page: selected keys in key order (absent with summary=true)' })),
  nextCursor: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'pass it as cursor for the keys after the page; null when none follows (absent with summary=true)' })),
})

/** GET /v1/state/owners. */
export const OwnersQuerySchema = Type.Object({ prefix: Type.Optional(Type.String({ maxLength: 1024 })) })

/**
 * GET /v1/state/owners (same query as residency). A route of its own rather than a field of residency,
 * whose answer the Python client mirrors field for field (agentd_client/schema.py).
 */
export const NamespaceOwnersSchema = Type.Object({
  namespaces: Type.Array(Type.Object({
    namespace: Type.String(),
    owner: Type.Union([uint, Type.Literal('agent')], { description: 'the uid that stored the namespace\'s first key, or "agent" (the agent\'s own keys: published and pulled weights, keys recovered without an owner)' }),
  }), { description: 'the namespaces holding keys under the prefix, sorted, as residency lists them' }),
})

export type MemorySpecBody = Static<typeof MemorySpecSchema>
export type OffloadBody = Static<typeof OffloadBodySchema>
export type OffloadResult = Static<typeof OffloadResultSchema>
export type OnloadBody = Static<typeof OnloadBodySchema>
export type OnloadResult = Static<typeof OnloadResultSchema>
export type KeySelector = Static<typeof KeySelectorSchema>
export type PrefetchBody = Static<typeof PrefetchBodySchema>
export type HintsBody = Static<typeof HintsBodySchema>
export type MaterializeBody = Static<typeof MaterializeBodySchema>
export type MaterializeResultBody = Static<typeof MaterializeResultSchema>
export type ResidencyQuery = Static<typeof ResidencyQuerySchema>
export type OwnersQuery = Static<typeof OwnersQuerySchema>
export type ResidencyBody = Static<typeof ResidencySchema>
export type NamespaceOwnersBody = Static<typeof NamespaceOwnersSchema>
