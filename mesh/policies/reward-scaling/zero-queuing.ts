/**
 * Workers per stage for zero queuing (the ZQ baselines of DistRS §6): the
 * peak number of estimated requests running at once at each stage when none
 * ever waits, i.e. request i occupies stage k during
 * [ready_i + Σ_{j<k} s_ij, ready_i + Σ_{j<=k} s_ij). A request ending at t
 * frees its worker for one starting at t (as in SIMULATE).
 */
import type { EstimatedRequest } from './types.ts'

export function zeroQueuingWorkers (requests: readonly EstimatedRequest[], stageCount: number): number[] {
  const peaks: number[] = []
  for (let k = 0; k < stageCount; k++) {
    const starts: number[] = []
    const ends: number[] = []
    for (const r of requests) {
      const s = r.stageS[k] ?? 0
      if (!(s > 0)) continue
      let t = r.readyS
      for (let j = 0; j < k; j++) t += r.stageS[j] ?? 0
      starts.push(t)
      ends.push(t + s)
    }
    starts.sort((a, b) => a - b)
    ends.sort((a, b) => a - b)
    let peak = 0
    let inUse = 0
    let e = 0
    for (const start of starts) {
      while (ends[e]! <= start) { e++; inUse-- }
      inUse++
      if (inUse > peak) peak = inUse
    }
    peaks.push(peak)
  }
  return peaks
}
