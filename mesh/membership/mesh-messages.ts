/**
 * What agents say to each other on the mesh topic, declared once (TypeBox):
 * the TypeScript types, the validation of every received message and the
 * peers API all come from these schemas.
 *
 * - `record`: a node's availability record, versioned by (incarnation, seq).
 *   It doubles as SWIM's "alive" message: a record with a higher incarnation
 *   refutes a suspicion or death claim.
 * - `suspect` / `dead`: membership claims by `from` about `subject` at the
 *   subject's `incarnation`; `dead` with reason "left" is a graceful leave
 *   (from === subject).
 * - `decisions`: fenced decisions of the elected leader (mesh/election/).
 *
 * Later subsystems contribute record sections (hostPool, nvme, resident,
 * weights, rollout) through AvailabilityContributor (availability-publisher.ts); a
 * section a node does not have is absent, never zero. A record that would
 * not fit the receivers' byte bound is cut by its publisher, least important
 * entries first, and says so in `truncated`.
 */
import { Type, type Static } from '@sinclair/typebox'

const PeerIdString = Type.String({ minLength: 32, maxLength: 128, pattern: '^[1-9A-HJ-NP-Za-km-z]+$', description: 'libp2p peer id (base58)' })
const Bytes = Type.Integer({ minimum: 0 })
const Incarnation = Type.Integer({ minimum: 0, description: 'SWIM incarnation of the subject; raised on every restart and refutation' })

export const GpuAvailabilitySchema = Type.Object({
  index: Type.Integer({ minimum: 0 }),
  model: Type.String({ maxLength: 256 }),
  uuid: Type.String({ maxLength: 128 }),
  memoryTotalBytes: Bytes,
  memoryFreeBytes: Type.Union([Bytes, Type.Null()], { description: 'null when no sampler reports it (GPUs from the config, no nvidia-smi)' }),
  health: Type.Union([Type.Literal('ok'), Type.Literal('unknown'), Type.Literal('failed')]),
  inUse: Type.Union([Type.Boolean(), Type.Null()], { description: 'a compute process holds the GPU; null when unknown' }),
})

/** The election's record section (mesh/election/): server or client, and the voter set once known. */
export const ElectionAdvertSchema = Type.Object({
  server: Type.Boolean({ description: 'started with --server (may vote)' }),
  voterSetId: Type.String({ maxLength: 64, description: '"" until the voter set is bootstrapped or adopted' }),
  voters: Type.Array(PeerIdString, { maxItems: 15 }),
}, { additionalProperties: false })

const TierAvailabilitySchema = Type.Object({ totalBytes: Bytes, freeBytes: Bytes })

/**
 * A rollout instance registered with the node's agent (agent/rollout/): an
 * OpenAI-compatible streaming completion server. Only instances in rotation
 * are advertised (answering their health probe); `terminating` is the node's
 * termination notice: its requests move now, no new ones go there.
 */
export const RolloutInstanceAdvertSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]*$', description: 'unique on its node; cluster-wide the instance is "<node>/<id>"' }),
  url: Type.String({ minLength: 8, maxLength: 256, pattern: '^https?://', description: 'base URL; the engine serves <url>/v1/completions' }),
  model: Type.String({ minLength: 1, maxLength: 256, description: 'the model name the engine serves (the request\'s "model")' }),
  weightVersion: Type.Optional(Type.Integer({ minimum: 0, description: 'the weight version it runs, when known' })),
  gpus: Type.Optional(Type.Array(Type.Integer({ minimum: 0 }), { maxItems: 64 })),
  reserved: Type.Optional(Type.Literal(true, { description: 'an engine of the training cluster: with seeding, it takes requests only during the window' })),
  terminating: Type.Optional(Type.Literal(true)),
}, { additionalProperties: false })

export const AvailabilityRecordSchema = Type.Object({
  kind: Type.Literal('record'),
  from: PeerIdString,
  node: Type.String({ minLength: 1, maxLength: 253 }),
  incarnation: Incarnation,
  seq: Type.Integer({ minimum: 0, description: 'publication counter within the incarnation' }),
  publishedAtMs: Type.Integer({ minimum: 0, description: 'sender wall clock, ms since the epoch (diagnostics only: clocks may differ)' }),
  addresses: Type.Object({
    mesh: Type.Array(Type.String({ maxLength: 256 }), { maxItems: 8 }),
    weights: Type.Optional(Type.String({ maxLength: 256, description: 'weight data plane, host:port (weights subsystem)' })),
  }),
  preemptible: Type.Boolean(),
  cpu: Type.Object({ cores: Type.Integer({ minimum: 0 }), loadAvg1: Type.Number({ minimum: 0 }) }),
  memory: Type.Object({ totalBytes: Bytes, availableBytes: Bytes }),
  gpus: Type.Array(GpuAvailabilitySchema, { maxItems: 64 }),
  hostPool: Type.Optional(TierAvailabilitySchema),
  nvme: Type.Optional(TierAvailabilitySchema),
  resident: Type.Optional(Type.Array(Type.String({ maxLength: 512 }), { maxItems: 1024, description: 'namespaces resident on the node (StateManager)' })),
  weights: Type.Optional(Type.Array(Type.Object({
    model: Type.String({ maxLength: 512 }),
    version: Type.Integer({ minimum: 0 }),
    layout: Type.Optional(Type.String({ maxLength: 128, description: 'set when only these (layout, rank) slices are served: a layout id (weights/reshard.ts layoutId)' })),
    pulling: Type.Optional(Type.Literal(true, { description: 'the agent is pulling this version whole and serves the tensors that arrived (the weight swarm)' })),
  }), { maxItems: 1024, description: 'weight versions served (weights subsystem)' })),
  rollout: Type.Optional(Type.Array(RolloutInstanceAdvertSchema, { maxItems: 64, description: 'rollout instances in rotation on the node (agent/rollout/)' })),
  election: Type.Optional(ElectionAdvertSchema),
  truncated: Type.Optional(Type.Object({
    resident: Type.Optional(Type.Integer({ minimum: 1, description: 'resident namespaces left out' })),
    weights: Type.Optional(Type.Integer({ minimum: 1, description: 'weight versions left out' })),
    rollout: Type.Optional(Type.Integer({ minimum: 1, description: 'rollout instances left out' })),
    gpus: Type.Optional(Type.Integer({ minimum: 1, description: 'GPUs left out' })),
  }, { additionalProperties: false, description: 'present when the publisher cut the record to fit mesh.maxRecordBytes (or a section\'s entry bound): entries left out per section; absent = complete' })),
}, { additionalProperties: false })

export const MembershipClaimSchema = Type.Object({
  kind: Type.Union([Type.Literal('suspect'), Type.Literal('dead')]),
  from: PeerIdString,
  subject: PeerIdString,
  incarnation: Incarnation,
  reason: Type.Union([Type.Literal('probe-failed'), Type.Literal('refused'), Type.Literal('suspicion-timeout'), Type.Literal('left')]),
  sentAtMs: Type.Integer({ minimum: 0 }),
}, { additionalProperties: false })

/** One fenced leader decision (mesh/election/decision-log.ts); seq counts from 1 within its epoch. */
export const DecisionSchema = Type.Object({
  seq: Type.Integer({ minimum: 1 }),
  kind: Type.String({ minLength: 1, maxLength: 128 }),
  payload: Type.Unknown(),
}, { additionalProperties: false })

/**
 * Decisions of the leader `from` in `epoch` (its term): new ones as they are
 * made, and periodically the epoch's recent decisions plus the full desired
 * state (`state`: the latest payload per kind as of decision `state.seq`), so
 * an agent that missed a message catches up.
 */
export const DecisionBatchSchema = Type.Object({
  kind: Type.Literal('decisions'),
  from: PeerIdString,
  voterSetId: Type.String({ minLength: 1, maxLength: 64 }),
  epoch: Type.Integer({ minimum: 1 }),
  decisions: Type.Array(DecisionSchema, { maxItems: 256 }),
  state: Type.Optional(Type.Object({
    seq: Type.Integer({ minimum: 0 }),
    entries: Type.Record(Type.String({ maxLength: 128 }), Type.Unknown()),
  }, { additionalProperties: false })),
  sentAtMs: Type.Integer({ minimum: 0 }),
}, { additionalProperties: false })

export const MeshMessageSchema = Type.Union([AvailabilityRecordSchema, MembershipClaimSchema, DecisionBatchSchema])

export type GpuAvailability = Static<typeof GpuAvailabilitySchema>
export type AvailabilityRecord = Static<typeof AvailabilityRecordSchema>
export type MembershipClaim = Static<typeof MembershipClaimSchema>
export type MeshMessage = Static<typeof MeshMessageSchema>
export type RolloutInstanceAdvert = Static<typeof RolloutInstanceAdvertSchema>
export type ElectionAdvert = Static<typeof ElectionAdvertSchema>
export type Decision = Static<typeof DecisionSchema>
export type DecisionBatch = Static<typeof DecisionBatchSchema>

/** The gossipsub topic every agent subscribes to. */
export const meshTopic = '/agentd/mesh/1'
