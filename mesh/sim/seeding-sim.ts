/**
 * RLBoost's adaptive partial response seeding (§4.1, Algorithm 1) over many
 * training steps in simulated time: the training cluster's own rollout
 * engines generate for the seeding window T_seed and then turn to training,
 * leaving their unfinished responses to the remote (preemptible) instances,
 * which continue them from their tokens; the trainer trains microbatch by
 * microbatch as responses arrive. After each step Algorithm 1
 * (mesh/policies/rollout-balancing/seeding-window.ts, the code the agents
 * run) sets the next window and the most remote instances worth using.
 *
 * Each step's rollout is simulateRolloutStep (rollout-sim.ts: Algorithm 2,
 * token-level migration), with the reserved engines preempted at T_seed
 * (the end of the window is a preemption with a notice). Variants, as in
 * the paper's ablation (Figure 12):
 * - 'full': Algorithm 1 with its scheduler memory;
 * - 'no-memory': without lines 11–14;
 * - 'no-seeding': the training cluster does not generate; every request
 *   goes to the remote instances (all available), the trainer waits.
 * With no remote instance available the training cluster generates the
 * whole step itself and then trains (colocated fallback), whatever the
 * variant.
 *
 * Measured per step, as Algorithm 1 observes them: t_train_wait (the
 * training cluster idle after its window, waiting for a microbatch),
 * t_remote_wait (remote instances idle after their last response until the
 * step ends: the end of training), t_train, t_remote (remote generation
 * time), n̄_prem. Pure and deterministic for a given seed.
 */
import { initialSeeding, nextSeeding, type SeedingConfig, type SeedingState } from '../policies/rollout-balancing/seeding-window.ts'
import { simulateRolloutStep, type SimEngine } from './rollout-sim.ts'
import { generateRolloutTrace } from './rollout-trace.ts'

export type SeedingVariant = 'full' | 'no-memory' | 'no-seeding'

export interface SeedingSimOptions {
  steps: number
  requestsPerStep: number
  meanResponseTokens: number
  maxTokens: number
  seed: number
  /** Remote instances available at each step's start; the last value holds for the remaining steps. */
  available: readonly number[]
  /** Training cost of one response, seconds (a microbatch of B takes B times this). */
  trainSPerResponse: number
  microbatch: number
  /** N_resv, η, the window's bounds. */
  seeding: SeedingConfig
  initialSeedS: number
  variant: SeedingVariant
  /** One engine's timing (reserved and remote engines alike: the same tensor-parallel size, as in the paper). */
  engine: Omit<SimEngine, 'id' | 'preemptAtS' | 'joinAtS'>
}

export interface SeedingStep {
  step: number
  available: number
  /** Remote instances used (at most N_prem). */
  remote: number
  seedS: number
  stepS: number
  trainWaitS: number
  remoteWaitS: number
  trainS: number
  remoteS: number
}

export interface SeedingSimResult {
  variant: SeedingVariant
  steps: SeedingStep[]
  /** Responses trained per second over the run. */
  throughput: number
  /** The training cluster's idle share of the run's time. */
  trainIdleShare: number
  /** Remote instance-seconds generating over remote instance-seconds held. */
  remoteUtilization: number
}

export function simulateSeeding (o: SeedingSimOptions): SeedingSimResult {
  if (!Number.isInteger(o.steps) || o.steps < 1) throw new RangeError(`steps must be an integer >= 1, got ${o.steps}`)
  if (o.available.length === 0 || o.available.some(a => !Number.isInteger(a) || a < 0)) throw new RangeError('available must list integers >= 0')
  if (!(o.trainSPerResponse > 0) || !Number.isInteger(o.microbatch) || o.microbatch < 1) throw new RangeError('trainSPerResponse must be > 0 and microbatch an integer >= 1')
  const availableAt = (s: number): number => o.available[Math.min(s, o.available.length - 1)]!
  let state: SeedingState = initialSeeding(o.seeding, o.initialSeedS)
  const steps: SeedingStep[] = []
  let responses = 0
  let heldS = 0
  let busyS = 0

  for (let s = 0; s < o.steps; s++) {
    const available = availableAt(s)
    const remote = o.variant === 'no-seeding' ? available : Math.min(available, state.maxInstances)
    const seeding = o.variant !== 'no-seeding' && remote > 0
    const engines: SimEngine[] = [
      ...(seeding || remote === 0 ? Array.from({ length: o.seeding.reservedEngines }, (_, k) => ({ id: `reserved${k}`, ...o.engine, ...(remote > 0 ? { preemptAtS: state.seedS } : {}) })) : []),
      ...Array.from({ length: remote }, (_, k) => ({ id: `remote${k}`, ...o.engine })),
    ]
    const { requests } = generateRolloutTrace({ requests: o.requestsPerStep, engines: 1, preempt: 0, atS: 0, meanResponseTokens: o.meanResponseTokens, maxTokens: o.maxTokens, seed: o.seed + s })
    const rollout = simulateRolloutStep(engines, requests, { balancer: 'rlboost', resume: 'tokens', maxPending: 4, rebalanceIntervalMs: 200, plateau: null })
    const finishes = Object.values(rollout.finishS).sort((a, b) => a - b)
    const rolloutEndS = finishes.at(-1) ?? 0

    // The training cluster trains from the end of its window (or of the whole rollout, colocated), microbatch by microbatch.
    let t = remote === 0 ? rolloutEndS : seeding ? Math.min(state.seedS, rolloutEndS) : 0
    let trainWaitS = 0
    for (let k = 0; k < finishes.length; k += o.microbatch) {
      const size = Math.min(o.microbatch, finishes.length - k)
      const ready = finishes[k + size - 1]!
      if (ready > t) { trainWaitS += ready - t; t = ready }
      t += size * o.trainSPerResponse
    }
    const stepS = t
    const trainS = finishes.length * o.trainSPerResponse

    // Each remote instance generates until its last response, then waits for the step's end.
    const lastOn = new Map<string, number>()
    for (const [id, on] of Object.entries(rollout.finishedOn)) if (on.startsWith('remote')) lastOn.set(on, Math.max(lastOn.get(on) ?? 0, rollout.finishS[id]!))
    const remoteLasts = Array.from({ length: remote }, (_, k) => lastOn.get(`remote${k}`) ?? 0)
    const remoteS = remote > 0 ? remoteLasts.reduce((a, b) => a + b, 0) / remote : 0
    const remoteWaitS = remote > 0 ? remoteLasts.reduce((a, b) => a + (stepS - b), 0) / remote : 0

    steps.push({ step: s, available, remote, seedS: seeding ? state.seedS : 0, stepS, trainWaitS, remoteWaitS, trainS, remoteS })
    responses += finishes.length
    heldS += remote * stepS
    busyS += remote * remoteS

    if (o.variant !== 'no-seeding') {
      const observation = { trainWaitS, remoteWaitS, trainS, remoteS, meanInstances: remote, nextInstances: Math.min(availableAt(s + 1), state.maxInstances) }
      if (o.variant === 'full') state = nextSeeding(state, observation, o.seeding)
      else state = { ...nextSeeding({ ...state, memory: {} }, observation, o.seeding), memory: {} }
    }
  }
  const totalS = steps.reduce((n, x) => n + x.stepS, 0)
  return {
    variant: o.variant,
    steps,
    throughput: totalS > 0 ? responses / totalS : 0,
    trainIdleShare: totalS > 0 ? steps.reduce((n, x) => n + x.trainWaitS, 0) / totalS : 0,
    remoteUtilization: heldS > 0 ? busyS / heldS : 0,
  }
}

/**
 * The paper's availability scenario (Figure 12): of `instances` remote
 * instances all but one are preempted at the start; after `scarceSteps`
 * steps a substitute comes every `everySteps` steps until all are back.
 */
export function recoveringAvailability (instances: number, scarceSteps: number, everySteps: number): number[] {
  const out = Array.from({ length: scarceSteps }, () => Math.min(1, instances))
  for (let n = 2; n <= instances; n++) out.push(...Array.from({ length: everySteps }, () => n))
  return out
}
