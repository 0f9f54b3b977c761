/**
 * GET /v1/status and GET /healthz: thin adapters over the daemon's status.
 *
 * While the agent starts (the API listens before the subsystems start, so a
 * restart that recovers many NVMe keys is not silent), every route but
 * these two and the OpenAPI document answers 503 ERR_STARTING before it
 * does anything, /healthz included: a client waits for it and asks again
 * (the Python client does so itself); `agentctl status` shows `starting`
 * and the subsystems still pending.
 */
import type { FastifyInstance } from 'fastify'
import { AgentError } from '../../../core/errors.ts'
import { HealthSchema, StatusSchema, type AgentLifecycle, type StatusBody } from '../wire/status.ts'
import { errorResponses } from '../wire/errors.ts'

export interface StatusSource {
  status(): StatusBody
  /** Where the agent is in its life; absent: always ready (an API built without a daemon). */
  lifecycle?(): AgentLifecycle
}

/** Routes that answer while the agent starts. */
const answeredWhileStarting = new Set(['/v1/status', '/v1/openapi.json'])

export function registerStatusRoutes (app: FastifyInstance, source: StatusSource): void {
  const starting = (): AgentError => {
    const pending = source.status().subsystems.filter(s => s.state === 'pending').map(s => s.id)
    return new AgentError('ERR_STARTING', `the agent is starting (subsystems not started yet: ${pending.join(', ') || 'none'}); ask again once GET /healthz answers 200`)
  }
  if (source.lifecycle !== undefined) {
    const lifecycle = source.lifecycle.bind(source)
    app.addHook('onRequest', async request => {
      if (lifecycle() === 'starting' && !answeredWhileStarting.has(request.routeOptions.url ?? '')) throw starting()
    })
  }

  app.get('/v1/status', {
    schema: { summary: 'Agent status: node, version, uptime, subsystems', response: { 200: StatusSchema, ...errorResponses } },
  }, async () => source.status())

  app.get('/healthz', {
    schema: {
      summary: 'Readiness: 200 once the agent started (503 ERR_STARTING before) and while it serves its API',
      response: { 200: HealthSchema, ...errorResponses },
    },
  }, async () => ({ ok: true as const }))
}
