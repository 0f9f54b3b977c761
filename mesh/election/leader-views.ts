/** What the API says about the leader and the decision log (schemas declared once: types, validation, OpenAPI). */
import { Type, type Static } from '@sinclair/typebox'

export const LeaderViewSchema = Type.Object({
  leaderId: Type.Union([Type.String(), Type.Null()], { description: 'peer id of the leader of `epoch`; null when unknown' }),
  epoch: Type.Integer({ minimum: 0, description: 'stamped on every decision: the election term (embedded) or the leader key\'s create revision (etcd)' }),
  backend: Type.Union([Type.Literal('embedded'), Type.Literal('etcd')], { description: 'election.backend: the embedded Raft-style election or etcd' }),
  voters: Type.Array(Type.String(), { description: 'embedded: peer ids of the voter set, empty until bootstrapped or adopted; etcd: the servers campaigning now, leader first' }),
  self: Type.Union([Type.Literal('leader'), Type.Literal('follower'), Type.Literal('candidate'), Type.Literal('client')]),
  selfId: Type.String({ description: 'this agent\'s peer id' }),
  voterSetId: Type.String(),
  acting: Type.Boolean({ description: 'this agent is the leader, holds the lease and decides' }),
  applied: Type.Object({ epoch: Type.Integer(), seq: Type.Integer() }, { description: 'highest decision applied here' }),
  decisions: Type.Object({ applied: Type.Integer(), rejected: Type.Integer(), snapshots: Type.Integer(), violations: Type.Integer() }),
})

export const DecisionLogEntrySchema = Type.Object({
  atMs: Type.Integer(),
  epoch: Type.Integer(),
  leader: Type.String(),
  seq: Type.Integer(),
  kind: Type.String(),
  outcome: Type.Union([Type.Literal('applied'), Type.Literal('rejected'), Type.Literal('snapshot')]),
  reason: Type.Optional(Type.String()),
  digest: Type.String(),
})

export const DecisionLogSchema = Type.Object({ entries: Type.Array(DecisionLogEntrySchema) })

export type LeaderViewBody = Static<typeof LeaderViewSchema>
export type DecisionLogBody = Static<typeof DecisionLogSchema>
