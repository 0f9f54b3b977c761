/**
 * Shared helpers of the native benchmarks: timing, medians, GB/s.
 * GB/s means 10^9 bytes per second.
 */

export function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** Seconds an async operation took (monotonic clock). */
export async function timeSeconds (operation: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint()
  await operation()
  return Number(process.hrtime.bigint() - start) / 1e9
}

export function gbPerSecond (bytes: number, seconds: number): number {
  return bytes / seconds / 1e9
}

/** One result line: the samples' median, all samples, and a ratio to a baseline median. */
export function report (label: string, samples: number[], baseline?: number[]): void {
  const m = median(samples)
  const ratio = baseline === undefined ? '' : `  ratio ${(m / median(baseline)).toFixed(3)}`
  console.log(`${label.padEnd(44)} median ${m.toFixed(2)} GB/s  [${samples.map((s) => s.toFixed(2)).join(', ')}]${ratio}`)
}

export const MiB = 2 ** 20
