/**
 * Rollout on this agent (RLBoost §4.1–4.2): the instances registered here
 * (instance-registry.ts, advertised in the availability record) and the
 * rollout steps trainers run through it.
 *
 * A step runs where it is submitted: the trainer's own agent dispatches,
 * collects token by token and migrates (mesh/control/rollout/rollout-step.ts)
 * over every instance it sees in the cluster (instance-view.ts). Its
 * collected tokens live with the trainer that waits for them, so nothing of a
 * step depends on another agent: the leader's death, or the death of any
 * node but the trainer's, costs the step at most the requests in flight on
 * the instances that died, which continue elsewhere from their tokens.
 *
 * Contract of runStep:
 * - Instances: the view's, not terminating, serving the step's model (when
 *   one is named) at its weight version or later (when one is named: an
 *   engine that pulled new weights registers again with their version).
 *   Every watchIntervalMs the view is read again: an instance that left it
 *   (node dead, no longer advertised: its probe failed) or got a
 *   termination notice is preempted (its requests move now); one that
 *   appeared joins the rotation. An instance the step has taken out of
 *   rotation does not come back within the step.
 * - Bad input (duplicate ids, sampling fields that ask for several
 *   sequences) is refused with ERR_BAD_REQUEST before anything is sent.
 * - The caller's signal (it hung up) aborts the step: streams close, and
 *   only a named step keeps its progress (its journal). Stopping the agent
 *   aborts running steps with ERR_UNAVAILABLE, their journals written.
 * - Each model's measured batching profile is kept for its next step's
 *   balancing (the plateau of Algorithm 2).
 * - Seeding (RLBoost §4.1, `options.seeding`): the reserved instances (the
 *   training cluster's engines) take requests for the window only, and the
 *   remote ones, at most N_prem of them, for the whole step; when the window
 *   ends (and a remote instance is in rotation to take over: colocated until
 *   then) the reserved instances leave the step, their requests going on
 *   remotely from their tokens. The window is fixed (`windowS`) or the
 *   model's adaptive one: Algorithm 1 run on the trainer's report of its
 *   previous step and that step's measurements (seeding-feedback.ts). The
 *   answer's `seeding` says what was used and measured. Without seeding
 *   every instance, reserved or not, takes requests for the whole step.
 * - A step submitted with a `stepId` is journaled (step-journal.ts): its
 *   progress every journalIntervalMs (less often when writing it takes long:
 *   journal-writer.ts) and when it ends, failed or not. The
 *   same step submitted again while it runs gets the same answer; after this
 *   agent restarted, or the caller's connection broke, it goes on from the
 *   journaled tokens (`resumed` in the answer); once complete, it is
 *   answered again without generating. The same id with other requests is
 *   refused (ERR_BAD_REQUEST).
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { startRolloutStep, type RequestProgress, type RolloutResponse, type RolloutStep, type RolloutStepResult } from '../../mesh/control/rollout/rollout-step.ts'
import { instancesInView, usable, type MemberRollout, type ViewedInstance } from '../../mesh/control/rollout/instance-view.ts'
import { planSeedingWindow, remoteGenerationS, type ModelSeeding } from '../../mesh/control/rollout/seeding-feedback.ts'
import type { BatchingProfile } from '../../mesh/policies/rollout-balancing/load-balancer.ts'
import type { RolloutInstanceAdvert } from '../../mesh/membership/mesh-messages.ts'
import { refusedSamplingFields, type RolloutStatus, type RolloutStepAnswer, type RolloutStepBody } from '../api/wire/rollout.ts'
import { createStepJournal, stepDigest } from './step-journal.ts'
import { startJournalWriter } from './journal-writer.ts'
import { startSeedingWindow, windowOverReason } from './seeding-window-run.ts'
import { createInstanceRegistry, defaultInstanceProbe, type InstanceRegistry, type InstanceRegistryOptions } from './instance-registry.ts'

export interface RolloutServiceOptions extends Partial<Omit<InstanceRegistryOptions, 'stateDir'>> {
  stateDir: string
  nodeName: string
  /** How often a running step reads the mesh view again. Default 250 ms. */
  watchIntervalMs?: number
  /** How often a step submitted with a step id writes its progress. Default 1000 ms. */
  journalIntervalMs?: number
}

export interface RolloutServiceComponents {
  logger: Logger
  /** The other agents (the mesh's peers); undefined while the mesh is not running (then only this node's instances). */
  members(): readonly MemberRollout[] | undefined
  availabilityChanged(): void
}

export interface RolloutService {
  start(options: { signal: AbortSignal }): Promise<void>
  stop(): Promise<void>
  readonly instances: Pick<InstanceRegistry, 'register' | 'deregister' | 'terminate'>
  /** `onResponse`: each response as soon as it is complete (a streamed step), each once, before the answer. */
  runStep(body: RolloutStepBody, signal: AbortSignal, onResponse?: (response: RolloutResponse) => void): Promise<RolloutStepAnswer>
  status(): RolloutStatus
  /** The availability record's section (absent while no instance is advertised). */
  advert(): { rollout?: RolloutInstanceAdvert[] }
  /** Totals since the agent started (metrics). */
  counters(): RolloutCounters
}

export interface RolloutCounters {
  steps: { done: number, failed: number }
  /** Requests moved: off lost instances, and by balancing (queued, generating). */
  moves: { lost: number, pending: number, executing: number }
  /** Instances steps took out of rotation (lost, garbage, notices, seeding windows). */
  removed: number
  /** Tokens the engines generated for steps run here, and those a recompute threw away. */
  tokens: { kept: number, wasted: number }
}

/** What a resumed step took from its journal (absent when it was not resumed). */
function resumedFrom (progress: Readonly<Record<string, RequestProgress>> | undefined): Pick<RolloutStepAnswer, 'resumed'> {
  const entries = Object.values(progress ?? {})
  if (entries.length === 0) return {}
  return { resumed: { requests: entries.filter(p => p.tokens > 0 || p.finish !== undefined).length, tokens: entries.reduce((n, p) => n + p.tokens, 0) } }
}

interface Running {
  stepId: string
  model: string | null
  requests: number
  startedAtMs: number
  offered: Set<string>
  step: RolloutStep
  /** Settles when the step ended (stop() waits for the journals' last writes). */
  answer: Promise<RolloutStepAnswer>
}

export function createRolloutService (options: RolloutServiceOptions, components: RolloutServiceComponents): RolloutService {
  const log = components.logger
  const registry = createInstanceRegistry({ ...defaultInstanceProbe, ...options }, { logger: log, changed: () => components.availabilityChanged() })
  const watchIntervalMs = options.watchIntervalMs ?? 250
  const running = new Map<string, Running>()
  /** Named steps being answered (running, or reading their journal first), by step id. */
  const named = new Map<string, { digest: string, answer: Promise<RolloutStepAnswer> }>()
  const profiles = new Map<string, BatchingProfile>()
  /** Algorithm 1's state per model, with the last seeded step's measurements. */
  const seedingByModel = new Map<string, ModelSeeding>()
  let nextStep = 1
  const journal = createStepJournal({ stateDir: options.stateDir, keepAnsweredMs: 10 * 60_000, abandonAfterMs: 24 * 3_600_000 }, { logger: log })
  const journalIntervalMs = options.journalIntervalMs ?? 1000
  const counters: RolloutCounters = { steps: { done: 0, failed: 0 }, moves: { lost: 0, pending: 0, executing: 0 }, removed: 0, tokens: { kept: 0, wasted: 0 } }

  /** The window of a seeded step: fixed, or the model's adaptive one after the trainer's report (seeding-feedback.ts). */
  const planSeeding = (model: string | undefined, o: NonNullable<NonNullable<RolloutStepBody['options']>['seeding']>, available: readonly ViewedInstance[]): { windowS: number, maxInstances: number } => {
    const plan = planSeedingWindow(seedingByModel.get(model ?? ''), {
      ...(o.windowS !== undefined ? { windowS: o.windowS } : {}),
      ...(o.training !== undefined ? { training: o.training } : {}),
      initialWindowS: o.initialWindowS ?? 30,
      eta: o.eta ?? 2,
      reservedEngines: available.filter(i => i.reserved).length,
      remoteNow: available.filter(i => !i.reserved).length,
    })
    if (plan.next !== undefined) seedingByModel.set(model ?? '', plan.next)
    return { windowS: plan.windowS, maxInstances: plan.maxInstances }
  }

  const view = (): ReturnType<typeof instancesInView> => instancesInView({ node: options.nodeName, instances: registry.advert() }, components.members() ?? [])

  /** Runs a step (resumed from `journaled.progress` when given); a journaled step's progress is written as it goes. */
  const execute = async (body: RolloutStepBody, signal: AbortSignal, stepId: string, journaled?: { digest: string, progress?: Record<string, RequestProgress> }, onResponse?: (response: RolloutResponse) => void): Promise<RolloutStepAnswer> => {
    const model = body.model
    const { seeding: seedingOptions, ...stepOptions } = body.options ?? {}
    const available = usable(view(), model, body.weightVersion)
    const plan = seedingOptions === undefined ? undefined : planSeeding(model, seedingOptions, available)
    const initial = plan === undefined ? available : [...available.filter(i => i.reserved), ...available.filter(i => !i.reserved).slice(0, plan.maxInstances)]
    const step = startRolloutStep(body.requests, initial.map(i => ({ id: i.id, url: i.url })), {
      ...stepOptions,
      onRemoved: (instance, reason, requestsMoved) => log[reason === windowOverReason ? 'info' : 'warn']({ step: stepId, instance, reason, requestsMoved }, 'rollout instance out of the step\'s rotation; its requests go on elsewhere'),
      ...(model !== undefined ? { model } : {}),
      ...(profiles.has(model ?? '') ? { profile: profiles.get(model ?? '')! } : {}),
      ...(journaled?.progress !== undefined ? { resumeFrom: journaled.progress } : {}),
      ...(onResponse !== undefined ? { onComplete: onResponse } : {}),
    })
    const settled = Promise.withResolvers<RolloutStepAnswer>()
    settled.promise.catch(() => {}) // read by stop() only
    const r: Running = { stepId, model: model ?? null, requests: body.requests.length, startedAtMs: Date.now(), offered: new Set(initial.map(i => i.id)), step, answer: settled.promise }
    running.set(stepId, r)
    log.info({ step: stepId, model: r.model, requests: r.requests, instances: initial.map(i => i.id), seeding: plan ?? null }, 'rollout step started')
    const journalWriter = journaled !== undefined ? startJournalWriter({ stepId, digest: journaled.digest, intervalMs: journalIntervalMs }, step, { journal, logger: log }) : undefined
    const seedingRun = plan !== undefined ? startSeedingWindow(plan, initial, step) : undefined
    const watch = setInterval(() => {
      const now = new Map(view().map(i => [i.id, i]))
      for (const id of r.offered) {
        const seen = now.get(id)
        if (seen === undefined) step.preempt(id, 'left the mesh view (its node is dead, or it no longer answers its health probe)')
        else if (body.weightVersion !== undefined && (seen.weightVersion ?? -1) < body.weightVersion) step.preempt(id, `registered again with weight version ${seen.weightVersion ?? 'none'}`)
        else if (seen.terminating) step.preempt(id, 'termination notice')
      }
      seedingRun?.tick()
      for (const i of usable([...now.values()], model, body.weightVersion)) {
        if (r.offered.has(i.id) || seedingRun?.mayJoin(i) === false) continue
        r.offered.add(i.id)
        seedingRun?.joined(i)
        log.info({ step: stepId, instance: i.id }, 'rollout instance joins the step')
        step.add({ id: i.id, url: i.url })
      }
    }, watchIntervalMs)
    const hangUp = (): void => step.abort(new AgentError('ERR_UNAVAILABLE', 'the caller hung up'))
    signal.addEventListener('abort', hangUp, { once: true })
    try {
      const result = await step.done
      profiles.set(model ?? '', result.profile)
      count(result)
      log.info({ step: stepId, stepMs: Math.round(result.stepMs), moves: result.moves, removed: result.removed }, 'rollout step done')
      const { profile: _profile, ...answer } = result
      const out: RolloutStepAnswer = { ...answer, ...resumedFrom(journaled?.progress), instances: [...r.offered] }
      if (plan !== undefined && seedingRun !== undefined) {
        const measured = seedingRun.measurement(result)
        const modelSeeding = seedingByModel.get(model ?? '')
        if (modelSeeding !== undefined && seedingOptions?.windowS === undefined) seedingByModel.set(model ?? '', { ...modelSeeding, last: measured })
        out.seeding = { windowS: plan.windowS, maxInstances: Number.isFinite(plan.maxInstances) ? plan.maxInstances : measured.remotes.length, meanRemoteInstances: measured.meanInstances, remoteS: remoteGenerationS(measured) }
      }
      await journalWriter?.write(out) // a caller that lost the answer asks again
      settled.resolve(out)
      return out
    } catch (err) {
      await journalWriter?.write() // the progress so far: a resubmission goes on from it
      settled.reject(err)
      counters.steps.failed++
      log.warn({ step: stepId, err }, 'rollout step failed')
      throw err
    } finally {
      journalWriter?.stop()
      seedingRun?.stop()
      clearInterval(watch)
      signal.removeEventListener('abort', hangUp)
      running.delete(stepId)
    }
  }

  /** A finished step in the counters. */
  const count = (result: RolloutStepResult): void => {
    const kept = result.responses.reduce((n, x) => n + x.tokens, 0)
    counters.steps.done++
    for (const k of ['lost', 'pending', 'executing'] as const) counters.moves[k] += result.moves[k]
    counters.removed += result.removed.length
    counters.tokens.kept += kept
    counters.tokens.wasted += result.generatedTokens - kept
  }

  return {
    start: options_ => registry.start(options_),
    async stop () {
      registry.stop()
      const settled = [...running.values()].map(async r => await r.answer.catch(() => {}))
      for (const r of running.values()) r.step.abort(new AgentError('ERR_UNAVAILABLE', 'the agent is stopping'))
      // Their journals get the progress so far (bounded: a stuck disk must not hold up the stop).
      await Promise.race([Promise.all(settled), new Promise(resolve => setTimeout(resolve, 5000).unref())])
    },
    instances: registry,
    async runStep (body, signal, onResponse) {
      /** An answer that did not stream (a resubmission's): its responses are handed out first. */
      const replayed = (answer: RolloutStepAnswer): RolloutStepAnswer => { for (const r of answer.responses) onResponse?.(r); return answer }
      const ids = new Set<string>()
      for (const r of body.requests) {
        if (ids.has(r.id)) throw new AgentError('ERR_BAD_REQUEST', `request id ${JSON.stringify(r.id)} appears twice`)
        ids.add(r.id)
        const refused = refusedSamplingFields.filter(f => r.sampling !== undefined && f in r.sampling)
        if (refused.length > 0) throw new AgentError('ERR_BAD_REQUEST', `request ${r.id}: sampling ${refused.join(', ')} would make the engine answer with more than one sequence; a step collects one per request`)
      }
      // Unnamed steps get ids a caller cannot choose ("#n" does not match the stepId pattern).
      if (body.stepId === undefined) return await execute(body, signal, `#${nextStep++}`, undefined, onResponse)
      const stepId = body.stepId
      const digest = stepDigest(body)
      const same = named.get(stepId)
      if (same !== undefined) {
        if (same.digest !== digest) throw new AgentError('ERR_BAD_REQUEST', `step ${stepId} is running with other requests; a step id names one step`)
        return replayed(await same.answer) // the same step submitted again while it runs (a retry): the same answer
      }
      // Claimed before the journal is read: a second submission meanwhile waits for this one instead of running it too.
      const answer = (async () => {
        await journal.prune().catch((err: unknown) => log.warn({ err }, 'rollout step journal: pruning failed'))
        const entry = await journal.read(stepId)
        if (entry !== undefined && entry.digest !== digest) throw new AgentError('ERR_BAD_REQUEST', `step id ${stepId} was used for other requests; a step id names one step`)
        if (entry?.answer !== undefined) return replayed(entry.answer)
        return await execute(body, signal, stepId, { digest, ...(entry !== undefined ? { progress: entry.progress } : {}) }, onResponse)
      })()
      const claim = { digest, answer }
      named.set(stepId, claim)
      answer.catch(() => {}) // read by duplicates only
      try {
        return await answer
      } finally {
        if (named.get(stepId) === claim) named.delete(stepId)
      }
    },
    status: () => ({
      node: options.nodeName,
      local: registry.list(),
      cluster: view(),
      steps: [...running.values()].map(r => ({ stepId: r.stepId, model: r.model, requests: r.requests, startedAtMs: r.startedAtMs, instances: r.offered.size })),
    }),
    counters: () => structuredClone(counters),
    advert: () => {
      const rollout = registry.advert()
      return rollout.length > 0 ? { rollout } : {}
    },
  }
}
