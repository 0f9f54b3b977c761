/**
 * /v1/state/*: thin adapters over the StateManager (validation by schema,
 * errors by code). Each call that names keys is checked against the owners of
 * their namespaces first (authorization.ts NamespaceGuard), in the tick that
 * starts the operation: offload and drop write, the others read. The batch
 * routes (offload, onload, prefetch, drop, hints) take any body their schema
 * admits, whatever api.bodyLimitBytes says (core/schema-body-limit.ts).
 */
import type { FastifyInstance } from 'fastify'
import type { TSchema } from '@sinclair/typebox'
import type { StateManager } from '../../state/state-manager.ts'
import { AgentError } from '../../../core/errors.ts'
import { materialize } from '../../state/materialize.ts'
import { confinedPath } from './path-roots.ts'
import { schemaBodyLimit } from '../../../core/schema-body-limit.ts'
import type { NamespaceGuard } from './route-guards.ts'
import { errorResponses } from '../wire/errors.ts'
import {
  DropResultSchema, HintsBodySchema, HintsResultSchema, KeySelectorSchema, MaterializeBodySchema, MaterializeResultSchema, NamespaceOwnersSchema,
  OffloadBodySchema, OffloadResultSchema, OnloadBodySchema, OnloadResultSchema, OwnersQuerySchema, PrefetchBodySchema, PrefetchResultSchema,
  ResidencyQuerySchema, ResidencySchema, type HintsBody, type KeySelector, type MaterializeBody, type NamespaceOwnersBody, type OffloadBody,
  type OnloadBody, type OwnersQuery, type PrefetchBody, type ResidencyQuery,
} from '../wire/state.ts'

/** The StateManager, or why there is none (subsystem skipped or failed): routes answer ERR_UNAVAILABLE then. */
export interface StateSource {
  stateManager(): StateManager | { unavailable: string }
}

export function registerStateRoutes (app: FastifyInstance, source: StateSource, pathRoots: readonly string[], guard: NamespaceGuard): void {
  const sm = (): StateManager => {
    const current = source.stateManager()
    if ('unavailable' in current) throw new AgentError('ERR_UNAVAILABLE', `the StateManager is not running: ${current.unavailable}`)
    return current
  }
  const batchLimit = (schema: TSchema): number => schemaBodyLimit(schema, app.initialConfig.bodyLimit ?? 0)
  const selected = (selector: KeySelector) => (): string[] =>
    selector.keys !== undefined ? guard.ofKeys(selector.keys) : typeof selector.prefix === 'string' ? guard.ofPrefixes([selector.prefix]) : []

  app.post<{ Body: OffloadBody }>('/v1/state/offload', {
    bodyLimit: batchLimit(OffloadBodySchema),
    schema: {
      summary: 'Copy tensors from client memory into the agent; answers after every copy (and, with durability "nvme", the fsync) is complete',
      body: OffloadBodySchema,
      response: { 200: OffloadResultSchema, ...errorResponses },
    },
  }, async request => {
    const manager = sm()
    const release = guard.claimForStore(request, guard.ofKeys(request.body.tensors.map(t => t.key)), 'offload keys')
    try {
      return { results: await manager.offload(request.body.tensors, request.body.durability) }
    } finally {
      release()
    }
  })

  app.post<{ Body: OnloadBody }>('/v1/state/onload', {
    bodyLimit: batchLimit(OnloadBodySchema),
    schema: {
      summary: 'Copy stored tensors into client memory; answers after the bytes are there',
      body: OnloadBodySchema,
      response: { 200: OnloadResultSchema, ...errorResponses },
    },
  }, async request => {
    const manager = sm()
    guard.check(request, guard.ofKeys(request.body.tensors.map(t => t.key)), 'read', 'onload keys')
    return { results: await manager.onload(request.body.tensors) }
  })

  app.post<{ Body: PrefetchBody }>('/v1/state/prefetch', {
    bodyLimit: batchLimit(PrefetchBodySchema),
    schema: { summary: 'Promote NVMe keys to host in the background (returns at once)', body: PrefetchBodySchema, response: { 200: PrefetchResultSchema, ...errorResponses } },
  }, async request => {
    const manager = sm()
    guard.check(request, selected(request.body), 'read', 'prefetch keys')
    return { scheduled: manager.prefetch(request.body) }
  })

  app.post<{ Body: KeySelector }>('/v1/state/drop', {
    bodyLimit: batchLimit(KeySelectorSchema),
    schema: { summary: 'Remove keys from every tier', body: KeySelectorSchema, response: { 200: DropResultSchema, ...errorResponses } },
  }, async request => {
    const manager = sm()
    guard.check(request, selected(request.body), 'write', 'drop keys')
    return { dropped: await manager.drop(request.body) }
  })

  app.post<{ Body: HintsBody }>('/v1/state/hints', {
    bodyLimit: batchLimit(HintsBodySchema),
    schema: { summary: 'Scheduler hints: what is needed next and when (drives spilling and prefetch); replaces earlier hints', body: HintsBodySchema, response: { 200: HintsResultSchema, ...errorResponses } },
  }, async request => {
    const manager = sm()
    guard.check(request, () => guard.ofPrefixes(request.body.next.map(h => h.prefix)), 'read', 'give hints for keys')
    manager.setHints(request.body.next)
    return { ok: true as const }
  })

  app.post<{ Body: MaterializeBody }>('/v1/state/materialize', {
    bodyLimit: batchLimit(MaterializeBodySchema),
    schema: {
      summary: 'Write a namespace/version, or named keys, to safetensors (split with an index above maxFileBytes) from host and NVMe, without a GPU',
      body: MaterializeBodySchema,
      response: { 200: MaterializeResultSchema, ...errorResponses },
    },
  }, async request => {
    const path = await confinedPath(request.body.path, pathRoots, 'write', 'the output path')
    const manager = sm()
    const { prefix, tensors } = request.body
    guard.check(request, () => tensors !== undefined ? guard.ofKeys(tensors.flatMap(x => 'key' in x ? [x.key] : [])) : guard.ofPrefixes([prefix ?? '']), 'read', 'materialize keys')
    return await materialize(manager, { ...request.body, path })
  })

  app.get<{ Querystring: ResidencyQuery }>('/v1/state/residency', {
    schema: {
      summary: 'Tier usage, dedup, fragmentation and per-namespace totals of the selected keys, and one page of them in key order (or the totals alone)',
      querystring: ResidencyQuerySchema,
      response: { 200: ResidencySchema, ...errorResponses },
    },
  }, async request => {
    const { summary, limit, cursor, ...filter } = request.query
    const manager = sm()
    if (summary === true) {
      if (limit !== undefined || cursor !== undefined) throw new AgentError('ERR_BAD_REQUEST', 'limit and cursor page the keys: not with summary=true')
      return manager.residencySummary(filter)
    }
    const page = manager.residencyPage(filter, { cursor, limit })
    return { ...manager.residencySummary(filter), ...page }
  })

  app.get<{ Querystring: OwnersQuery }>('/v1/state/owners', {
    schema: { summary: 'Who owns each namespace holding keys: the uid that stored its first key, or "agent"', querystring: OwnersQuerySchema, response: { 200: NamespaceOwnersSchema, ...errorResponses } },
  }, async (request): Promise<NamespaceOwnersBody> => ({ namespaces: sm().ownedNamespaces(request.query.prefix) }))
}
