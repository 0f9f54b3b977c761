/**
 * Counters behind `agentctl mesh`: messages in and out with their rates over
 * the last minute (1-second buckets), dropped messages by reason, and the
 * dissemination latency of records over the last minute (receipt time − the
 * sender's publish time; meaningful where clocks agree, e.g. NTP).
 */

export class RateWindow {
  readonly #buckets: Float64Array
  #head = 0
  #headSecond = 0
  total = 0

  constructor (seconds = 60) { this.#buckets = new Float64Array(seconds) }

  add (n = 1, nowMs = Date.now()): void {
    this.#advance(nowMs)
    this.#buckets[this.#head]! += n
    this.total += n
  }

  /** Events per second over the window. */
  perSecond (nowMs = Date.now()): number {
    this.#advance(nowMs)
    let sum = 0
    for (const b of this.#buckets) sum += b
    return sum / this.#buckets.length
  }

  #advance (nowMs: number): void {
    const second = Math.floor(nowMs / 1000)
    if (this.#headSecond === 0) this.#headSecond = second
    const steps = Math.min(this.#buckets.length, second - this.#headSecond)
    for (let i = 0; i < steps; i++) {
      this.#head = (this.#head + 1) % this.#buckets.length
      this.#buckets[this.#head] = 0
    }
    if (steps > 0) this.#headSecond = second
  }
}

/** Latency samples of the last `windowMs` (at most `size`, oldest dropped first). */
export class LatencyWindow {
  readonly #at: Float64Array
  readonly #ms: Float64Array
  #next = 0
  #count = 0
  readonly windowMs: number

  constructor (windowMs = 60_000, size = 4096) {
    this.windowMs = windowMs
    this.#at = new Float64Array(size)
    this.#ms = new Float64Array(size)
  }

  add (ms: number, nowMs = Date.now()): void {
    this.#at[this.#next] = nowMs
    this.#ms[this.#next] = ms
    this.#next = (this.#next + 1) % this.#at.length
    this.#count = Math.min(this.#count + 1, this.#at.length)
  }

  summary (nowMs = Date.now()): { samples: number, p50Ms: number | null, p99Ms: number | null, maxMs: number | null } {
    const recent: number[] = []
    for (let i = 0; i < this.#count; i++) if (nowMs - this.#at[i]! <= this.windowMs) recent.push(this.#ms[i]!)
    if (recent.length === 0) return { samples: 0, p50Ms: null, p99Ms: null, maxMs: null }
    recent.sort((a, b) => a - b)
    const at = (q: number): number => recent[Math.min(recent.length - 1, Math.floor(q * recent.length))]!
    return { samples: recent.length, p50Ms: at(0.5), p99Ms: at(0.99), maxMs: recent.at(-1)! }
  }
}
