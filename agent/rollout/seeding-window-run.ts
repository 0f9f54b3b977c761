/**
 * The seeding window of one running step (RLBoost §4.1), on the step's
 * clock: which instances may join, when the reserved instances leave, and
 * what the step measured of the remote instances for Algorithm 1.
 *
 * Contract:
 * - The window ends at windowS once a remote instance is in rotation (the
 *   reserved instances' requests need somewhere to go: colocated until
 *   then); then every reserved instance leaves with windowOverReason.
 * - Joining mid-step: a reserved instance only while the window lasts, a
 *   remote one only while fewer than maxInstances remote ones are in
 *   rotation.
 * - n̄_prem is the time-weighted count of remote instances in rotation,
 *   sampled at each tick and at the end.
 */
import type { RolloutStep, RolloutStepResult } from '../../mesh/control/rollout/rollout-step.ts'
import type { RemoteMeasurement } from '../../mesh/control/rollout/seeding-feedback.ts'

/** Why a reserved instance leaves a seeded step: the normal end of its window, not a fault. */
export const windowOverReason = 'seeding window over'

export interface SeedingWindowRun {
  /** May this instance join the step now? */
  mayJoin(instance: { id: string, reserved: boolean }): boolean
  joined(instance: { id: string, reserved: boolean }): void
  /** At each watch tick: samples n̄_prem and ends the window when it is due. */
  tick(): void
  /** What the step measured of its remote instances (call once it is done). */
  measurement(result: Pick<RolloutStepResult, 'stepMs' | 'responses'>): RemoteMeasurement
  stop(): void
}

export function startSeedingWindow (plan: { windowS: number, maxInstances: number }, initial: ReadonlyArray<{ id: string, reserved: boolean }>, step: Pick<RolloutStep, 'inRotation' | 'preempt'>): SeedingWindowRun {
  const began = performance.now()
  const elapsedS = (): number => (performance.now() - began) / 1000
  /** Remote instances: when each joined, seconds from the start. */
  const joinedS = new Map(initial.filter(i => !i.reserved).map(i => [i.id, 0]))
  const reserved = new Set(initial.filter(i => i.reserved).map(i => i.id))
  let over = false
  let remoteInstanceS = 0
  let lastSampleS = 0
  const remotesInRotation = (): number => step.inRotation().filter(id => joinedS.has(id)).length
  const sample = (): void => {
    const nowS = elapsedS()
    remoteInstanceS += remotesInRotation() * Math.max(0, nowS - lastSampleS)
    lastSampleS = nowS
  }
  const endIfDue = (): void => {
    if (over || elapsedS() < plan.windowS || remotesInRotation() === 0) return
    over = true
    for (const id of step.inRotation()) if (reserved.has(id)) step.preempt(id, windowOverReason)
  }
  const timer = setTimeout(endIfDue, plan.windowS * 1000)

  return {
    mayJoin: i => i.reserved ? !over : remotesInRotation() < plan.maxInstances,
    joined (i) {
      if (i.reserved) reserved.add(i.id)
      else joinedS.set(i.id, elapsedS())
    },
    tick () {
      sample()
      endIfDue()
    },
    measurement (result) {
      sample()
      const stepS = result.stepMs / 1000
      const lastResponseS = new Map<string, number>()
      for (const x of result.responses) lastResponseS.set(x.route.at(-1)!, Math.max(lastResponseS.get(x.route.at(-1)!) ?? 0, x.finishMs / 1000))
      return {
        stepS,
        remotes: [...joinedS].map(([id, joined]) => ({ joinedS: joined, lastResponseS: lastResponseS.get(id) ?? null })),
        meanInstances: Math.round(100 * remoteInstanceS / Math.max(lastSampleS, 1e-9)) / 100, // over this run's own clock, as sampled
      }
    },
    stop: () => clearTimeout(timer),
  }
}
