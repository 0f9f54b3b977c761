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
  applied: Type.Object({ epoch: Type.Integer(), seq: Type.Integer() }, { description: 'epoch: the highest epoch seen here; seq: the last log index applied here (log indexes count on across epochs)' }),
  commitSeq: Type.Union([Type.Integer(), Type.Null()], { description: 'acting leader: the highest log index a quorum holds (a decision is acknowledged only once committed); null elsewhere' }),
  log: Type.Union([Type.Object({ epoch: Type.Integer(), seq: Type.Integer() }), Type.Null()], { description: 'embedded voters: the last position of this agent\'s durable copy of the leader\'s log (epoch of its last entry, index); null elsewhere' }),
  leaseRemainingMs: Type.Union([Type.Integer(), Type.Null()], { description: 'leader: ms its lease still lets it act; null elsewhere' }),
  otherVoterSets: Type.Array(Type.Object({ voterSetId: Type.String(), agents: Type.Array(Type.String(), { description: 'peer ids of the live agents that advertise it' }) }), {
    description: 'degraded when not empty: live agents of this mesh that follow another voter set (another cluster sharing the mesh and key, e.g. two dev agents that each bootstrapped alone). Each set elects its own leader, and decisions of one are invisible to the other',
  }),
  leaderHeardMsAgo: Type.Union([Type.Integer(), Type.Null()], { description: 'ms since this agent last heard from `leaderId` (election heartbeat, or a decision batch for clients); null when no leader is known. A leader cut off from this agent shows here long before a new one is elected' }),
  decisions: Type.Object({ applied: Type.Integer(), rejected: Type.Integer(), snapshots: Type.Integer(), violations: Type.Integer() }),
})

export const DecisionLogEntrySchema = Type.Object({
  atMs: Type.Integer(),
  epoch: Type.Integer(),
  leader: Type.String(),
  seq: Type.Integer(),
  kind: Type.String(),
  outcome: Type.Union([Type.Literal('applied'), Type.Literal('rejected'), Type.Literal('snapshot'), Type.Literal('resumed'), Type.Literal('moved')], { description: 'resumed: the agent restarted at this persisted position (seq: the last index applied before); moved: the election moved to another voter set (reason names it), whose epochs start over' }),
  reason: Type.Optional(Type.String()),
  digest: Type.String(),
})

export const DecisionLogSchema = Type.Object({ entries: Type.Array(DecisionLogEntrySchema) })

export type LeaderViewBody = Static<typeof LeaderViewSchema>
export type DecisionLogBody = Static<typeof DecisionLogSchema>
