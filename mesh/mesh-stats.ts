/**
 * Counters behind `agentctl mesh`: messages in and out with their rates over
 * the last minute (1-second buckets), dropped messages by reason, and the
 * dissemination latency of records (receipt time − the sender's publish time,
 * a 1024-sample reservoir; meaningful where clocks agree, e.g. NTP).
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

export class LatencyReservoir {
  readonly #samples: number[] = []
  #seen = 0
  readonly size: number
  constructor (size = 1024) { this.size = size }

  add (ms: number): void {
    this.#seen++
    if (this.#samples.length < this.size) this.#samples.push(ms)
    else {
      const i = Math.floor(Math.random() * this.#seen)
      if (i < this.size) this.#samples[i] = ms
    }
  }

  summary (): { samples: number, p50Ms: number | null, p99Ms: number | null, maxMs: number | null } {
    if (this.#samples.length === 0) return { samples: 0, p50Ms: null, p99Ms: null, maxMs: null }
    const sorted = [...this.#samples].sort((a, b) => a - b)
    const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!
    return { samples: this.#seen, p50Ms: at(0.5), p99Ms: at(0.99), maxMs: sorted.at(-1)! }
  }
}
