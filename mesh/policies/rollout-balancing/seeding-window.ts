/**
 * RLBoost's adaptive partial response seeding (Algorithm 1, §4.1) as a pure
 * step function: after each step, the training cluster's seeding window
 * T_seed (how long it generates itself before it turns to training and
 * leaves the rest of its responses to the remote instances) and the most
 * remote instances worth using, N_prem.
 *
 * - Line 9: T_seed += (t_train_wait − t_remote_wait) / η. The trainer
 *   waiting for responses lengthens the window; the remote instances waiting
 *   for the trainer shortens it. Clamped to [minSeedS, maxSeedS] (ours: the
 *   paper leaves T_seed unbounded).
 * - Line 10: N_prem = (t_remote · n̄_prem + T_seed · N_resv) / t_train: the
 *   instances for which rollout, done by remote instances alone, would take
 *   no longer than training. Rounded up, at least 1 (ours).
 * - Lines 11–14, scheduler memory: a step whose instance count did not
 *   change (n̄_prem = n̂_prem) records its T_seed under n̂_prem; a step that
 *   starts with a count seen before starts from the recorded window instead.
 *
 * Times in seconds. The memory is returned as a new object (no mutation).
 */

export interface SeedingState {
  seedS: number
  maxInstances: number
  /** T_seed last optimised under a given number of instances. */
  memory: Readonly<Record<number, number>>
}

export interface StepObservation {
  /** t_train_wait: the training cluster idle, waiting for responses to fill a microbatch. */
  trainWaitS: number
  /** t_remote_wait: remote instances idle after their last response, waiting for the step to end. */
  remoteWaitS: number
  /** t_train: the training cluster's effective training time (idle excluded). */
  trainS: number
  /** t_remote: the remote instances' generation time in the step. */
  remoteS: number
  /** n̄_prem: instances averaged over the step. */
  meanInstances: number
  /** n̂_prem: instances available before the next step. */
  nextInstances: number
}

export interface SeedingConfig {
  /** N_resv: rollout engines the training cluster runs during seeding. */
  reservedEngines: number
  /** η: the adaptation rate (a larger η adapts more slowly). */
  eta: number
  minSeedS: number
  maxSeedS: number
}

export function initialSeeding (config: SeedingConfig, initialSeedS: number): SeedingState {
  return { seedS: clamp(initialSeedS, config.minSeedS, config.maxSeedS), maxInstances: Math.max(1, config.reservedEngines), memory: {} }
}

export function nextSeeding (state: SeedingState, o: StepObservation, config: SeedingConfig): SeedingState {
  if (!(config.eta > 0)) throw new RangeError(`eta must be > 0, got ${config.eta}`)
  for (const [k, v] of Object.entries(o)) if (!Number.isFinite(v) || v < 0) throw new RangeError(`${k} must be a finite number >= 0, got ${v}`)
  let seedS = clamp(state.seedS + (o.trainWaitS - o.remoteWaitS) / config.eta, config.minSeedS, config.maxSeedS)
  const maxInstances = o.trainS > 0 ? Math.max(1, Math.ceil((o.remoteS * o.meanInstances + seedS * config.reservedEngines) / o.trainS)) : state.maxInstances
  let memory = state.memory
  if (o.meanInstances === o.nextInstances) memory = { ...memory, [o.nextInstances]: seedS }
  const remembered = memory[o.nextInstances]
  if (remembered !== undefined) seedS = remembered
  return { seedS, maxInstances, memory }
}

const clamp = (x: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, x))
