/**
 * /v1/weights/*: thin adapters over the weight-transfer agent (validation by
 * schema, errors by code). A publish from keys reads them: the caller must be
 * allowed to read their namespaces (authorization.ts NamespaceGuard). A
 * handed-out region belongs to the uid it was handed to: only that uid (or an
 * admin) publishes or discards it, since region names are visible to every
 * user in /dev/shm and publishing someone else's region early would commit
 * bytes still being written. A model belongs to the uid that first published
 * it here (or asked for a region to publish it from): only that uid (or an
 * admin) publishes, hands out regions for or retires its versions. The check
 * and the service's claim of a model nobody owns happen in one tick
 * (WeightsService.publish and createRegion reserve synchronously).
 */
import { confinedPath } from './path-roots.ts'
import type { Authorization, NamespaceGuard } from './route-guards.ts'
import type { FastifyInstance, FastifyRequest } from 'fastify'
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

export function registerWeightsRoutes (app: FastifyInstance, source: WeightsSource, pathRoots: readonly string[], authorization: Authorization, guard: NamespaceGuard): void {
  const service = (): WeightsService => {
    const current = source.weights()
    if ('unavailable' in current) throw new AgentError('ERR_UNAVAILABLE', `the weight-transfer agent is not running: ${current.unavailable}`)
    return current
  }
  /** The uid each region handed out (and not yet published or discarded) was handed to; none for an unidentified caller. */
  const regionUids = new Map<string, number>()
  /**
   * The uid a new version of `model` is published for (the owner the model gets if nobody owns it);
   * ERR_FORBIDDEN unless the caller owns the model, nobody does (a publish claims it; a retire finds
   * nothing: the service's 404), or the caller is an admin.
   */
  const checkModel = (request: FastifyRequest, weights: WeightsService, model: string, action: string): number | undefined => {
    if (request.admin) return request.caller?.uid
    const owner = weights.modelOwner(model)
    if (request.caller === null) {
      throw authorization.forbidden(request, `${action} model ${model}`, `models are owned by uid, and this caller's uid is unknown (call over the agent's unix socket with the native addon loaded), unless it is an admin: ${authorization.admins()}`, { model, needed: 'owner' })
    }
    if (owner === undefined || owner === request.caller.uid) return request.caller.uid
    const whose = owner === 'agent' ? 'the agent itself (a model pulled here, or published before models had owners)' : `uid ${owner}, the uid that first published it on this agent`
    throw authorization.forbidden(request, `${action} model ${model}`, `the model belongs to ${whose}; only that owner or an admin (${authorization.admins()}) may`, { model, owner, needed: 'owner' })
  }
  /** ERR_FORBIDDEN unless the caller got `region` (or is an admin); a region not handed out here is left to the service (404). */
  const checkRegion = (request: FastifyRequest, region: string, action: string): void => {
    const uid = regionUids.get(region)
    if (uid === undefined || request.admin || request.caller?.uid === uid) return
    throw authorization.forbidden(request, `${action} region ${region}`, `it was handed out to uid ${uid}; only that uid or an admin (${authorization.admins()}) may`, { region, owner: uid, needed: 'owner' })
  }

  app.get('/v1/weights', {
    schema: { summary: 'Committed versions on this agent, who is pulling from it, and the pulls it is making', response: { 200: VersionListSchema, ...errorResponses } },
  }, async (): Promise<VersionList> => { const s = service(); return { address: s.address(), ...s.list() } })

  app.get<{ Params: { model: string, version: string } }>('/v1/weights/:model/:version/manifest', {
    schema: { summary: 'The manifest (tensor table with chunk checksums) of a committed version; version "latest" or a number', params: ManifestParamsSchema, response: { 200: WeightsManifestSchema, ...errorResponses } },
  }, async (request): Promise<WeightsManifest> => service().manifest(request.params.model, request.params.version === 'latest' ? -1 : Number(request.params.version)))

  app.post<{ Body: RegionBody }>('/v1/weights/regions', {
    schema: { summary: 'Hand out a shared-memory region to write a version into (then publish it with source { kind: "region" })', body: RegionBodySchema, response: { 200: WeightsRegionSchema, ...errorResponses } },
  }, async (request): Promise<WeightsRegion> => {
    const weights = service()
    const owner = checkModel(request, weights, request.body.model, 'hand out a region to publish')
    const region = await weights.createRegion(request.body.model, request.body.version, request.body.tensors as never, owner)
    if (request.caller !== null) regionUids.set(region.region, request.caller.uid)
    return region
  })

  app.delete<{ Params: { region: string } }>('/v1/weights/regions/:region', {
    schema: { summary: 'Give back a handed-out region that will not be published (removes it, releases its version)', params: RegionParamsSchema, response: { 200: DiscardedSchema, ...errorResponses } },
  }, async request => {
    const weights = service()
    checkRegion(request, request.params.region, 'discard')
    await weights.discardRegion(request.params.region)
    regionUids.delete(request.params.region)
    return { discarded: true as const }
  })

  app.post<{ Body: PublishBody }>('/v1/weights/publish', {
    schema: { summary: 'Commit a version from stored keys, a handed-out region or a safetensors file; answers when it is committed', body: PublishBodySchema, response: { 200: WeightsManifestSchema, ...errorResponses } },
  }, async (request): Promise<WeightsManifest> => {
    const { model, version, metadata } = request.body
    const from = request.body.source.kind === 'safetensors' ? { ...request.body.source, path: await confinedPath(request.body.source.path, pathRoots, 'read', 'the safetensors file') } : request.body.source
    const weights = service()
    if (from.kind === 'keys') guard.check(request, () => guard.ofPrefixes([from.prefix]), 'read', 'publish keys')
    if (from.kind === 'region') checkRegion(request, from.region, 'publish')
    const owner = checkModel(request, weights, model, 'publish a version of')
    const manifest = await weights.publish({ model, source: from, ...(version !== undefined ? { version } : {}), ...(metadata !== undefined ? { metadata } : {}) }, owner)
    // A committed publish consumed its region. (One that failed past validation consumed it too; its
    // record stays, harmless: the name is random and the service answers 404 for it.)
    if (from.kind === 'region') regionUids.delete(from.region)
    return manifest
  })

  app.post<{ Body: PullBody }>('/v1/weights/pull', {
    schema: { summary: 'Pull a version (or this rank\'s slices of it) from another agent into this agent\'s StateManager, or into one safetensors file (out); answers when every byte is verified', body: PullBodySchema, response: { 200: PullResultSchema, ...errorResponses } },
  }, async (request, reply): Promise<PullResult> => {
    const { from, model, version, layout, streams, out } = request.body
    const outPath = out !== undefined ? await confinedPath(out.path, pathRoots, 'write', 'the output path') : undefined
    // A caller that hangs up cancels its pull: the window is released; the slices already stored stay (a repeat resumes).
    const abort = new AbortController()
    reply.raw.once('close', () => { if (!reply.raw.writableFinished) abort.abort(new AgentError('ERR_WEIGHTS_TRANSFER', 'the caller went away')) })
    return await service().pull({
      model, version: version === 'latest' ? -1 : version, signal: abort.signal,
      ...(from !== undefined ? { from } : {}),
      ...(streams !== undefined ? { streams } : {}),
      ...(out !== undefined ? { out: { ...out, path: outPath! } } : {}),
      ...(layout !== undefined
        ? {
            layout: {
              tp: layout.tp,
              rank: layout.rank,
              ...(layout.rules !== undefined ? { rules: parseLayoutRules({ rules: layout.rules }, 'layout') } : {}),
              ...(layout.preset !== undefined ? { preset: layout.preset } : {}),
              presetOptions: {
                ...(layout.heads !== undefined ? { heads: layout.heads } : {}),
                ...(layout.kvHeads !== undefined ? { kvHeads: layout.kvHeads } : {}),
                ...(layout.intermediateSize !== undefined ? { intermediateSize: layout.intermediateSize } : {}),
                ...(layout.engine !== undefined ? { engine: layout.engine } : {}),
              },
            },
          }
        : {}),
    })
  })

  app.post<{ Body: RetireBody }>('/v1/weights/retire', {
    schema: { summary: 'Retire a committed version (its keys are dropped once in-flight reads finish)', body: RetireBodySchema, response: { 200: RetiredSchema, ...errorResponses } },
  }, async request => {
    const weights = service()
    checkModel(request, weights, request.body.model, 'retire a version of')
    await weights.retire(request.body.model, request.body.version)
    return { retired: true as const }
  })
}
