/**
 * The reward-service trace format read by `agentctl sim reward` and written
 * by `agentctl sim trace reward` (issue "Reward service scaling"):
 *
 *   { "stages": [ { "name", "resource": "cpu"|"gpu", "cost", "timeoutS" } ],
 *     "maxExtraDelayS",
 *     "tasks": [ { "id", "batches": [ { "startS", "requests": [ { "arrivalS", "stageS": [s1, s2, …] } ] } ] } ] }
 *
 * - Times are seconds on one clock. `startS` is the batch's start (the trainer's
 *   batch-start hint, rollout begins); `arrivalS` is when a request reaches the
 *   service, absolute, >= its batch's `startS`.
 * - `stageS` are the real durations per stage in pipeline order: 0 for a stage the
 *   request never reaches (it failed earlier), the stage's timeout for one that
 *   timed out there; no value exceeds its stage's `timeoutS`.
 * - Batches of a task are listed in start order. The first batch of each task
 *   is its history before the replay window (the planner needs the previous
 *   batch, DistRS Alg. 1–2): it is not replayed, so every task needs >= 2.
 */
import { Type, type Static } from '@sinclair/typebox'
import { createInputValidator } from '../../core/validate-input.ts'

const stageSchema = Type.Object({
  name: Type.String({ minLength: 1, description: 'stage name, unique' }),
  resource: Type.Union([Type.Literal('cpu'), Type.Literal('gpu')], { description: 'what one worker of the stage holds' }),
  cost: Type.Number({ exclusiveMinimum: 0, description: 'C_j, cost of one worker' }),
  timeoutS: Type.Number({ exclusiveMinimum: 0, description: 'T_j, the stage timeout, seconds' }),
}, { additionalProperties: false })

const requestSchema = Type.Object({
  arrivalS: Type.Number({ minimum: 0 }),
  stageS: Type.Array(Type.Number({ minimum: 0 }), { minItems: 1 }),
}, { additionalProperties: false })

const batchSchema = Type.Object({
  startS: Type.Number({ minimum: 0 }),
  requests: Type.Array(requestSchema, { minItems: 1 }),
}, { additionalProperties: false })

const taskSchema = Type.Object({
  id: Type.String({ minLength: 1 }),
  batches: Type.Array(batchSchema, { minItems: 2 }),
}, { additionalProperties: false })

export const rewardTraceSchema = Type.Object({
  stages: Type.Array(stageSchema, { minItems: 1 }),
  maxExtraDelayS: Type.Number({ minimum: 0, description: 'D, tolerable extra delay per batch, seconds' }),
  tasks: Type.Array(taskSchema, { minItems: 1 }),
}, { additionalProperties: false })

export type RewardTrace = Static<typeof rewardTraceSchema>
export type RewardTraceStage = Static<typeof stageSchema>
export type RewardTraceBatch = Static<typeof batchSchema>
export type RewardTraceRequest = Static<typeof requestSchema>

/** Slack for a duration recorded at exactly its timeout after rounding, seconds. */
const TIMEOUT_SLACK_S = 1e-6

const validator = createInputValidator(rewardTraceSchema, 'ERR_TRACE_INVALID', 'reward trace', consistencyIssues)

/** Parses trace JSON text; throws AgentError ERR_TRACE_INVALID naming the bad fields. */
export function parseRewardTrace (text: string, source = 'trace'): RewardTrace {
  return validator.parse(text, source)
}

/** Checks shape and consistency; returns the value typed. Throws AgentError ERR_TRACE_INVALID. */
export function validateRewardTrace (value: unknown, source = 'trace'): RewardTrace {
  return validator.parse(value, source)
}

/** Cross-field rules of a schema-valid trace; `report` collects issues (the validator keeps the first 10). */
function consistencyIssues (trace: RewardTrace, report: (path: string, message: string) => void): void {
  let count = 0
  const add = (path: string, message: string): boolean => { report(path, message); return ++count >= 10 }
  const stageNames = new Set<string>()
  for (const [j, stage] of trace.stages.entries()) {
    if (stageNames.has(stage.name) && add(`stages[${j}].name`, `duplicate stage name "${stage.name}"`)) return
    stageNames.add(stage.name)
  }
  const taskIds = new Set<string>()
  for (const [t, task] of trace.tasks.entries()) {
    if (taskIds.has(task.id) && add(`tasks[${t}].id`, `duplicate task id "${task.id}"`)) return
    taskIds.add(task.id)
    for (const [b, batch] of task.batches.entries()) {
      const at = `tasks[${t}].batches[${b}]`
      if (b > 0 && batch.startS < task.batches[b - 1]!.startS &&
        add(`${at}.startS`, `batches must be in start order: ${batch.startS} < previous batch's ${task.batches[b - 1]!.startS}`)) return
      for (const [i, request] of batch.requests.entries()) {
        const ra = `${at}.requests[${i}]`
        if (request.arrivalS < batch.startS && add(`${ra}.arrivalS`, `arrives at ${request.arrivalS}, before its batch starts at ${batch.startS}`)) return
        if (request.stageS.length !== trace.stages.length) {
          if (add(`${ra}.stageS`, `has ${request.stageS.length} durations, the trace has ${trace.stages.length} stages`)) return
          continue
        }
        for (const [j, s] of request.stageS.entries()) {
          const timeoutS = trace.stages[j]!.timeoutS
          if (s > timeoutS + TIMEOUT_SLACK_S && add(`${ra}.stageS[${j}]`, `${s} s exceeds stage "${trace.stages[j]!.name}" timeout ${timeoutS} s`)) return
        }
      }
    }
  }
}
