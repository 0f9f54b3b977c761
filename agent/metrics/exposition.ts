/**
 * The Prometheus text exposition format, version 0.0.4 (what every Prometheus
 * scrapes): `# HELP`, `# TYPE`, then the family's samples `name{label="value"} value`,
 * one family per group. Written here rather than with prom-client: the agent
 * already keeps its counters in its services and reads them at scrape time,
 * so only this rendering is needed (prom-client's registry, default metrics
 * and collectors would be a second bookkeeping of the same numbers).
 *
 * Contracts:
 * - Names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*
 *   without the reserved `__` prefix; a counter's name ends in `_total`.
 *   A family breaking these, or a name used twice, or a label set repeated
 *   within a family, throws: a programming error, caught by the tests.
 * - HELP text escapes `\` and newline; label values escape `\`, `"` and newline.
 * - Values: finite numbers as JavaScript prints them (which Go's ParseFloat
 *   reads), NaN, +Inf, -Inf.
 * - A family without samples is left out entirely: a subsystem that is not
 *   running contributes nothing, not zeros.
 */

export type MetricType = 'counter' | 'gauge' | 'summary'

export type Labels = Readonly<Record<string, string>>

export interface Sample {
  labels?: Labels
  value: number
  /** Summary families only: the `_sum` or `_count` sample (absent: a quantile, which carries a `quantile` label). */
  suffix?: '_sum' | '_count'
}

export interface MetricFamily {
  name: string
  help: string
  type: MetricType
  samples: Sample[]
}

export const contentType = 'text/plain; version=0.0.4; charset=utf-8'

const metricName = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const labelName = /^[a-zA-Z_][a-zA-Z0-9_]*$/

/** Renders families in the order given; throws an Error on a malformed family (a bug in a collector, not input). */
export function renderExposition (families: readonly MetricFamily[]): string {
  const seen = new Set<string>()
  let out = ''
  for (const family of families) {
    if (family.samples.length === 0) continue
    checkFamily(family, seen)
    out += `# HELP ${family.name} ${escapeHelp(family.help)}\n# TYPE ${family.name} ${family.type}\n`
    const labelSets = new Set<string>()
    for (const sample of family.samples) {
      const labels = renderLabels(family.name, sample.labels)
      const name = family.name + (sample.suffix ?? '')
      if (sample.suffix !== undefined && family.type !== 'summary') throw new Error(`metric ${family.name}: ${sample.suffix} samples belong to summaries`)
      if (family.type === 'summary' && sample.suffix === undefined && sample.labels?.quantile === undefined) throw new Error(`metric ${family.name}: a summary sample is a quantile, _sum or _count`)
      const identity = name + labels
      if (labelSets.has(identity)) throw new Error(`metric ${family.name}: sample ${identity} twice`)
      labelSets.add(identity)
      out += `${name}${labels} ${formatValue(sample.value)}\n`
    }
  }
  return out
}

function checkFamily (family: MetricFamily, seen: Set<string>): void {
  if (!metricName.test(family.name)) throw new Error(`metric name ${JSON.stringify(family.name)} does not match ${metricName.source}`)
  if (family.type === 'counter' && !family.name.endsWith('_total')) throw new Error(`counter ${family.name} must end in _total`)
  if (family.type !== 'counter' && family.name.endsWith('_total')) throw new Error(`${family.type} ${family.name} must not end in _total (only counters do)`)
  // A summary's _sum and _count samples must not collide with another family either.
  const names = family.type === 'summary' ? [family.name, `${family.name}_sum`, `${family.name}_count`] : [family.name]
  for (const name of names) {
    if (seen.has(name)) throw new Error(`metric ${name} rendered twice`)
    seen.add(name)
  }
}

function renderLabels (family: string, labels: Labels | undefined): string {
  if (labels === undefined) return ''
  const entries = Object.entries(labels)
  if (entries.length === 0) return ''
  let out = '{'
  for (let i = 0; i < entries.length; i++) {
    const [name, value] = entries[i]!
    if (!labelName.test(name) || name.startsWith('__')) throw new Error(`metric ${family}: label name ${JSON.stringify(name)} is invalid`)
    out += `${i > 0 ? ',' : ''}${name}="${escapeLabelValue(value)}"`
  }
  return out + '}'
}

export function escapeHelp (text: string): string {
  return text.replaceAll('\\', '\\\\').replaceAll('\n', '\\n')
}

export function escapeLabelValue (value: string): string {
  return value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n')
}

export function formatValue (value: number): string {
  if (Number.isNaN(value)) return 'NaN'
  if (value === Infinity) return '+Inf'
  if (value === -Infinity) return '-Inf'
  return String(value)
}
