/**
 * The rollout trace read by `agentctl sim rollout` and written by `agentctl
 * sim trace rollout`: one step's engines and generation requests.
 *
 *   { "engines": [ { "id", "decodeStepMs", "decodeMsPerSeq", "prefillMsPerToken",
 *                    "kvCapacityTokens", "maxRunning", "preemptAtS"?, "joinAtS"? } ],
 *     "requests": [ { "id", "promptTokens", "maxTokens", "responseTokens" } ] }
 *
 * Engine timing as in mesh/sim/rollout-sim.ts. `responseTokens` is what the
 * engine would generate (end of sequence or max_tokens), at most maxTokens.
 * The generator draws long-tailed lengths (geometric, as reasoning responses
 * are: a few run to max_tokens) and preempts `preempt` engines at `atS`.
 */
import { Type, type Static } from '@sinclair/typebox'
import { createSeededRandom } from '../../core/seeded-random.ts'
import { createInputValidator } from '../../core/validate-input.ts'

const Id = Type.String({ minLength: 1, maxLength: 128 })
const engineSchema = Type.Object({
  id: Id,
  decodeStepMs: Type.Number({ minimum: 0, description: 'a decode step\'s fixed cost' }),
  decodeMsPerSeq: Type.Number({ minimum: 0, description: 'a decode step\'s cost per running sequence' }),
  prefillMsPerToken: Type.Number({ minimum: 0, description: 'prefill cost per prompt token, paid in the step that admits it' }),
  kvCapacityTokens: Type.Integer({ minimum: 1, description: 'prompt + max_tokens of the running sequences, at most' }),
  maxRunning: Type.Integer({ minimum: 1 }),
  preemptAtS: Type.Optional(Type.Number({ minimum: 0, description: 'preempted (killed) at this time' })),
  joinAtS: Type.Optional(Type.Number({ minimum: 0, description: 'joins the rotation at this time' })),
}, { additionalProperties: false })
const requestSchema = Type.Object({
  id: Id,
  promptTokens: Type.Integer({ minimum: 1 }),
  maxTokens: Type.Integer({ minimum: 1 }),
  responseTokens: Type.Integer({ minimum: 0 }),
}, { additionalProperties: false })

export const rolloutTraceSchema = Type.Object({
  engines: Type.Array(engineSchema, { minItems: 1, maxItems: 4096 }),
  requests: Type.Array(requestSchema, { minItems: 1, maxItems: 1_000_000 }),
}, { additionalProperties: false })
export type RolloutTrace = Static<typeof rolloutTraceSchema>

const validator = createInputValidator(rolloutTraceSchema, 'ERR_TRACE_INVALID', 'rollout trace', (trace, report) => {
  for (const [what, list] of [['engines', trace.engines], ['requests', trace.requests]] as const) {
    const seen = new Set<string>()
    for (const [i, x] of list.entries()) {
      if (seen.has(x.id)) { report(`${what}[${i}].id`, `duplicate id "${x.id}"`); return }
      seen.add(x.id)
    }
  }
  for (const [i, r] of trace.requests.entries()) {
    if (r.responseTokens > r.maxTokens) { report(`requests[${i}].responseTokens`, `${r.responseTokens} exceeds maxTokens ${r.maxTokens}`); return }
  }
})

/** Parses trace JSON text; throws AgentError ERR_TRACE_INVALID naming the bad fields. */
export function parseRolloutTrace (text: string, source = 'trace'): RolloutTrace {
  return validator.parse(text, source)
}

export interface RolloutTraceShape {
  requests: number
  engines: number
  /** Engines preempted (the first ones), at atS. */
  preempt: number
  atS: number
  meanResponseTokens: number
  maxTokens: number
  seed: number
}

/** Engines timed like the engine double's defaults; prompts of 100–400 tokens; geometric response lengths capped at maxTokens. */
export function generateRolloutTrace (shape: RolloutTraceShape): RolloutTrace {
  if (shape.preempt > shape.engines) throw new RangeError(`cannot preempt ${shape.preempt} of ${shape.engines} engines`)
  const random = createSeededRandom(shape.seed)
  const engines = Array.from({ length: shape.engines }, (_, i) => ({
    id: `e${i}`, decodeStepMs: 20, decodeMsPerSeq: 0.25, prefillMsPerToken: 0.05, kvCapacityTokens: 65_536, maxRunning: 256,
    ...(i < shape.preempt ? { preemptAtS: shape.atS } : {}),
  }))
  const requests = Array.from({ length: shape.requests }, (_, i) => ({
    id: `r${i}`,
    promptTokens: random.int(100, 400),
    maxTokens: shape.maxTokens,
    responseTokens: Math.min(shape.maxTokens, Math.floor(random.exponential(shape.meanResponseTokens))),
  }))
  return { engines, requests }
}
