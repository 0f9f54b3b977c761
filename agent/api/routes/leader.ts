/**
 * /v1/leader: thin adapters over the leader subsystem (ERR_LEADER_UNAVAILABLE
 * with its reason when it is not running).
 *   GET  /v1/leader            who leads, epoch, backend, voters, this agent's role
 *   GET  /v1/leader/decisions  this agent's decision log: (epoch, leader, seq, outcome)
 *   POST /v1/leader/decisions  make a decision (only on the acting leader: ERR_NOT_LEADER elsewhere)
 */
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import { AgentError } from '../../../core/errors.ts'
import type { LeaderService } from '../../../mesh/election/leader-service.ts'
import { DecideBodySchema, DecisionLogSchema, DecisionPositionSchema, LeaderViewSchema, type DecideBody } from '../wire/leader.ts'
import { errorResponses } from '../wire/errors.ts'

export interface LeaderSource {
  leader(): Pick<LeaderService, 'view' | 'decisions' | 'decide'> | { unavailable: string }
}

export function registerLeaderRoutes (app: FastifyInstance, source: LeaderSource): void {
  const leader = (): Pick<LeaderService, 'view' | 'decisions' | 'decide'> => {
    const l = source.leader()
    if ('unavailable' in l) throw new AgentError('ERR_LEADER_UNAVAILABLE', `leader election is not running: ${l.unavailable}`)
    return l
  }
  app.get('/v1/leader', {
    schema: { summary: 'Who leads: leader id, epoch, backend, voters, and this agent\'s role', response: { 200: LeaderViewSchema, ...errorResponses } },
  }, async () => leader().view())

  app.get('/v1/leader/decisions', {
    schema: { summary: 'This agent\'s decision log: every decision applied, rejected (stale epoch) or replaced by a snapshot', response: { 200: DecisionLogSchema, ...errorResponses } },
  }, async () => ({ entries: leader().decisions() }))

  app.post<{ Body: DecideBody }>('/v1/leader/decisions', {
    schema: {
      summary: 'Publish a fenced decision (acting leader only)',
      body: DecideBodySchema,
      response: { 200: DecisionPositionSchema, 403: Type.Ref('ErrorBody'), 409: Type.Ref('ErrorBody'), ...errorResponses },
    },
  }, async request => leader().decide(request.body.kind, request.body.payload))
}
