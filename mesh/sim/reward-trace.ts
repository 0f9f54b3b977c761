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
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { AgentError } from '../../agent/errors.ts'
import { closestName } from '../../agent/config/schema-walk.ts'

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

const compiledTrace = TypeCompiler.Compile(rewardTraceSchema)
const MAX_ISSUES = 10
/** Slack for a duration recorded at exactly its timeout after rounding, seconds. */
const TIMEOUT_SLACK_S = 1e-6

/** Parses trace JSON text; throws AgentError ERR_TRACE_INVALID naming the bad fields. */
export function parseRewardTrace (text: string, source = 'trace'): RewardTrace {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (err) {
    throw new AgentError('ERR_TRACE_INVALID', `${source} is not JSON: ${(err as Error).message}`, { cause: err })
  }
  return validateRewardTrace(value, source)
}

/** Checks shape and consistency; returns the value typed. Throws AgentError ERR_TRACE_INVALID. */
export function validateRewardTrace (value: unknown, source = 'trace'): RewardTrace {
  const issues: Array<{ path: string, message: string }> = []
  if (!compiledTrace.Check(value)) {
    const seen = new Set<string>()
    for (const error of compiledTrace.Errors(value)) {
      const path = dottedPath(error.path) || '(root)'
      if (seen.has(path)) continue
      seen.add(path)
      const choices = (error.schema.anyOf as TSchema[] | undefined)?.map(option => option.const as unknown)
      const expected = choices !== undefined && choices.every(c => c !== undefined) ? `Expected one of ${choices.map(c => JSON.stringify(c)).join(', ')}` : error.message
      let message = `${expected}${error.value === undefined ? '' : `, got ${JSON.stringify(error.value)}`}`
      if (error.message === 'Unexpected property') {
        const segments = error.path.split('/').filter(Boolean)
        const hint = closestName(segments.at(-1)!, Object.keys(propertiesAt(rewardTraceSchema, segments.slice(0, -1))))
        if (hint !== undefined) message += `; did you mean "${hint}"?`
      }
      issues.push({ path, message })
      if (issues.length >= MAX_ISSUES) break
    }
  } else {
    consistencyIssues(value, issues)
  }
  if (issues.length > 0) {
    const lines = issues.map(i => `  ${i.path}: ${i.message}`)
    throw new AgentError('ERR_TRACE_INVALID', `${source} is not a valid reward trace:\n${lines.join('\n')}`, { details: issues })
  }
  return value as RewardTrace
}

function consistencyIssues (trace: RewardTrace, issues: Array<{ path: string, message: string }>): void {
  const add = (path: string, message: string): boolean => { issues.push({ path, message }); return issues.length >= MAX_ISSUES }
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

/** "/tasks/0/batches/1/startS" → "tasks[0].batches[1].startS" */
function dottedPath (pointer: string): string {
  return pointer.split('/').filter(Boolean).reduce((out, seg) => /^\d+$/.test(seg) ? `${out}[${seg}]` : out === '' ? seg : `${out}.${seg}`, '')
}

function propertiesAt (schema: TSchema, segments: readonly string[]): Record<string, TSchema> {
  let node: TSchema | undefined = schema
  for (const seg of segments) {
    if (node === undefined) return {}
    node = /^\d+$/.test(seg) ? (node.items as TSchema | undefined) : (node.properties as Record<string, TSchema> | undefined)?.[seg]
  }
  return (node?.properties as Record<string, TSchema> | undefined) ?? {}
}
