/** /v1/weights/*: thin adapters over the weight-transfer agent (validation by schema, errors by code). */
import { confinedPath } from './path-roots.ts'
import type { FastifyInstance } from 'fastify'
import { AgentError } from '../../../core/errors.ts'
import type { WeightsService } from '../../weights/weights-service.ts'
import { parseLayoutRules } from '../../weights/reshard.ts'
import { errorResponses } from '../wire/errors.ts'
import {
  ManifestParamsSchema, PublishBodySchema, PullBodySchema, PullResultSchema, RegionBodySchema, RegionParamsSchema, RetireBodySchema,
  DiscardedSchema, RetiredSchema, VersionListSchema, WeightsManifestSchema, WeightsRegionSchema,
  type PublishBody, type PullBody, type PullResult, type RegionBody, type RetireBody, type VersionList, type WeightsManifest, type WeightsRegion,
} from '../wire/weights.ts'

/** The weights service, or why there is none: routes answer ERR_UNAVAILABLE then. */
export interface WeightsSource {
  weights(): WeightsService | { unavailable: string }
}

export function registerWeightsRoutes (app: FastifyInstance, source: WeightsSource, pathRoots: readonly string[]): void {
  const service = (): WeightsService => {
    const current = source.weights()
    if ('unavailable' in current) throw new AgentError('ERR_UNAVAILABLE', `the weight-transfer agent is not running: ${current.unavailable}`)
    return current
  }

  app.get('/v1/weights', {
    schema: { summary: 'Committed versions on this agent, who is pulling from it, and the pulls it is making', response: { 200: VersionListSchema, ...errorResponses } },
  }, async (): Promise<VersionList> => { const s = service(); return { address: s.address(), ...s.list() } })

  app.get<{ Params: { model: string, version: string } }>('/v1/weights/:model/:version/manifest', {
    schema: { summary: 'The manifest (tensor table with chunk checksums) of a committed version; version "latest" or a number', params: ManifestParamsSchema, response: { 200: WeightsManifestSchema, ...errorResponses } },
  }, async (request): Promise<WeightsManifest> => service().manifest(request.params.model, request.params.version === 'latest' ? -1 : Number(request.params.version)))

  app.post<{ Body: RegionBody }>('/v1/weights/regions', {
    schema: { summary: 'Hand out a shared-memory region to write a version into (then publish it with source { kind: "region" })', body: RegionBodySchema, response: { 200: WeightsRegionSchema, ...errorResponses } },
  }, async (request): Promise<WeightsRegion> => await service().createRegion(request.body.model, request.body.version, request.body.tensors as never))

  app.delete<{ Params: { region: string } }>('/v1/weights/regions/:region', {
    schema: { summary: 'Give back a handed-out region that will not be published (removes it, releases its version)', params: RegionParamsSchema, response: { 200: DiscardedSchema, ...errorResponses } },
  }, async request => { await service().discardRegion(request.params.region); return { discarded: true as const } })

  app.post<{ Body: PublishBody }>('/v1/weights/publish', {
    schema: { summary: 'Commit a version from stored keys, a handed-out region or a safetensors file; answers when it is committed', body: PublishBodySchema, response: { 200: WeightsManifestSchema, ...errorResponses } },
  }, async (request): Promise<WeightsManifest> => {
    const { model, version, metadata } = request.body
    const from = request.body.source.kind === 'safetensors' ? { ...request.body.source, path: await confinedPath(request.body.source.path, pathRoots, 'read', 'the safetensors file') } : request.body.source
    return await service().publish({ model, source: from, ...(version !== undefined ? { version } : {}), ...(metadata !== undefined ? { metadata } : {}) })
  })

  app.post<{ Body: PullBody }>('/v1/weights/pull', {
    schema: { summary: 'Pull a version (or this rank\'s slices of it) from another agent into this agent\'s StateManager; answers when every byte is verified', body: PullBodySchema, response: { 200: PullResultSchema, ...errorResponses } },
  }, async (request, reply): Promise<PullResult> => {
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

  app.post<{ Body: RetireBody }>('/v1/weights/retire', {
    schema: { summary: 'Retire a committed version (its keys are dropped once in-flight reads finish)', body: RetireBodySchema, response: { 200: RetiredSchema, ...errorResponses } },
  }, async request => { await service().retire(request.body.model, request.body.version); return { retired: true as const } })
}
