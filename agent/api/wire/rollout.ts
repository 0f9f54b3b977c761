/**
 * Wire schemas of /v1/rollout (agent/rollout/): rollout instances registered
 * with this agent, termination notices, and rollout steps run through it.
 */
import { Type, type Static } from '@sinclair/typebox'
import { RolloutInstanceAdvertSchema } from '../../../mesh/membership/mesh-messages.ts'

/** POST /v1/rollout/instances: an OpenAI-compatible streaming completion server on this node (registering the same id again replaces it). */
export const RegisterInstanceBodySchema = Type.Omit(RolloutInstanceAdvertSchema, ['terminating'], { additionalProperties: false })
export type RegisterInstanceBody = Static<typeof RegisterInstanceBodySchema>

/** POST /v1/rollout/terminate: the node (or these of its instances) will be preempted. */
export const TerminateBodySchema = Type.Object({
  instances: Type.Optional(Type.Array(RolloutInstanceAdvertSchema.properties.id, { minItems: 1, maxItems: 64, uniqueItems: true, description: 'default: every instance of this node' })),
  reason: Type.Optional(Type.String({ maxLength: 256 })),
}, { additionalProperties: false })
export type TerminateBody = Static<typeof TerminateBodySchema>

/** Sampling fields that would make the engine answer with more than one sequence per request (the step collects one). */
export const refusedSamplingFields = ['n', 'best_of', 'echo'] as const

const RolloutRequestSchema = Type.Object({
  id: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$', description: 'unique within the step' }),
  prompt: Type.String({ maxLength: 4 * 1024 * 1024 }),
  maxTokens: Type.Integer({ minimum: 1, maximum: 1 << 20 }),
  sampling: Type.Optional(Type.Record(Type.String({ maxLength: 64 }), Type.Unknown(), { description: 'passed to the engine (temperature, top_p, seed, stop, …); prompt, max_tokens, stream and model are the step\'s; n, best_of and echo are refused' })),
}, { additionalProperties: false })

export const RolloutStepOptionsSchema = Type.Object({
  balancer: Type.Optional(Type.Union([Type.Literal('rlboost'), Type.Literal('jsq'), Type.Literal('round-robin')], { description: 'rlboost: Algorithm 2 (default); the baselines dispatch at once and never rebalance' })),
  maxPending: Type.Optional(Type.Integer({ minimum: 1, maximum: 4096, description: 'Θ: requests sent to an instance and not yet producing tokens (default 4)' })),
  firstTokenMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 3_600_000 })),
  stallMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 3_600_000 })),
  rebalanceIntervalMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, description: '0: no continuous balancing' })),
  resume: Type.Optional(Type.Union([Type.Literal('tokens'), Type.Literal('recompute')], { description: 'tokens: a moved request goes on from its collected tokens (default); recompute: from its prompt (for comparison)' })),
  noInstanceTimeoutMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 3_600_000, description: 'how long the step waits with no instance in rotation before failing' })),
  maxMoves: Type.Optional(Type.Integer({ minimum: 1, maximum: 1024 })),
  seeding: Type.Optional(Type.Object({
    windowS: Type.Optional(Type.Number({ minimum: 0, maximum: 86_400, description: 'a fixed window; without it the agent adapts the model\'s window step by step (RLBoost Algorithm 1)' })),
    initialWindowS: Type.Optional(Type.Number({ minimum: 0, maximum: 86_400, description: 'T_init: the adaptive window of the model\'s first step (default 30)' })),
    eta: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1e6, description: 'η: adaptation rate (default 2; larger adapts more slowly)' })),
    training: Type.Optional(Type.Object({
      trainS: Type.Number({ minimum: 0, description: 't_train: the trainer\'s effective training time in its previous step of this model (idle excluded)' }),
      trainWaitS: Type.Number({ minimum: 0, description: 't_train_wait: how long it sat idle after its window, waiting for responses' }),
      endedAfterS: Type.Number({ minimum: 0, description: 'when its training ended, seconds after that step\'s answer' }),
    }, { additionalProperties: false, description: 'the trainer\'s measurements of its previous step: what Algorithm 1 adapts from' })),
  }, { additionalProperties: false, description: 'RLBoost §4.1 seeding: reserved instances (the training cluster\'s engines) take requests only for the window; then their requests move to the remote instances from their tokens' })),
}, { additionalProperties: false })

/** POST /v1/rollout/steps. */
export const RolloutStepBodySchema = Type.Object({
  stream: Type.Optional(Type.Boolean({ description: 'answer as server-sent events: `response` with each response as soon as it is complete (train on microbatches as they fill), then `done` with the step\'s summary, or `error` ({code, message}) if the step fails after it began streaming' })),
  stepId: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$', description: 'names the step: its progress is journaled, and the same step submitted again (the agent restarted, the connection broke) goes on from the tokens collected, or answers again once complete (kept 10 min)' })),
  model: Type.Optional(Type.String({ minLength: 1, maxLength: 256, description: 'only instances serving this model; sent as the requests\' "model"' })),
  weightVersion: Type.Optional(Type.Integer({ minimum: 0, description: 'only instances registered with this weight version or a later one: an engine that pulled the new weights re-registers with their version and joins the running step' })),
  requests: Type.Array(RolloutRequestSchema, { minItems: 1, maxItems: 65_536 }),
  options: Type.Optional(RolloutStepOptionsSchema),
}, { additionalProperties: false })
export type RolloutStepBody = Static<typeof RolloutStepBodySchema>

export const RolloutResponseSchema = Type.Object({
  id: Type.String(),
  text: Type.String(),
  tokens: Type.Integer(),
  finish: Type.String({ description: 'the engine\'s finish reason: stop, length, …' }),
  route: Type.Array(Type.String(), { description: 'the instances that produced it, in order (more than one when it moved)' }),
  finishMs: Type.Number({ description: 'when it was complete, ms from the step\'s start' }),
})

export const RolloutStepAnswerSchema = Type.Object({
  responses: Type.Array(RolloutResponseSchema),
  stepMs: Type.Number(),
  moves: Type.Object({ lost: Type.Integer(), pending: Type.Integer(), executing: Type.Integer() }, { description: 'requests moved: off lost instances, and by balancing' }),
  removed: Type.Array(Type.Object({ instance: Type.String(), reason: Type.String() }), { description: 'instances taken out of rotation during the step, and why' }),
  generatedTokens: Type.Integer({ description: 'tokens the engines generated, counting those a recompute threw away' }),
  instances: Type.Array(Type.String(), { description: 'every instance the step used' }),
  resumed: Type.Optional(Type.Object({ requests: Type.Integer(), tokens: Type.Integer() }, { description: 'a step submitted again: the requests and tokens taken from its journal' })),
  seeding: Type.Optional(Type.Object({
    windowS: Type.Number({ description: 'T_seed: how long the reserved instances took requests' }),
    maxInstances: Type.Integer({ description: 'N_prem: the most remote instances the step used' }),
    meanRemoteInstances: Type.Number({ description: 'n̄_prem: remote instances in rotation, averaged over the step' }),
    remoteS: Type.Number({ description: 't_remote: the remote instances\' mean generation time (first dispatch to last response)' }),
  }, { description: 'present when the step had a seeding window' })),
})
export type RolloutStepAnswer = Static<typeof RolloutStepAnswerSchema>
export type RolloutResponse = Static<typeof RolloutResponseSchema>

/** A streamed step's events (`stream: true`): each response, then the summary (the answer without its responses), or an error. */
export type RolloutStepEvent =
  | { event: 'response', data: RolloutResponse }
  | { event: 'done', data: Omit<RolloutStepAnswer, 'responses'> }
  | { event: 'error', data: { code: string, message: string } }

const ViewedInstanceSchema = Type.Object({ id: Type.String(), node: Type.String(), url: Type.String(), model: Type.String(), weightVersion: Type.Optional(Type.Integer()), reserved: Type.Boolean(), terminating: Type.Boolean() })

export const LocalInstanceSchema = Type.Object({
  ...RegisterInstanceBodySchema.properties,
  state: Type.Union([Type.Literal('up'), Type.Literal('down'), Type.Literal('terminating')], { description: 'up: answering its health probe, advertised; down: not answering (not advertised); terminating: a termination notice came' }),
  reason: Type.Optional(Type.String()),
  registeredAtMs: Type.Integer(),
  lastProbeMs: Type.Integer({ description: '0 = not probed yet' }),
})
export type LocalInstance = Static<typeof LocalInstanceSchema>

/** GET /v1/rollout. */
export const RolloutStatusSchema = Type.Object({
  node: Type.String(),
  local: Type.Array(LocalInstanceSchema, { description: 'instances registered with this agent' }),
  cluster: Type.Array(ViewedInstanceSchema, { description: 'instances this agent sees in the cluster (its own in rotation, and its peers\' advertised)' }),
  steps: Type.Array(Type.Object({ stepId: Type.String(), model: Type.Union([Type.String(), Type.Null()]), requests: Type.Integer(), startedAtMs: Type.Integer(), instances: Type.Integer() }), { description: 'steps running through this agent' }),
})
export type RolloutStatus = Static<typeof RolloutStatusSchema>
