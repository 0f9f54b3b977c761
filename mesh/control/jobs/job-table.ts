/**
 * The job table: the payload of the leader's fenced `jobs` decisions and what
 * every agent answers GET /v1/jobs with. Each decision carries the whole
 * table, so the latest one applied (or adopted from a snapshot) is the
 * complete desired state and a new leader starts from it (leader-service.ts).
 *
 * Times: `*AtMs` are the leader's wall clock, ms since the epoch. Placement
 * slots are absolute: slot s covers [s·slotS, (s+1)·slotS) seconds since the
 * epoch, so a new leader interprets a predecessor's placement on the same
 * clock (cluster clocks are assumed NTP-synchronised to well under a slot).
 */
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { JobSpecSchema } from './job-spec.ts'
import { WorkflowLayoutSchema } from './workflow-layout.ts'

const { live: _live, placement: _placement, workflow: _workflow, ...requiredSpecFields } = Type.Required(JobSpecSchema).properties
/** A stored spec: every field but `live` filled in, and a placement auto job's layout (job-spec.ts normalizedSpec). */
const StoredSpecSchema = Type.Object({ ...requiredSpecFields, live: Type.Optional(Type.Literal(true)), layout: Type.Optional(WorkflowLayoutSchema) }, { additionalProperties: false })

/** A live job's figures measured by the leaders' operation schedulers (mesh/control/jobs/op-scheduler.ts). */
export const MeasuredProfileSchema = Type.Object({
  ops: Type.Integer({ minimum: 0, description: 'operations measured' }),
  runS: Type.Number({ minimum: 0, description: 'GPU-busy time of those operations' }),
  switches: Type.Integer({ minimum: 0 }),
  switchS: Type.Number({ minimum: 0, description: 'mean measured context switch (offload + onload), seconds' }),
  queuedS: Type.Number({ minimum: 0, description: 'time its operations waited for admission' }),
  slowdown: Type.Number({ minimum: 1, description: 'wall / (wall − switch − queued), wall since its first operation: what sharing its nodes cost it (1 alone)' }),
  busyFraction: Type.Number({ minimum: 0, maximum: 1, description: 'run time over wall time since its first measured operation' }),
  updatedAtMs: Type.Integer({ minimum: 0 }),
}, { additionalProperties: false })
export type MeasuredProfile = Static<typeof MeasuredProfileSchema>

/** Events kept per job (the table travels in one mesh message). */
export const maxJobEvents = 4

export const JobEventSchema = Type.Object({
  atMs: Type.Integer({ minimum: 0 }),
  message: Type.String({ maxLength: 400 }),
}, { additionalProperties: false })
export type JobEvent = Static<typeof JobEventSchema>

export const jobStates = ['QUEUED', 'RUNNING', 'COMPLETED'] as const
export type JobState = typeof jobStates[number]

const Slot = Type.Integer({ minimum: 0 })

export const JobPlacementSchema = Type.Object({
  mode: Type.Union([Type.Literal('dedicated'), Type.Literal('shared')], { description: 'dedicated: the nodes are the job\'s alone (cold start, isolated policy)' }),
  startSlot: Slot,
  periodSlots: Type.Integer({ minimum: 1, description: 'the stretched period P\' (slots)' }),
  periods: Type.Integer({ minimum: 1 }),
  busy: Type.Array(Type.Tuple([Type.Integer(), Type.Integer()]), { description: 'busy ranges of one period, slots from its start (padded by the switch cost)' }),
  shiftSlots: Type.Array(Type.Integer({ minimum: 0 }), { description: 'micro-shift of each segment, slots' }),
  predictedSlowdown: Type.Number(),
  strict: Type.Boolean({ description: 'false: admitted with bounded predicted conflicts' }),
}, { additionalProperties: false })

export const JobRecordSchema = Type.Object({
  id: Type.String(),
  spec: StoredSpecSchema,
  state: Type.Union(jobStates.map(s => Type.Literal(s))),
  nodes: Type.Array(Type.String(), { description: 'peer ids of the placed nodes ([] unless RUNNING)' }),
  nodeNames: Type.Array(Type.String(), { description: 'their node names, same order' }),
  placement: Type.Union([JobPlacementSchema, Type.Null()]),
  submittedAtMs: Type.Integer({ minimum: 0 }),
  startedAtMs: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]),
  completedAtMs: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]),
  completedBy: Type.Union([Type.Literal('elapsed'), Type.Literal('reported'), Type.Null()], { description: 'elapsed: its iterations ran out in the leader\'s runtime schedule; reported: POST /v1/jobs/:id/complete' }),
  requeues: Type.Integer({ minimum: 0, description: 'times it went back to QUEUED because a node of its group died' }),
  measured: Type.Optional(MeasuredProfileSchema),
  evictions: Type.Optional(Type.Integer({ minimum: 0, description: 'times the slowdown guard sent it back to the queue' })),
  guardedAtOps: Type.Optional(Type.Integer({ minimum: 0, description: 'its measured operations when the guard last acted for it (the guard waits for as many again)' })),
  events: Type.Optional(Type.Array(JobEventSchema, { maxItems: maxJobEvents, description: 'the latest things the leader did to it and why, oldest first' })),
}, { additionalProperties: false })

export const JobTableSchema = Type.Object({
  slotS: Type.Number({ exclusiveMinimum: 0, description: 'seconds per placement slot' }),
  revision: Type.Integer({ minimum: 0, description: 'counts changes of the table across leaders' }),
  contextSwitches: Type.Integer({ minimum: 0, description: 'context switches (offload of a running job for another) in the leaders\' runtime schedules' }),
  jobs: Type.Array(JobRecordSchema, { description: 'in submission order' }),
}, { additionalProperties: false })

export type JobPlacement = Static<typeof JobPlacementSchema>
export type JobRecord = Static<typeof JobRecordSchema>
export type JobTable = Static<typeof JobTableSchema>

/** GET /v1/jobs: this agent's applied table, where it came from, and the jobs placed on this node. */
export const JobsViewSchema = Type.Object({
  decision: Type.Union([Type.Object({ epoch: Type.Integer(), seq: Type.Integer() }), Type.Null()], { description: 'the decision the table came from (null: none applied yet); a snapshot gives the position it was adopted at' }),
  leaderId: Type.Union([Type.String(), Type.Null()]),
  ...JobTableSchema.properties,
  local: Type.Array(Type.String(), { description: 'ids of the RUNNING jobs placed on this node' }),
})
export type JobsView = Static<typeof JobsViewSchema>

const JobDecisionSchema = Type.Union([Type.Object({ epoch: Type.Integer(), seq: Type.Integer() }), Type.Null()], { description: 'the decision holding the job (null: an earlier leader published it)' })

/** POST /v1/jobs: the job as the leader published it. */
export const JobSubmitAnswerSchema = Type.Object({ job: JobRecordSchema, created: Type.Boolean({ description: 'false: the same spec was already submitted' }), decision: JobDecisionSchema })
/** POST /v1/jobs/:id/complete. */
export const JobCompleteAnswerSchema = Type.Object({ job: JobRecordSchema, decision: JobDecisionSchema })
export type JobSubmitAnswer = Static<typeof JobSubmitAnswerSchema>
export type JobCompleteAnswer = Static<typeof JobCompleteAnswerSchema>

export function emptyJobTable (slotS: number): JobTable {
  return { slotS, revision: 0, contextSwitches: 0, jobs: [] }
}

const checkTable = TypeCompiler.Compile(JobTableSchema)

/** A job table from a decision payload, or undefined when it is not one (absent or malformed). */
export function jobTableOf (payload: unknown): JobTable | undefined {
  return checkTable.Check(payload) ? payload : undefined
}

/** Why a payload is not a job table (for the log). */
export function jobTableProblem (payload: unknown): string {
  const first = checkTable.Errors(payload).First()
  return first === undefined ? 'valid' : `${first.path || '/'}: ${first.message}`
}
