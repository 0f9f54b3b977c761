/**
 * Messages of live execution (agent/workers/PROTOCOL.md), declared once:
 *
 * - controller → its agent → the leader (`jobs.op` leader call): OpRequest;
 *   answered with OpAnswer, or `{ pending: true }` when the operation has
 *   not finished within one long-poll round (the agent asks again with the
 *   same opId, on whichever agent leads by then).
 * - leader → each node of the job (`/agentd/job-op/1.0.0`, op-dispatch.ts):
 *   DispatchMessage; answered with DispatchAnswer or a coded error.
 *
 * Every message is validated on receipt; nothing here trusts its sender's shape.
 */
import { Type, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { AgentError } from '../../../core/errors.ts'
import { jobIdPattern } from './job-spec.ts'

/** Operation names a worker registers and a controller submits. */
export const opNamePattern = '^[A-Za-z_][A-Za-z0-9_.-]{0,63}$'
export const opIdPattern = '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
/** Largest JSON of an operation's arguments, and of one rank's result, bytes. */
export const maxOpJsonBytes = 64 * 1024

/** What an operation tells of its place in the workflow, for the measured profile (component-profile.ts). */
export const opProfileFields = {
  component: Type.Optional(Type.String({ pattern: opNamePattern, description: 'the workflow component it is part of (rollout, inference, actor; env, env_rollout): its run time is recorded for `agentctl plan workflow --job`' })),
  iteration: Type.Optional(Type.Integer({ minimum: 0, description: 'the training iteration it belongs to: a component\'s operations of one iteration add up to its time per iteration (default: an iteration of its own)' })),
  granularity: Type.Optional(Type.Integer({ minimum: 1, maximum: 2 ** 31, description: 'what it processed at once: environments per instance for env and env_rollout, the batch otherwise' })),
}

export const OpRequestSchema = Type.Object({
  job: Type.String({ pattern: jobIdPattern }),
  opId: Type.String({ pattern: opIdPattern, description: 'idempotency id: the same id again answers the first run, never runs it twice' }),
  name: Type.String({ pattern: opNamePattern, description: 'an operation every worker of the job registered' }),
  args: Type.Optional(Type.Unknown({ description: 'small JSON handed to every rank\'s handler (at most 64 KiB); bulk data goes through the StateManager or the weights service' })),
  ...opProfileFields,
}, { additionalProperties: false })
export type OpRequest = Static<typeof OpRequestSchema>

export const RankResultSchema = Type.Object({
  rank: Type.Integer({ minimum: 0 }),
  node: Type.String({ description: 'peer id of the rank\'s node' }),
  result: Type.Unknown({ description: 'the handler\'s JSON result' }),
  startedAtMs: Type.Number({ description: 'the worker\'s wall clock when its handler started' }),
  durationMs: Type.Number({ description: 'the handler\'s run time' }),
})
export type RankResult = Static<typeof RankResultSchema>

export const OpAnswerSchema = Type.Object({
  job: Type.String(),
  opId: Type.String(),
  name: Type.String(),
  ranks: Type.Array(RankResultSchema, { description: 'every rank\'s result, by rank' }),
  switched: Type.Boolean({ description: 'state was moved (offload of another job, or onload of this one) before the run' }),
  offloadMs: Type.Number({ description: 'slowest node\'s offload of the resident job (0: none)' }),
  onloadMs: Type.Number({ description: 'slowest node\'s onload of this job\'s state, from the start of the switch: it overlaps the offload where the device has room for both (0: none)' }),
  switchMs: Type.Number({ description: 'slowest node\'s switch, offload and onload together (0: none)' }),
  runMs: Type.Number({ description: 'slowest node\'s run phase' }),
  queuedMs: Type.Number({ description: 'from ready (submitted, and the job\'s previous operation done) to admission' }),
  totalMs: Type.Number({ description: 'from submission (on the leader that ran it) to the answer' }),
})
export type OpAnswer = Static<typeof OpAnswerSchema>

/** What the leader asks one node of the job to do. */
export const DispatchMessageSchema = Type.Union([
  Type.Object({
    kind: Type.Literal('run'),
    epoch: Type.Integer({ minimum: 0 }),
    job: Type.String({ pattern: jobIdPattern }),
    opId: Type.String({ pattern: opIdPattern }),
    name: Type.String({ pattern: opNamePattern }),
    args: Type.Unknown(),
    /** Version the node stores any job it must offload first under (monotonic cluster-wide: epoch-based). */
    version: Type.Integer({ minimum: 1 }),
  }, { additionalProperties: false }),
  /**
   * Store (offload without release) the job's local state under `version`: its other nodes offloaded it.
   * A rank whose memory is not current records `version` as another name of its latest stored state.
   */
  Type.Object({ kind: Type.Literal('store'), epoch: Type.Integer({ minimum: 0 }), job: Type.String({ pattern: jobIdPattern }), version: Type.Integer({ minimum: 1 }) }, { additionalProperties: false }),
  /** The job's operation waits for these devices: bring its stored state back from NVMe now (best effort). */
  Type.Object({ kind: Type.Literal('prefetch'), epoch: Type.Integer({ minimum: 0 }), job: Type.String({ pattern: jobIdPattern }) }, { additionalProperties: false }),
  /**
   * Roll the job's local workers back to the stored version `version` (a rank of the job died): versions
   * stored after it are dropped, so every rank's next onload loads the same point of the job's history.
   */
  Type.Object({ kind: Type.Literal('invalidate'), epoch: Type.Integer({ minimum: 0 }), job: Type.String({ pattern: jobIdPattern }), version: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }),
  /** Every node of the job stored `version`: versions before it are no rollback target any more and may be dropped. */
  Type.Object({ kind: Type.Literal('commit'), epoch: Type.Integer({ minimum: 0 }), job: Type.String({ pattern: jobIdPattern }), version: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }),
  /** Which versions of the job each local rank holds (a new leader picks a rollback target from them). */
  Type.Object({ kind: Type.Literal('versions'), epoch: Type.Integer({ minimum: 0 }), job: Type.String({ pattern: jobIdPattern }) }, { additionalProperties: false }),
])
export type DispatchMessage = Static<typeof DispatchMessageSchema>

export const DispatchAnswerSchema = Type.Object({
  ranks: Type.Array(Type.Object({ rank: Type.Integer(), result: Type.Unknown(), startedAtMs: Type.Number(), durationMs: Type.Number() })),
  /** Jobs this node offloaded (released) before the run, with the version they are stored under. */
  offloaded: Type.Array(Type.Object({ job: Type.String(), version: Type.Integer() })),
  onloaded: Type.Boolean(),
  offloadMs: Type.Number(),
  onloadMs: Type.Number(),
  switchMs: Type.Number({ description: 'wall time of the switch: offload and onload, overlapped where the device has room' }),
  runMs: Type.Number(),
  bytesMoved: Type.Number({ description: 'state bytes offloaded + onloaded' }),
})
export type DispatchAnswer = Static<typeof DispatchAnswerSchema>

/** Answer to `versions`: each local rank's stored versions, ascending. */
export const VersionsAnswerSchema = Type.Object({
  ranks: Type.Array(Type.Object({ rank: Type.Integer({ minimum: 0 }), versions: Type.Array(Type.Integer({ minimum: 0 })) })),
}, { additionalProperties: false })
export type VersionsAnswer = Static<typeof VersionsAnswerSchema>

/** Per node group (the nodes of the jobs that share them): GET /v1/jobs/top. */
export const JobsTopSchema = Type.Object({
  scheduler: Type.String(),
  epoch: Type.Integer(),
  nodes: Type.Array(Type.Object({
    node: Type.String(),
    device: Type.String({ description: 'the device lock: gpu:k, or cpu for a CPU-only group' }),
    residentJob: Type.Union([Type.String(), Type.Null()], { description: 'job (or worker group) whose state is on the device (null: none or unknown)' }),
    runningOp: Type.Union([Type.String(), Type.Null()], { description: '<job>/<opId> holding the device\'s lock' }),
  }), { description: 'one row per device' }),
  jobs: Type.Array(Type.Object({
    job: Type.String(),
    pending: Type.Integer({ description: 'operations waiting (the head is the admission candidate)' }),
    running: Type.Union([Type.String(), Type.Null()]),
    ops: Type.Integer({ description: 'operations finished on this leader' }),
    failed: Type.Integer(),
    switches: Type.Integer({ description: 'runs that moved state first' }),
    runMs: Type.Number(),
    switchMs: Type.Number(),
    queuedMs: Type.Number(),
    measuredSlowdown: Type.Union([Type.Number(), Type.Null()], { description: '(queued + switch + run) / run over this leader\'s operations' }),
    components: Type.Array(Type.Object({
      component: Type.String(),
      gpus: Type.Integer({ description: 'GPUs of the job (nodes × gpusPerNode) when it ran' }),
      granularity: Type.Union([Type.Integer(), Type.Null()], { description: 'the operations\' granularity (null: not given)' }),
      iterations: Type.Integer({ description: 'iterations the mean is over (the latest 64)' }),
      ops: Type.Integer(),
      iterationMs: Type.Number({ description: 'mean run time per iteration' }),
    }), { description: 'measured run time per workflow component (operations submitted with component), on this leader' }),
  })),
  workflows: Type.Array(Type.Object({
    job: Type.String(),
    mode: Type.String({ description: 'the planner\'s: collocated, disaggregated or hybrid' }),
    groups: Type.Array(Type.Object({ component: Type.String(), job: Type.String({ description: 'the group\'s id: its workers register under it' }), gpus: Type.Tuple([Type.Integer(), Type.Integer()]) })),
    predictedIterationS: Type.Number(),
    measuredIterationS: Type.Union([Type.Number(), Type.Null()], { description: 'mean span of its finished iterations (first admission to last end over its groups; the latest counts once none of its operations is queued or running), on this leader; null before one finished' }),
    iterations: Type.Integer({ description: 'iterations the measured mean is over (the latest 64)' }),
  }), { description: 'jobs with placement auto: the plan against what ran' }),
  switches: Type.Integer(),
  switchMs: Type.Number(),
  runMs: Type.Number(),
})
export type JobsTop = Static<typeof JobsTopSchema>

const checkOpRequest = TypeCompiler.Compile(OpRequestSchema)
const checkDispatch = TypeCompiler.Compile(DispatchMessageSchema)
const checkDispatchAnswer = TypeCompiler.Compile(DispatchAnswerSchema)
const checkVersionsAnswer = TypeCompiler.Compile(VersionsAnswerSchema)

function problem (errors: ReturnType<typeof checkOpRequest.Errors>): string {
  const first = errors.First()
  return first === undefined ? 'invalid' : `${first.path || '/'}: ${first.message}`
}

/** An operation request, or ERR_BAD_REQUEST / ERR_BODY_TOO_LARGE naming what is wrong. */
export function parseOpRequest (body: unknown): OpRequest {
  if (!checkOpRequest.Check(body)) throw new AgentError('ERR_BAD_REQUEST', `operation request ${problem(checkOpRequest.Errors(body))}`)
  const bytes = body.args === undefined ? 0 : Buffer.byteLength(JSON.stringify(body.args) ?? '')
  if (bytes > maxOpJsonBytes) throw new AgentError('ERR_BODY_TOO_LARGE', `operation args take ${bytes} bytes of JSON, more than ${maxOpJsonBytes}: pass bulk data through the StateManager or the weights service`)
  return body
}

export function parseDispatch (message: unknown): DispatchMessage {
  if (!checkDispatch.Check(message)) throw new AgentError('ERR_BAD_REQUEST', `dispatch ${problem(checkDispatch.Errors(message))}`)
  return message
}

export function parseDispatchAnswer (answer: unknown): DispatchAnswer {
  if (!checkDispatchAnswer.Check(answer)) throw new AgentError('ERR_INTERNAL', `dispatch answer ${problem(checkDispatchAnswer.Errors(answer))}`)
  return answer
}

export function parseVersionsAnswer (answer: unknown): VersionsAnswer {
  if (!checkVersionsAnswer.Check(answer)) throw new AgentError('ERR_INTERNAL', `versions answer ${problem(checkVersionsAnswer.Errors(answer))}`)
  return answer
}
