/**
 * agentctl's progress bar for long transfers (`weights publish`, `weights
 * pull`): bytes done of the total, the rate over the last few seconds and the
 * time left at that rate, redrawn in place on one line of stderr:
 *
 *   pulling qwen3-8b  [#########...........]  1.8 GiB / 4.0 GiB  310 MiB/s  ETA 7.4s
 *
 * Only a terminal gets one: on a pipe, a file or the journal, and with
 * --quiet or --json, the bar draws nothing, so a script sees the result alone.
 */
import { formatBytes, formatDuration } from './table.ts'

/** What the bar writes to: process.stderr, or a stand-in in tests. */
export interface ProgressStream {
  isTTY?: boolean
  /** Terminal width in characters; the line is cut to fit. Default 80. */
  columns?: number
  write(text: string): unknown
}

export interface ProgressBarOptions {
  /** What is moving, e.g. "pulling qwen3-8b"; `update` may change it (a new stage). */
  label: string
  /** --quiet or --json: draw nothing. */
  quiet: boolean
  /** Default process.stderr. */
  stream?: ProgressStream
  /** Clock in ms. Default performance.now. */
  now?: () => number
  /** The rate is the bytes moved over this many ms, so a stall shows. Default 3000. */
  rateWindowMs?: number
}

export interface ProgressBar {
  /** True when it draws (a terminal, not quiet). */
  readonly visible: boolean
  /** Now at `doneBytes` of `totalBytes` (0: not known yet); a different `label` starts a new stage (its rate from scratch). */
  update(doneBytes: number, totalBytes: number, label?: string): void
  /** Erases the bar, leaving the cursor at the start of its empty line. Idempotent. */
  stop(): void
}

const barWidth = 20
/** The rate needs samples this far apart before it is shown (and an ETA from it). */
const minRateSpanMs = 500

export function createProgressBar (options: ProgressBarOptions): ProgressBar {
  const stream = options.stream ?? process.stderr
  const visible = !options.quiet && stream.isTTY === true
  const now = options.now ?? (() => performance.now())
  const rateWindowMs = options.rateWindowMs ?? 3000
  let label = options.label
  /** (time ms, done bytes) of this stage, oldest first, spanning at most rateWindowMs. */
  let samples: Array<[number, number]> = []
  let drawn = false
  let stopped = false

  function line (done: number, total: number): string {
    const parts = [label]
    if (total > 0) {
      const filled = Math.min(barWidth, Math.round(barWidth * done / total))
      parts.push(`[${'#'.repeat(filled)}${'.'.repeat(barWidth - filled)}]`, `${formatBytes(done)} / ${formatBytes(total)}`)
    } else {
      parts.push(formatBytes(done))
    }
    const first = samples[0]!
    const last = samples.at(-1)!
    if (last[0] - first[0] >= minRateSpanMs) {
      const bytesPerSecond = (last[1] - first[1]) * 1000 / (last[0] - first[0])
      parts.push(`${formatBytes(Math.round(bytesPerSecond))}/s`)
      if (total > 0 && done < total) parts.push(bytesPerSecond > 0 ? `ETA ${formatDuration((total - done) / bytesPerSecond)}` : 'ETA -')
    }
    return parts.join('  ')
  }

  return {
    visible,
    update (done, total, newLabel) {
      if (!visible || stopped) return
      if (newLabel !== undefined && newLabel !== label) { label = newLabel; samples = [] }
      const t = now()
      samples.push([t, done])
      while (samples.length > 2 && t - samples[1]![0] >= rateWindowMs) samples.shift()
      const width = Math.max(20, (stream.columns ?? 80) - 1)
      // \r and erase-to-end: the line is rewritten in place, never wrapped (a wrapped line cannot be).
      stream.write(`\r${line(done, total).slice(0, width)}\x1b[K`)
      drawn = true
    },
    stop () {
      if (stopped) return
      stopped = true
      if (drawn) stream.write('\r\x1b[K')
    },
  }
}
