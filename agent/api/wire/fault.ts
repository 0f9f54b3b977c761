/**
 * Wire schemas of /v1/fault (test clusters only, registered when
 * election.faultInjection is true). A published stale decision answers the
 * same (epoch, seq) position as POST /v1/leader/decisions.
 */
import { Type, type Static } from '@sinclair/typebox'

export { DecisionPositionSchema, type DecisionPosition } from './leader.ts'

/** PUT /v1/fault/partition: the peer ids to refuse and disconnect; [] heals. */
export const PartitionBodySchema = Type.Object({ deny: Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { maxItems: 1024 }) }, { additionalProperties: false })

/** The answer of PUT /v1/fault/partition: the peer ids now denied. */
export const PartitionResultSchema = Type.Object({ denied: Type.Array(Type.String()) })

/** POST /v1/fault/stale-decision. */
export const StaleDecisionBodySchema = Type.Object({ kind: Type.String({ minLength: 1, maxLength: 128 }), payload: Type.Unknown() }, { additionalProperties: false })

export type PartitionBody = Static<typeof PartitionBodySchema>
export type PartitionResult = Static<typeof PartitionResultSchema>
export type StaleDecisionBody = Static<typeof StaleDecisionBodySchema>
