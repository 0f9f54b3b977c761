/** /v1/state/*: thin adapters over the StateManager (validation by schema, errors by code). */
import type { FastifyInstance } from 'fastify'
import { Type, type Static } from '@sinclair/typebox'
import type { StateManager } from '../../state/state-manager.ts'
import { AgentError } from '../../../core/errors.ts'
import { materialize } from '../../state/materialize.ts'
import { errorResponses } from '../wire/errors.ts'

/** The StateManager, or why there is none (subsystem skipped or failed): routes answer ERR_UNAVAILABLE then. */
export interface StateSource {
  stateManager(): StateManager | { unavailable: string }
}

const uint = Type.Integer({ minimum: 0 })
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
const OffloadBody = Type.Object({
  tensors: Type.Array(Type.Object({ key: KeyText, source: MemorySpecSchema, verify: Type.Optional(Type.Boolean()) }, { additionalProperties: false }), { minItems: 1, maxItems: 65536 }),
  durability: Type.Optional(Type.Union([Type.Literal('memory'), Type.Literal('nvme')])),
}, { additionalProperties: false })
const OnloadBody = Type.Object({
  tensors: Type.Array(Type.Object({ key: KeyText, target: MemorySpecSchema }, { additionalProperties: false }), { minItems: 1, maxItems: 65536 }),
}, { additionalProperties: false })
const Selector = Type.Object({
  keys: Type.Optional(Type.Array(KeyText, { maxItems: 65536 })),
  prefix: Type.Optional(Type.String({ maxLength: 1024 })),
}, { additionalProperties: false })
const PrefetchBody = Type.Intersect([Selector, Type.Object({ tier: Type.Optional(Type.Literal('host')) })])
const HintsBody = Type.Object({
  next: Type.Array(Type.Object({ prefix: Type.String({ maxLength: 1024 }), inMs: uint }, { additionalProperties: false }), { maxItems: 4096 }),
}, { additionalProperties: false })
const MaterializeBody = Type.Object({
  prefix: Type.String({ minLength: 1, maxLength: 1024 }),
  version: uint,
  path: Type.String({ minLength: 2, maxLength: 4096, description: 'absolute output path ending in .safetensors' }),
  maxFileBytes: Type.Optional(Type.Integer({ minimum: 1 << 20 })),
  overwrite: Type.Optional(Type.Boolean()),
}, { additionalProperties: false })
const Tier = Type.Union([Type.Literal('host'), Type.Literal('nvme')])
const TierUsage = Type.Object({ capacityBytes: uint, usedBytes: uint })
export const ResidencySchema = Type.Object({
  tiers: Type.Object({ device: TierUsage, host: TierUsage, nvme: TierUsage }),
  logicalBytes: uint,
  storedBytes: uint,
  namespaces: Type.Array(Type.Object({ namespace: Type.String(), keys: uint, logicalBytes: uint, storedBytes: uint, quotaBytes: Type.Union([uint, Type.Null()]) })),
  hostPool: Type.Object({ freeBytes: uint, largestFreeBytes: uint, fragmentation: Type.Number() }),
  shm: Type.Object({ regions: uint, bytes: uint }, { description: 'adopted shared-memory mappings holding host copies outside the pool (zero-copy weight publishes)' }),
  counters: Type.Object({ offloadCopies: uint, deduplicated: uint, spilled: uint, promoted: uint, onloadCopies: uint, shmAdopted: uint }),
  keys: Type.Array(Type.Object({
    key: Type.String(), bytes: uint, tier: Tier, replicas: uint, lastUseMs: uint, durable: Type.Boolean(),
    region: Type.Optional(Type.String({ description: 'adopted shared-memory object holding the host copy' })),
  })),
})

export function registerStateRoutes (app: FastifyInstance, source: StateSource): void {
  const sm = (): StateManager => {
    const current = source.stateManager()
    if ('unavailable' in current) throw new AgentError('ERR_UNAVAILABLE', `the StateManager is not running: ${current.unavailable}`)
    return current
  }

  app.post<{ Body: Static<typeof OffloadBody> }>('/v1/state/offload', {
    schema: {
      summary: 'Copy tensors from client memory into the agent; answers after every copy (and, with durability "nvme", the fsync) is complete',
      body: OffloadBody,
      response: { 200: Type.Object({ results: Type.Array(Type.Object({ key: Type.String(), tier: Tier, deduplicated: Type.Boolean(), durable: Type.Boolean(), verified: Type.Optional(Type.Boolean()) })) }), ...errorResponses },
    },
  }, async request => ({ results: await sm().offload(request.body.tensors, request.body.durability) }))

  app.post<{ Body: Static<typeof OnloadBody> }>('/v1/state/onload', {
    schema: {
      summary: 'Copy stored tensors into client memory; answers after the bytes are there',
      body: OnloadBody,
      response: { 200: Type.Object({ results: Type.Array(Type.Object({ key: Type.String(), fromTier: Tier })) }), ...errorResponses },
    },
  }, async request => ({ results: await sm().onload(request.body.tensors) }))

  app.post<{ Body: Static<typeof PrefetchBody> }>('/v1/state/prefetch', {
    schema: { summary: 'Promote NVMe keys to host in the background (returns at once)', body: PrefetchBody, response: { 200: Type.Object({ scheduled: uint }), ...errorResponses } },
  }, async request => ({ scheduled: sm().prefetch(request.body) }))

  app.post<{ Body: Static<typeof Selector> }>('/v1/state/drop', {
    schema: { summary: 'Remove keys from every tier', body: Selector, response: { 200: Type.Object({ dropped: uint }), ...errorResponses } },
  }, async request => ({ dropped: await sm().drop(request.body) }))

  app.post<{ Body: Static<typeof HintsBody> }>('/v1/state/hints', {
    schema: { summary: 'Scheduler hints: what is needed next and when (drives spilling and prefetch); replaces earlier hints', body: HintsBody, response: { 200: Type.Object({ ok: Type.Literal(true) }), ...errorResponses } },
  }, async request => { sm().setHints(request.body.next); return { ok: true as const } })

  app.post<{ Body: Static<typeof MaterializeBody> }>('/v1/state/materialize', {
    schema: {
      summary: 'Write a namespace/version to safetensors (split with an index above maxFileBytes) from host and NVMe, without a GPU',
      body: MaterializeBody,
      response: { 200: Type.Object({ files: Type.Array(Type.String()), index: Type.Union([Type.String(), Type.Null()]), tensors: uint, bytes: uint }), ...errorResponses },
    },
  }, async request => await materialize(sm(), request.body))

  app.get<{ Querystring: { prefix?: string } }>('/v1/state/residency', {
    schema: { summary: 'Where every key lives, tier usage, dedup and fragmentation', querystring: Type.Object({ prefix: Type.Optional(Type.String({ maxLength: 1024 })) }), response: { 200: ResidencySchema, ...errorResponses } },
  }, async request => sm().residency(request.query.prefix))
}
