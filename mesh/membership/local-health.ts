/**
 * Local health awareness (Lifeguard): an agent whose own event loop stalls —
 * CPU starvation, a long GC, SIGSTOP — sees every probe time out and would
 * accuse healthy members. This module notices stalls (a sampler timer that
 * fires late) and keeps an awareness score 0..maxScore:
 *
 * - a stall longer than lagThresholdMs raises the score and makes the agent
 *   "unhealthy" for recoverMs: it starts no suspicion and lets no suspicion
 *   timer of its own expire;
 * - a probe with no answer from anyone (direct and indirect) raises it by one,
 *   a successful probe lowers it by one (Lifeguard's LHM);
 * - probe timeouts are multiplied by (1 + score).
 *
 * `checkNow()` measures the lag up to this instant, so a timeout callback that
 * runs right after a stall (before the sampler's own late tick) still sees it.
 */

export interface LocalHealthOptions {
  /** Sampler period, ms. Default 100. */
  sampleIntervalMs?: number
  /** Lag beyond which the loop counts as stalled, ms. */
  lagThresholdMs: number
  /** How long after a stall the agent stays unhealthy, ms. */
  recoverMs: number
  /** Highest awareness score. Default 8 (memberlist). */
  maxScore?: number
}

export interface LocalHealth {
  start(options: { signal: AbortSignal }): void
  stop(): void
  /** Awareness score, 0 = healthy. */
  readonly score: number
  /** No stall within recoverMs (after checking the lag up to now). */
  healthy(): boolean
  /** Stalled at or after `sinceMs` (performance.now() time)? Checks the lag up to now first. */
  stalledSince(sinceMs: number): boolean
  /** `ms` scaled by the awareness score. */
  scale(ms: number): number
  probeSucceeded(): void
  probeFailedEverywhere(): void
  /** Called with the stall length when a stall is noticed. */
  onStall(listener: (stallMs: number) => void): void
}

export function createLocalHealth (options: LocalHealthOptions): LocalHealth {
  const interval = options.sampleIntervalMs ?? 100
  const maxScore = options.maxScore ?? 8
  let score = 0
  let lastTick = performance.now()
  let lastStallAt = -Infinity
  let timer: NodeJS.Timeout | undefined
  const listeners: Array<(stallMs: number) => void> = []

  const checkNow = (): void => {
    const now = performance.now()
    const lag = now - lastTick - interval
    lastTick = now
    if (lag > options.lagThresholdMs) {
      lastStallAt = now
      score = Math.min(maxScore, score + 1)
      for (const l of listeners) l(lag)
    }
  }

  return {
    start ({ signal }) {
      lastTick = performance.now()
      timer = setInterval(checkNow, interval)
      timer.unref()
      signal.addEventListener('abort', () => this.stop(), { once: true })
    },
    stop () {
      if (timer !== undefined) clearInterval(timer)
      timer = undefined
    },
    get score () { return score },
    healthy () {
      // Only a lag beyond what the next regular tick explains counts here.
      if (performance.now() - lastTick > interval + options.lagThresholdMs) checkNow()
      return performance.now() - lastStallAt > options.recoverMs
    },
    stalledSince (sinceMs) {
      if (performance.now() - lastTick > interval + options.lagThresholdMs) checkNow()
      return lastStallAt >= sinceMs
    },
    scale: ms => ms * (1 + score),
    probeSucceeded () { score = Math.max(0, score - 1) },
    probeFailedEverywhere () { score = Math.min(maxScore, score + 1) },
    onStall (listener) { listeners.push(listener) },
  }
}
