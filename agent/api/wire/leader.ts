/**
 * Wire schemas of /v1/leader. The views are declared once beside the
 * election that fills them (mesh/election/leader-views.ts); clients reach
 * them through this module.
 */
import { Type, type Static } from '@sinclair/typebox'

export {
  DecisionLogEntrySchema, DecisionLogSchema, LeaderViewSchema,
  type DecisionLogBody, type LeaderViewBody,
} from '../../../mesh/election/leader-views.ts'

/** POST /v1/leader/decisions. */
export const DecideBodySchema = Type.Object({
  kind: Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9][A-Za-z0-9._/-]*$', description: 'decision kind; the desired state keeps the latest payload per kind' }),
  payload: Type.Unknown(),
}, { additionalProperties: false })

/** The (epoch, seq) a published decision holds. */
export const DecisionPositionSchema = Type.Object({ epoch: Type.Integer(), seq: Type.Integer() })

export type DecideBody = Static<typeof DecideBodySchema>
export type DecisionPosition = Static<typeof DecisionPositionSchema>
