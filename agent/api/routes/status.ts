/** GET /v1/status and GET /healthz: thin adapters over the daemon's status. */
import type { FastifyInstance } from 'fastify'
import { HealthSchema, StatusSchema, type StatusBody } from '../wire/status.ts'
import { errorResponses } from '../wire/errors.ts'

export interface StatusSource {
  status(): StatusBody
}

export function registerStatusRoutes (app: FastifyInstance, source: StatusSource): void {
  app.get('/v1/status', {
    schema: { summary: 'Agent status: node, version, uptime, subsystems', response: { 200: StatusSchema, ...errorResponses } },
  }, async () => source.status())

  app.get('/healthz', {
    schema: {
      summary: 'Liveness: 200 while the agent serves its API',
      response: { 200: HealthSchema },
    },
  }, async () => ({ ok: true as const }))
}
