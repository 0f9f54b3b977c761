/**
 * Algorithm 1's feedback loop between live steps of one model (RLBoost
 * §4.1): what a step measured of the remote instances, plus what the trainer
 * reports of its training after that step, becomes the observation that
 * sets the next step's seeding window and remote-instance bound
 * (seeding-window.ts, the same code the simulator runs).
 *
 * Contract (pure):
 * - The first step of a model starts from T_init (initialWindowS).
 * - A step with a trainer report and a measured previous step adapts:
 *   t_train and t_train_wait are the trainer's; t_remote_wait is, averaged
 *   over the previous step's remote instances, the time from each one's
 *   last response to the answer plus the time training went on after it
 *   (endedAfterS); t_remote, n̄_prem are the previous step's; n̂_prem the
 *   remote instances usable now. Without a report the window stays.
 * - A fixed window (windowS) bypasses the loop: no bound on instances.
 */
import { initialSeeding, nextSeeding, type SeedingConfig, type SeedingState } from '../../policies/rollout-balancing/seeding-window.ts'

/** What a step measured of its remote instances (seconds from its start). */
export interface RemoteMeasurement {
  stepS: number
  /** Per remote instance used: when it joined and when its last response came (null: none came). */
  remotes: Array<{ joinedS: number, lastResponseS: number | null }>
  /** n̄_prem: remote instances in rotation, averaged over the step. */
  meanInstances: number
}

export interface TrainerReport { trainS: number, trainWaitS: number, endedAfterS: number }

export interface ModelSeeding { state: SeedingState, last?: RemoteMeasurement }

export interface WindowRequest {
  windowS?: number
  initialWindowS: number
  eta: number
  training?: TrainerReport
  /** N_resv: reserved instances usable now. */
  reservedEngines: number
  /** n̂_prem: remote instances usable now. */
  remoteNow: number
}

/** t_remote: the remote instances' mean generation time, first dispatch to last response. */
export function remoteGenerationS (m: RemoteMeasurement): number {
  if (m.remotes.length === 0) return 0
  return m.remotes.reduce((n, r) => n + Math.max(0, (r.lastResponseS ?? r.joinedS) - r.joinedS), 0) / m.remotes.length
}

/** The window and instance bound of the next step, and the model's state to keep. */
export function planSeedingWindow (current: ModelSeeding | undefined, r: WindowRequest): { windowS: number, maxInstances: number, next: ModelSeeding | undefined } {
  if (r.windowS !== undefined) return { windowS: r.windowS, maxInstances: Number.POSITIVE_INFINITY, next: current }
  const config: SeedingConfig = { reservedEngines: Math.max(1, r.reservedEngines), eta: r.eta, minSeedS: 0, maxSeedS: 86_400 }
  let state = current?.state ?? initialSeeding(config, r.initialWindowS)
  const last = current?.last
  if (r.training !== undefined && last !== undefined) {
    const remoteWaitS = last.remotes.length === 0 ? 0
      : last.remotes.reduce((n, x) => n + (last.stepS - (x.lastResponseS ?? x.joinedS)), 0) / last.remotes.length + r.training.endedAfterS
    state = nextSeeding(state, {
      trainWaitS: r.training.trainWaitS,
      remoteWaitS,
      trainS: r.training.trainS,
      remoteS: remoteGenerationS(last),
      meanInstances: last.meanInstances,
      nextInstances: r.remoteNow,
    }, config)
  }
  return { windowS: state.seedS, maxInstances: state.maxInstances, next: { state } }
}
