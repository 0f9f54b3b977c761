/**
 * Wire schemas of /v1/workers and of live operations (/v1/jobs/:id/ops,
 * /v1/jobs/top), declared once beside the code that produces them
 * (agent/workers/, mesh/control/jobs/op-wire.ts); clients reach them here.
 * The protocol: agent/workers/PROTOCOL.md.
 */
import { Type, type Static } from '@sinclair/typebox'
import { jobIdPattern } from '../../../mesh/control/jobs/job-spec.ts'
import { opNamePattern, opProfileFields } from '../../../mesh/control/jobs/op-wire.ts'
import { MemorySpecSchema } from './state.ts'
export { JobsTopSchema, OpAnswerSchema, opIdPattern, opNamePattern, maxOpJsonBytes, type JobsTop, type OpAnswer } from '../../../mesh/control/jobs/op-wire.ts'

/** Most state tensors one worker registers. */
export const maxStateTensors = 4096

export const WorkerRegistrationSchema = Type.Object({
  job: Type.String({ pattern: jobIdPattern }),
  rank: Type.Integer({ minimum: 0, maximum: 1 << 20 }),
  gpu: Type.Union([Type.Integer({ minimum: 0, maximum: 63 }), Type.Null()], { description: 'the agent\'s index of the worker\'s GPU; null in a CPU-only group (gpusPerNode 0)' }),
  ops: Type.Array(Type.String({ pattern: opNamePattern }), { minItems: 1, maxItems: 256, uniqueItems: true, description: 'operations this worker runs' }),
  tensors: Type.Array(Type.Object({
    name: Type.String({ minLength: 1, maxLength: 512 }),
    key: Type.String({ description: 'canonical key (agent/state/keys.ts) in the job\'s namespace, version 0' }),
    memory: MemorySpecSchema,
  }, { additionalProperties: false }), { maxItems: maxStateTensors, description: 'the worker\'s state: what a context switch moves' }),
}, { additionalProperties: false })
export type WorkerRegistration = Static<typeof WorkerRegistrationSchema>

/** A worker's reply to `allocate`: where each state tensor lives now (every registered name once). */
export const WorkerAllocationSchema = Type.Object({
  tensors: Type.Array(Type.Object({
    name: Type.String({ minLength: 1, maxLength: 512 }),
    memory: MemorySpecSchema,
  }, { additionalProperties: false }), { maxItems: maxStateTensors }),
}, { additionalProperties: false })
export type WorkerAllocation = Static<typeof WorkerAllocationSchema>

export const RegisterAnswerSchema = Type.Object({
  workerId: Type.String(),
  job: Type.String(),
  rank: Type.Integer(),
  gpu: Type.Union([Type.Integer(), Type.Null()]),
  node: Type.String({ description: 'this agent\'s peer id' }),
  stored: Type.Union([Type.Object({ version: Type.Integer() }), Type.Null()], { description: 'a stored state this worker is loaded from before its next operation (a restarted worker); null: its initial state was stored as version 0' }),
})
export type RegisterAnswer = Static<typeof RegisterAnswerSchema>

export const WorkerViewSchema = Type.Object({
  workerId: Type.String(),
  job: Type.String(),
  rank: Type.Integer(),
  gpu: Type.Union([Type.Integer(), Type.Null()]),
  pid: Type.Union([Type.Integer(), Type.Null()]),
  attached: Type.Boolean({ description: 'its event stream is open' }),
  onDevice: Type.Boolean({ description: 'its memory holds the job\'s current state (resident)' }),
  storedVersions: Type.Array(Type.Integer(), { description: 'versions of its state in the StateManager, oldest first' }),
  tensors: Type.Integer(),
  stateBytes: Type.Integer(),
  ops: Type.Array(Type.String()),
})
export type WorkerView = Static<typeof WorkerViewSchema>

export const WorkersListSchema = Type.Object({ workers: Type.Array(WorkerViewSchema) })
export type WorkersList = Static<typeof WorkersListSchema>

export const WorkerReplySchema = Type.Object({
  requestId: Type.String({ minLength: 1, maxLength: 64 }),
  ok: Type.Boolean(),
  result: Type.Optional(Type.Unknown()),
  startedAtMs: Type.Optional(Type.Number()),
  durationMs: Type.Optional(Type.Number({ minimum: 0 })),
  error: Type.Optional(Type.Object({ code: Type.String({ maxLength: 64 }), message: Type.String({ maxLength: 8192 }) })),
}, { additionalProperties: false })

export const OpBodySchema = Type.Object({
  name: Type.String({ description: 'an operation every worker of the job registered' }),
  args: Type.Optional(Type.Unknown({ description: 'JSON for the handlers, at most 64 KiB' })),
  opId: Type.Optional(Type.String({ description: 'idempotency id (default: a fresh one)' })),
  ...opProfileFields,
}, { additionalProperties: false })
