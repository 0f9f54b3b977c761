/** /v1/weights/*: thin adapters over the weight-transfer agent (validation by schema, errors by code). */
import type { FastifyInstance } from 'fastify'
import { Type, type Static } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import type { WeightsService } from '../../weights/weights-service.ts'
import { parseLayoutRules } from '../../weights/reshard.ts'
import { errorResponses } from '../schemas.ts'

/** The weights service, or why there is none: routes answer ERR_UNAVAILABLE then. */
export interface WeightsSource {
  weights(): WeightsService | { unavailable: string }
}

const uint = Type.Integer({ minimum: 0 })
const Model = Type.String({ pattern: '^[A-Za-z0-9_.-]{1,128}$' })
const VersionOrLatest = Type.Union([uint, Type.Literal('latest')])
const Dtype = Type.String({ minLength: 1, maxLength: 16 })
const TensorSpec = Type.Object({ name: Type.String({ minLength: 1, maxLength: 512 }), dtype: Dtype, shape: Type.Array(uint, { maxItems: 8 }) }, { additionalProperties: false })
const Metadata = Type.Record(Type.String(), Type.String())
const RegionBody = Type.Object({ model: Model, version: Type.Optional(uint), tensors: Type.Array(TensorSpec, { minItems: 1, maxItems: 100_000 }) }, { additionalProperties: false })
const PublishBody = Type.Object({
  model: Model,
  version: Type.Optional(uint),
  source: Type.Union([
    Type.Object({ kind: Type.Literal('keys'), prefix: Type.String({ minLength: 1, maxLength: 1024 }) }, { additionalProperties: false }),
    Type.Object({ kind: Type.Literal('region'), region: Type.String({ minLength: 1, maxLength: 255 }) }, { additionalProperties: false }),
    Type.Object({ kind: Type.Literal('safetensors'), path: Type.String({ minLength: 2, maxLength: 4096, description: 'absolute path, readable by the agent' }) }, { additionalProperties: false }),
  ]),
  metadata: Type.Optional(Metadata),
}, { additionalProperties: false })
const LayoutBody = Type.Object({
  tp: Type.Integer({ minimum: 1, maximum: 4096 }),
  rank: uint,
  rules: Type.Optional(Type.Array(Type.Unknown(), { maxItems: 1024, description: 'layout rules, as in a rules file { "rules": [...] }' })),
  preset: Type.Optional(Type.String({ maxLength: 32 })),
  heads: Type.Optional(Type.Integer({ minimum: 1 })),
  kvHeads: Type.Optional(Type.Integer({ minimum: 1 })),
}, { additionalProperties: false })
const PullBody = Type.Object({
  from: Type.Optional(Type.String({ minLength: 3, maxLength: 300, description: 'host:port of the serving agent\'s data server; absent: an alive agent that advertises the version in the mesh (the highest version for latest)' })),
  model: Model,
  version: VersionOrLatest,
  layout: Type.Optional(LayoutBody),
  streams: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
}, { additionalProperties: false })
const RetireBody = Type.Object({ model: Model, version: uint }, { additionalProperties: false })
const PullResultSchema = Type.Object({
  from: Type.String({ description: 'data address the pull started from (given, or the holder chosen from the mesh)' }),
  model: Type.String(), version: uint, bytes: uint, bytesReceived: uint, seconds: Type.Number(), tensors: uint, keys: Type.Array(Type.String()), refetchedPieces: uint, reconnects: uint,
  switchedTo: Type.Array(Type.String(), { description: 'data addresses the pull resumed from after its source dropped the version' }),
})
const ManifestSchema = Type.Object({
  model: Type.String(), version: uint, chunkBytes: uint, totalBytes: uint, committedAtMs: uint, metadata: Metadata, ownsKeys: Type.Boolean(), durable: Type.Boolean(),
  tensors: Type.Array(Type.Object({ name: Type.String(), dtype: Type.String(), shape: Type.Array(uint), bytes: uint, key: Type.String(), chunkChecksums: Type.Array(uint) })),
  partial: Type.Optional(Type.Object({
    layout: Type.String(), tp: uint, rank: uint,
    slices: Type.Array(Type.Object({
      index: uint, dim: Type.Union([uint, Type.Null()]), ranges: Type.Array(Type.Object({ start: uint, count: uint })), shape: Type.Array(uint), bytes: uint, key: Type.String(), chunkChecksums: Type.Array(uint),
    })),
  }, { description: 'set when this agent holds only these (layout, rank) slices: tensors is then the full holder\'s table (keys empty)' })),
})
const ListSchema = Type.Object({
  address: Type.String(),
  versions: Type.Array(Type.Object({
    model: Type.String(), version: uint, tensors: uint, bytes: uint, committedAtMs: uint, durable: Type.Boolean(),
    partial: Type.Optional(Type.Object({ layout: Type.String(), tp: uint, rank: uint }, { description: 'set when this agent holds and serves only these (layout, rank) slices of the version' })),
  })),
  damaged: Type.Array(Type.Object({ model: Type.String(), version: uint, file: Type.String(), reason: Type.String() }), { description: 'manifests found at start that are not served (kept as found; retiring the version removes one)' }),
  pulls: Type.Array(Type.Object({ remote: Type.String(), model: Type.String(), version: uint, bytesSent: uint, connectedAtMs: uint }), { description: 'connections pulling from this agent' }),
  pulling: Type.Array(Type.Object({ from: Type.String(), model: Type.String(), version: Type.Union([uint, Type.Literal('latest')]), doneBytes: uint, totalBytes: uint }), { description: 'pulls this agent is making' }),
})
const RegionSchema = Type.Object({
  region: Type.String({ description: 'name of the shared-memory object (/dev/shm/<region>) to write into' }),
  model: Type.String(), version: uint, bytes: uint,
  tensors: Type.Array(Type.Object({ name: Type.String(), dtype: Type.String(), shape: Type.Array(uint), offset: uint, bytes: uint })),
})

export type PullBodyType = Static<typeof PullBody>

export function registerWeightsRoutes (app: FastifyInstance, source: WeightsSource): void {
  const service = (): WeightsService => {
    const current = source.weights()
    if ('unavailable' in current) throw new AgentError('ERR_UNAVAILABLE', `the weight-transfer agent is not running: ${current.unavailable}`)
    return current
  }

  app.get('/v1/weights', {
    schema: { summary: 'Committed versions on this agent, who is pulling from it, and the pulls it is making', response: { 200: ListSchema, ...errorResponses } },
  }, async () => { const s = service(); return { address: s.address(), ...s.list() } })

  app.get<{ Params: { model: string, version: string } }>('/v1/weights/:model/:version/manifest', {
    schema: { summary: 'The manifest (tensor table with chunk checksums) of a committed version; version "latest" or a number', params: Type.Object({ model: Model, version: Type.String({ pattern: '^(latest|0|[1-9][0-9]*)$' }) }), response: { 200: ManifestSchema, ...errorResponses } },
  }, async request => service().manifest(request.params.model, request.params.version === 'latest' ? -1 : Number(request.params.version)))

  app.post<{ Body: Static<typeof RegionBody> }>('/v1/weights/regions', {
    schema: { summary: 'Hand out a shared-memory region to write a version into (then publish it with source { kind: "region" })', body: RegionBody, response: { 200: RegionSchema, ...errorResponses } },
  }, async request => await service().createRegion(request.body.model, request.body.version, request.body.tensors as never))

  app.delete<{ Params: { region: string } }>('/v1/weights/regions/:region', {
    schema: { summary: 'Give back a handed-out region that will not be published (removes it, releases its version)', params: Type.Object({ region: Type.String({ minLength: 1, maxLength: 255 }) }), response: { 200: Type.Object({ discarded: Type.Literal(true) }), ...errorResponses } },
  }, async request => { await service().discardRegion(request.params.region); return { discarded: true as const } })

  app.post<{ Body: Static<typeof PublishBody> }>('/v1/weights/publish', {
    schema: { summary: 'Commit a version from stored keys, a handed-out region or a safetensors file; answers when it is committed', body: PublishBody, response: { 200: ManifestSchema, ...errorResponses } },
  }, async request => {
    const { model, version, source: from, metadata } = request.body
    return await service().publish({ model, source: from, ...(version !== undefined ? { version } : {}), ...(metadata !== undefined ? { metadata } : {}) })
  })

  app.post<{ Body: PullBodyType }>('/v1/weights/pull', {
    schema: { summary: 'Pull a version (or this rank\'s slices of it) from another agent into this agent\'s StateManager; answers when every byte is verified', body: PullBody, response: { 200: PullResultSchema, ...errorResponses } },
  }, async (request, reply) => {
    const { from, model, version, layout, streams } = request.body
    // A caller that hangs up cancels its pull (the scratch memory is released, nothing is stored).
    const abort = new AbortController()
    reply.raw.once('close', () => { if (!reply.raw.writableFinished) abort.abort(new AgentError('ERR_WEIGHTS_TRANSFER', 'the caller went away')) })
    return await service().pull({
      model, version: version === 'latest' ? -1 : version, signal: abort.signal,
      ...(from !== undefined ? { from } : {}),
      ...(streams !== undefined ? { streams } : {}),
      ...(layout !== undefined
        ? {
            layout: {
              tp: layout.tp,
              rank: layout.rank,
              ...(layout.rules !== undefined ? { rules: parseLayoutRules({ rules: layout.rules }, 'layout') } : {}),
              ...(layout.preset !== undefined ? { preset: layout.preset } : {}),
              presetOptions: { ...(layout.heads !== undefined ? { heads: layout.heads } : {}), ...(layout.kvHeads !== undefined ? { kvHeads: layout.kvHeads } : {}) },
            },
          }
        : {}),
    })
  })

  app.post<{ Body: Static<typeof RetireBody> }>('/v1/weights/retire', {
    schema: { summary: 'Retire a committed version (its keys are dropped once in-flight reads finish)', body: RetireBody, response: { 200: Type.Object({ retired: Type.Literal(true) }), ...errorResponses } },
  }, async request => { await service().retire(request.body.model, request.body.version); return { retired: true as const } })
}
