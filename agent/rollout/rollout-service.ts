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
 *   one is named). Every watchIntervalMs the view is read again: an instance
 *   that left it (node dead, no longer advertised: its probe failed) or got
 *   a termination notice is preempted (its requests move now); one that
 *   appeared joins the rotation. An instance the step has taken out of
 *   rotation does not come back within the step.
 * - Bad input (duplicate ids, sampling fields that ask for several
 *   sequences) is refused with ERR_BAD_REQUEST before anything is sent.
 * - The caller's signal (it hung up) aborts the step: streams close, nothing
 *   is kept. Stopping the agent aborts running steps with ERR_UNAVAILABLE.
 * - Each model's measured batching profile is kept for its next step's
 *   balancing (the plateau of Algorithm 2).
 */
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import { startRolloutStep, type RolloutStep } from '../../mesh/control/rollout/rollout-step.ts'
import { instancesInView, usable, type MemberRollout } from '../../mesh/control/rollout/instance-view.ts'
import type { BatchingProfile } from '../../mesh/policies/rollout-balancing/load-balancer.ts'
import type { RolloutInstanceAdvert } from '../../mesh/membership/mesh-messages.ts'
import { refusedSamplingFields, type RolloutStatus, type RolloutStepAnswer, type RolloutStepBody } from '../api/wire/rollout.ts'
import { createInstanceRegistry, defaultInstanceProbe, type InstanceRegistry, type InstanceRegistryOptions } from './instance-registry.ts'

export interface RolloutServiceOptions extends Partial<Omit<InstanceRegistryOptions, 'stateDir'>> {
  stateDir: string
  nodeName: string
  /** How often a running step reads the mesh view again. Default 250 ms. */
  watchIntervalMs?: number
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
  runStep(body: RolloutStepBody, signal: AbortSignal): Promise<RolloutStepAnswer>
  status(): RolloutStatus
  /** The availability record's section (absent while no instance is advertised). */
  advert(): { rollout?: RolloutInstanceAdvert[] }
}

interface Running { stepId: string, model: string | null, requests: number, startedAtMs: number, offered: Set<string>, step: RolloutStep }

export function createRolloutService (options: RolloutServiceOptions, components: RolloutServiceComponents): RolloutService {
  const log = components.logger
  const registry = createInstanceRegistry({ ...defaultInstanceProbe, ...options }, { logger: log, changed: () => components.availabilityChanged() })
  const watchIntervalMs = options.watchIntervalMs ?? 250
  const running = new Map<string, Running>()
  const profiles = new Map<string, BatchingProfile>()
  let nextStep = 1

  const view = (): ReturnType<typeof instancesInView> => instancesInView({ node: options.nodeName, instances: registry.advert() }, components.members() ?? [])

  return {
    start: options_ => registry.start(options_),
    async stop () {
      registry.stop()
      for (const r of running.values()) r.step.abort(new AgentError('ERR_UNAVAILABLE', 'the agent is stopping'))
    },
    instances: registry,
    async runStep (body, signal) {
      for (const r of body.requests) {
        const refused = refusedSamplingFields.filter(f => r.sampling !== undefined && f in r.sampling)
        if (refused.length > 0) throw new AgentError('ERR_BAD_REQUEST', `request ${r.id}: sampling ${refused.join(', ')} would make the engine answer with more than one sequence; a step collects one per request`)
      }
      const model = body.model
      const initial = usable(view(), model)
      const step = startRolloutStep(body.requests, initial.map(i => ({ id: i.id, url: i.url })), {
        ...body.options,
        ...(model !== undefined ? { model } : {}),
        ...(profiles.has(model ?? '') ? { profile: profiles.get(model ?? '')! } : {}),
      })
      const r: Running = { stepId: `step-${nextStep++}`, model: model ?? null, requests: body.requests.length, startedAtMs: Date.now(), offered: new Set(initial.map(i => i.id)), step }
      running.set(r.stepId, r)
      log.info({ step: r.stepId, model: r.model, requests: r.requests, instances: initial.map(i => i.id) }, 'rollout step started')
      const watch = setInterval(() => {
        const now = new Map(view().map(i => [i.id, i]))
        for (const id of r.offered) {
          const seen = now.get(id)
          if (seen === undefined) step.preempt(id, 'left the mesh view (its node is dead, or it no longer answers its health probe)')
          else if (seen.terminating) step.preempt(id, 'termination notice')
        }
        for (const i of usable([...now.values()], model)) {
          if (r.offered.has(i.id)) continue
          r.offered.add(i.id)
          log.info({ step: r.stepId, instance: i.id }, 'rollout instance joins the step')
          step.add({ id: i.id, url: i.url })
        }
      }, watchIntervalMs)
      const hangUp = (): void => step.abort(new AgentError('ERR_UNAVAILABLE', 'the caller hung up'))
      signal.addEventListener('abort', hangUp, { once: true })
      try {
        const result = await step.done
        profiles.set(model ?? '', result.profile)
        log.info({ step: r.stepId, stepMs: Math.round(result.stepMs), moves: result.moves, removed: result.removed }, 'rollout step done')
        const { profile: _profile, ...answer } = result
        return { ...answer, instances: [...r.offered] }
      } catch (err) {
        log.warn({ step: r.stepId, err }, 'rollout step failed')
        throw err
      } finally {
        clearInterval(watch)
        signal.removeEventListener('abort', hangUp)
        running.delete(r.stepId)
      }
    },
    status: () => ({
      node: options.nodeName,
      local: registry.list(),
      cluster: view(),
      steps: [...running.values()].map(r => ({ stepId: r.stepId, model: r.model, requests: r.requests, startedAtMs: r.startedAtMs, instances: r.offered.size })),
    }),
    advert: () => {
      const rollout = registry.advert()
      return rollout.length > 0 ? { rollout } : {}
    },
  }
}
