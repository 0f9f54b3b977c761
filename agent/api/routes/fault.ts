/**
 * Fault injection for test clusters, registered only when
 * election.faultInjection is true (otherwise these paths are 404):
 *   PUT  /v1/fault/partition       { deny: [peer ids] } refuse and close connections with them; [] heals
 *   POST /v1/fault/stale-decision  { kind, payload } publish a decision in the last epoch this agent led, ignoring its lease
 */
import type { FastifyInstance } from 'fastify'
import { Type } from '@sinclair/typebox'
import type { Mesh } from '../../../mesh/membership/mesh-service.ts'
import type { LeaderService } from '../../../mesh/election/leader-service.ts'
import { AgentError } from '../../../core/errors.ts'
import { errorResponses } from '../wire/errors.ts'
import { DecisionPositionSchema, PartitionBodySchema, PartitionResultSchema, StaleDecisionBodySchema, type PartitionBody, type StaleDecisionBody } from '../wire/fault.ts'

export interface FaultSource {
  mesh(): Pick<Mesh, 'denyPeers'> | undefined
  leader(): Pick<LeaderService, 'publishStaleDecision'> | undefined
}

export function registerFaultRoutes (app: FastifyInstance, source: FaultSource): void {
  app.put<{ Body: PartitionBody }>('/v1/fault/partition', {
    schema: { summary: 'Test only: refuse and close connections with the given peers ([] heals)', body: PartitionBodySchema, response: { 200: PartitionResultSchema, ...errorResponses } },
  }, async request => {
    const mesh = source.mesh()
    if (mesh === undefined) throw new AgentError('ERR_MESH_UNAVAILABLE', 'the mesh is not running')
    await mesh.denyPeers(request.body.deny)
    return { denied: request.body.deny }
  })

  app.post<{ Body: StaleDecisionBody }>('/v1/fault/stale-decision', {
    schema: { summary: 'Test only: publish a decision in the last epoch this agent led, ignoring its lease', body: StaleDecisionBodySchema, response: { 200: DecisionPositionSchema, 409: Type.Ref('ErrorBody'), ...errorResponses } },
  }, async request => {
    const leader = source.leader()
    if (leader === undefined) throw new AgentError('ERR_LEADER_UNAVAILABLE', 'leader election is not running')
    return leader.publishStaleDecision(request.body.kind, request.body.payload)
  })
}
