/**
 * Results of `npm run bench` (test/bench/run.ts): what one run records per
 * benchmark, the figures parsed out of its human output lines, and the
 * comparison of two runs. Pure: no I/O, so the parsing and the comparison are
 * unit-tested on their own (test/bench/bench-results.test.ts).
 */

/** One figure a bench printed: a median or percentile, with the unit printed after it ('' when none). */
export interface BenchMetric {
  /** Stable across runs of the same bench with the same arguments: the line's label plus the statistic. */
  key: string
  value: number
  unit: string
}

export type BenchStatus = 'ok' | 'failed' | 'not-run' | 'timed-out'

export interface BenchResult {
  /** File name without `.bench.ts`. */
  name: string
  status: BenchStatus
  /** Why it did not run or failed (a missing tool, a signal, the timeout). */
  reason?: string
  /** null when it was not started or was killed by a signal. */
  exitCode: number | null
  /** Wall time, seconds. */
  durationS: number
  /** Its stdout and stderr lines, as printed. */
  output: string[]
  metrics: BenchMetric[]
}

export interface BenchRun {
  /** ISO time the run started. */
  startedAt: string
  /** `git describe --always --dirty` of the checkout, '' outside git. */
  commit: string
  node: string
  host: string
  cpus: number
  /** The filter arguments; empty = every bench. */
  filter: string[]
  benches: BenchResult[]
}

/** A number after `median` or `pNN`, then an optional unit (GB/s, ms, s, …). */
const statPattern = /\b(median|p\d{1,2}(?:\.\d+)?)\s+(-?\d+(?:\.\d+)?)(?:\s*(GB\/s|MB\/s|MiB\/s|ms|us|µs|ns|s|h|%|x|MiB|GiB))?(?![\w/.])/g

/**
 * Removes what changes from run to run in the text around a figure:
 * bracketed sample lists, parenthesised asides that contain measured numbers,
 * and standalone decimal numbers (integers stay: they are sizes and counts
 * the bench was asked for, like "512 MiB").
 */
function stableText (text: string, dropAsides: boolean): string {
  let s = text.replace(/\[[^\]]*\]/g, ' ')
  s = s.replace(/\([^()]*\)/g, aside => (dropAsides || /(^|[\s(])-?\d+\.\d+/.test(aside)) ? ' ' : aside)
  s = s.replace(/(^|\s)-?\d+\.\d+(?=\s|$|[,;:%])/g, '$1')
  return s.replace(/\s+/g, ' ').replace(/^[\s,;:|]+|[\s,;:|]+$/g, '')
}

/**
 * The "median X" and "pNN X" figures of a bench's human output, one metric
 * each. The key is the line's label (the text before its first figure) plus,
 * for a later figure on the same line, the words just before it ("cpu" in
 * "wall median 3 ms  cpu median 2 ms"), plus the statistic. A key seen twice
 * gets " #2", " #3", … in order.
 */
export function parseTextMetrics (lines: readonly string[]): BenchMetric[] {
  const metrics: BenchMetric[] = []
  const seen = new Map<string, number>()
  for (const line of lines) {
    let label = ''
    let previousEnd = 0
    for (const match of line.matchAll(statPattern)) {
      const [text, stat, value, unit] = match
      const before = line.slice(previousEnd, match.index)
      const qualifier = previousEnd === 0 ? '' : stableText(before, true)
      if (previousEnd === 0) label = stableText(before, false)
      previousEnd = match.index + text.length
      const base = [label, qualifier, stat].filter(part => part !== '').join(' ')
      const count = (seen.get(base) ?? 0) + 1
      seen.set(base, count)
      metrics.push({ key: count === 1 ? base : `${base} #${count}`, value: Number(value), unit: unit ?? '' })
    }
  }
  return metrics
}

/** Unit of a JSON key's suffix: handoffP99Us → us, startMedianMs → ms. */
function unitOfKey (key: string): string {
  const suffix = /(Us|Ms|Ns|S|MiB|GiB|Bytes|GBps)$/.exec(key)?.[1]
  return suffix === undefined ? '' : ({ Us: 'us', Ms: 'ms', Ns: 'ns', S: 's', MiB: 'MiB', GiB: 'GiB', Bytes: 'B', GBps: 'GB/s' } as Record<string, string>)[suffix]!
}

/**
 * Benches that print one JSON object (startup, device-lock, mesh): every
 * numeric field whose name says median or pNN, keyed by its path.
 */
export function parseJsonMetrics (lines: readonly string[]): BenchMetric[] {
  const start = lines.findIndex(l => l.startsWith('{'))
  const end = lines.findLastIndex(l => l.startsWith('}'))
  if (start < 0 || end < start) return []
  let parsed: unknown
  try {
    parsed = JSON.parse(lines.slice(start, end + 1).join('\n'))
  } catch {
    return []
  }
  const metrics: BenchMetric[] = []
  const walk = (value: unknown, path: string[]): void => {
    if (typeof value === 'number' && /median|p\d{2}/i.test(path.at(-1) ?? '')) {
      metrics.push({ key: path.join('.'), value, unit: unitOfKey(path.at(-1)!) })
    } else if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) walk(v, [...path, k])
    }
  }
  walk(parsed, [])
  return metrics
}

/** Every figure `parseTextMetrics` and `parseJsonMetrics` find in one bench's output. */
export function parseMetrics (lines: readonly string[]): BenchMetric[] {
  return [...parseJsonMetrics(lines), ...parseTextMetrics(lines)]
}

/** Whether a larger value of this unit is better (throughput), worse (time, memory) or neither (ratios, counts). */
export function direction (unit: string): 'higher' | 'lower' | 'unknown' {
  if (/\/s$/.test(unit)) return 'higher'
  if (['s', 'ms', 'us', 'µs', 'ns', 'h', 'MiB', 'GiB', 'B'].includes(unit)) return 'lower'
  return 'unknown'
}

export type Verdict = 'better' | 'worse' | 'changed' | 'same' | 'new' | 'gone'

export interface MetricComparison {
  bench: string
  key: string
  unit: string
  previous?: number
  current?: number
  /** (current − previous) / previous, percent; absent when either side is missing or previous is 0. */
  changePct?: number
  verdict: Verdict
}

export interface BenchComparison {
  bench: string
  previousStatus?: BenchStatus
  currentStatus?: BenchStatus
  previousDurationS?: number
  currentDurationS?: number
  metrics: MetricComparison[]
}

export interface Comparison {
  previous: { startedAt: string, commit: string }
  benches: BenchComparison[]
  /** Metrics worse than the threshold, and benches that ran before and do not pass now. */
  regressions: string[]
}

/**
 * Compares two runs bench by bench (only benches in the current run). A
 * metric whose change is within ±thresholdPct is `same`; beyond it, `better`
 * or `worse` by the direction of its unit, or `changed` when the unit says
 * nothing (ratios, counts). Benchmarks are noisy on shared machines: a
 * regression here is a prompt to re-run, not a verdict.
 */
export function compareRuns (previous: BenchRun, current: BenchRun, thresholdPct = 10): Comparison {
  const regressions: string[] = []
  const benches = current.benches.map((now): BenchComparison => {
    const before = previous.benches.find(b => b.name === now.name)
    const metrics: MetricComparison[] = []
    const beforeMetrics = new Map((before?.metrics ?? []).map(m => [m.key, m]))
    for (const m of now.metrics) {
      const old = beforeMetrics.get(m.key)
      beforeMetrics.delete(m.key)
      if (old === undefined) {
        metrics.push({ bench: now.name, key: m.key, unit: m.unit, current: m.value, verdict: 'new' })
        continue
      }
      const changePct = old.value === 0 ? undefined : (m.value - old.value) / Math.abs(old.value) * 100
      let verdict: Verdict = 'same'
      if (changePct === undefined ? m.value !== old.value : Math.abs(changePct) > thresholdPct) {
        const way = direction(m.unit)
        const up = m.value > old.value
        verdict = way === 'unknown' ? 'changed' : (up === (way === 'higher') ? 'better' : 'worse')
      }
      if (verdict === 'worse') regressions.push(`${now.name}: ${m.key} ${old.value} → ${m.value} ${m.unit}`.trimEnd())
      metrics.push({ bench: now.name, key: m.key, unit: m.unit, previous: old.value, current: m.value, ...(changePct !== undefined ? { changePct } : {}), verdict })
    }
    for (const old of beforeMetrics.values()) metrics.push({ bench: now.name, key: old.key, unit: old.unit, previous: old.value, verdict: 'gone' })
    if (before?.status === 'ok' && now.status !== 'ok') regressions.push(`${now.name}: was ok, now ${now.status}${now.reason !== undefined ? ` (${now.reason})` : ''}`)
    return {
      bench: now.name,
      ...(before !== undefined ? { previousStatus: before.status, previousDurationS: before.durationS } : {}),
      currentStatus: now.status,
      currentDurationS: now.durationS,
      metrics,
    }
  })
  return { previous: { startedAt: previous.startedAt, commit: previous.commit }, benches, regressions }
}

/** Fixed-width columns: numeric ones (numbers, "-", "+1.5%") right-aligned, the others left-aligned. */
export function formatTable (header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map(r => (r[i] ?? '').length)))
  const numeric = header.map((_, i) => rows.length > 0 && rows.every(r => /^([-+]?\d+(\.\d+)?%?|-|)$/.test(r[i] ?? '')))
  const line = (cells: readonly string[]): string =>
    cells.map((c, i) => numeric[i] === true ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)).join('  ').trimEnd()
  return [line(header), line(widths.map(w => '-'.repeat(w))), ...rows.map(line)].join('\n')
}

/** The short table of one run: status, exit code, duration and figure count per bench. */
export function formatRun (run: BenchRun): string {
  return formatTable(['bench', 'status', 'exit', 'seconds', 'figures'], run.benches.map(b => [
    b.name,
    b.status + (b.status === 'ok' || b.reason === undefined ? '' : `: ${b.reason}`),
    b.exitCode === null ? '-' : String(b.exitCode),
    b.durationS.toFixed(1),
    String(b.metrics.length),
  ]))
}

const formatNumber = (value: number | undefined): string => value === undefined ? '-' : String(Number(value.toPrecision(4)))

/** The comparison as text: one row per figure that is not `same` (all of them with `all`), then the regressions. */
export function formatComparison (comparison: Comparison, options: { all?: boolean } = {}): string {
  const rows: string[][] = []
  let differences = 0
  for (const bench of comparison.benches) {
    if (bench.previousStatus !== bench.currentStatus) {
      differences++
      rows.push([bench.bench, 'status', bench.previousStatus ?? '-', bench.currentStatus ?? '-', '', ''])
    }
    for (const m of bench.metrics) {
      if (m.verdict !== 'same') differences++
      else if (options.all !== true) continue
      const change = m.changePct === undefined ? '' : `${m.changePct >= 0 ? '+' : ''}${m.changePct.toFixed(1)}%`
      rows.push([`${bench.bench}: ${m.key}`, m.unit, formatNumber(m.previous), formatNumber(m.current), change, m.verdict])
    }
  }
  const compared = comparison.benches.reduce((n, b) => n + b.metrics.length, 0)
  const head = `compared with ${comparison.previous.startedAt}${comparison.previous.commit !== '' ? ` (${comparison.previous.commit})` : ''}: ` +
    `${compared} figures, ${differences === 0 ? 'no' : differences} differences beyond the threshold`
  const table = rows.length === 0 ? '' : '\n' + formatTable(['figure', 'unit', 'before', 'now', 'change', ''], rows)
  const regressions = comparison.regressions.length === 0
    ? '\nno regressions'
    : `\nREGRESSIONS (${comparison.regressions.length}; re-run to tell noise from a real change):\n` + comparison.regressions.map(r => `  ${r}`).join('\n')
  return head + table + regressions
}
