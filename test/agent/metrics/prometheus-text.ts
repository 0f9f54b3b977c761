/**
 * A strict parser of the Prometheus text exposition format 0.0.4, for tests:
 * what the agent serves must parse here, and anything Prometheus would
 * reject (or that our contract forbids) throws with the line number.
 *
 * Format rules checked (from the format's specification):
 * - lines end with \n, the last one included; tokens are separated by blanks;
 * - `# HELP name text` (escapes \\ and \n only), `# TYPE name type` with type
 *   counter | gauge | histogram | summary | untyped, each at most once per
 *   name, TYPE before the name's first sample; other `#` lines are comments;
 * - a sample is `name{label="value",...} value [timestamp]`: names match
 *   [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*, label values
 *   escape \\, \" and \n only, a label name at most once per sample (a
 *   trailing comma is allowed), values are Go floats or NaN / +Inf / -Inf,
 *   timestamps integer milliseconds;
 * - a family's lines form one group (no interleaving); summaries carry
 *   `quantile` on their plain samples, histograms `le` on `_bucket`.
 * Stricter than the format, as the agent's contract: every family has HELP
 * and TYPE before its samples, no blank lines, no sample twice.
 */

export interface ParsedSample {
  /** The sample's own name (a summary's `x_sum` or `x_count` included). */
  name: string
  labels: Record<string, string>
  value: number
  timestampMs?: number
}

export interface ParsedFamily {
  name: string
  help: string
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped'
  samples: ParsedSample[]
}

const metricName = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const labelNameStart = /[a-zA-Z_]/
const labelNameChar = /[a-zA-Z0-9_]/
const floatText = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/
const types = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped'])

export class ExpositionError extends Error {}

export function parsePrometheusText (text: string): Map<string, ParsedFamily> {
  if (text.length > 0 && !text.endsWith('\n')) throw new ExpositionError('the last line does not end with \\n')
  const lines = text.split('\n').slice(0, -1)
  const families = new Map<string, ParsedFamily>()
  /** Declared with HELP / TYPE, before a family is complete. */
  const help = new Map<string, string>()
  const type = new Map<string, ParsedFamily['type']>()
  const sampled = new Set<string>()
  const closed = new Set<string>()
  let current: string | undefined
  const seenSamples = new Set<string>()

  const enter = (family: string, line: number): void => {
    if (current === family) return
    if (closed.has(family)) throw new ExpositionError(`line ${line}: family ${family} continues after another family's lines (its lines must form one group)`)
    if (current !== undefined) closed.add(current)
    current = family
  }

  lines.forEach((raw, index) => {
    const line = index + 1
    if (raw.trim() === '') throw new ExpositionError(`line ${line}: blank line`)
    if (raw.startsWith('#')) {
      const m = /^#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(raw)
      if (m === null) return // a comment
      const [, keyword, name, rest = ''] = m as unknown as [string, 'HELP' | 'TYPE', string, string | undefined]
      if (!metricName.test(name)) throw new ExpositionError(`line ${line}: invalid metric name ${JSON.stringify(name)}`)
      enter(name, line)
      if (sampled.has(name)) throw new ExpositionError(`line ${line}: ${keyword} for ${name} after its samples`)
      if (keyword === 'HELP') {
        if (help.has(name)) throw new ExpositionError(`line ${line}: second HELP for ${name}`)
        help.set(name, unescapeHelp(rest, line))
      } else {
        if (type.has(name)) throw new ExpositionError(`line ${line}: second TYPE for ${name}`)
        const t = rest.trim()
        if (!types.has(t)) throw new ExpositionError(`line ${line}: unknown type ${JSON.stringify(t)}`)
        type.set(name, t as ParsedFamily['type'])
      }
      return
    }
    const sample = parseSample(raw, line)
    const family = familyOf(sample.name, type)
    if (family === undefined) throw new ExpositionError(`line ${line}: sample ${sample.name} has no TYPE line before it`)
    if (!help.has(family)) throw new ExpositionError(`line ${line}: sample ${sample.name} has no HELP line before it`)
    enter(family, line)
    sampled.add(family)
    const t = type.get(family)!
    if (t === 'summary' && sample.name === family) requireFloatLabel(sample, 'quantile', line)
    if (t === 'histogram' && sample.name === `${family}_bucket`) requireFloatLabel(sample, 'le', line)
    const identity = sample.name + JSON.stringify(Object.entries(sample.labels).sort(([a], [b]) => a < b ? -1 : 1))
    if (seenSamples.has(identity)) throw new ExpositionError(`line ${line}: sample ${sample.name} with these labels twice`)
    seenSamples.add(identity)
    let f = families.get(family)
    if (f === undefined) families.set(family, f = { name: family, help: help.get(family)!, type: t, samples: [] })
    f.samples.push(sample)
  })
  for (const name of type.keys()) if (!help.has(name)) throw new ExpositionError(`family ${name} has TYPE but no HELP`)
  return families
}

/** The family a sample belongs to: its own name, or the base of a summary's / histogram's suffixed sample. */
function familyOf (name: string, type: Map<string, ParsedFamily['type']>): string | undefined {
  const t = type.get(name)
  if (t !== undefined && t !== 'histogram') return name
  for (const suffix of ['_sum', '_count', '_bucket']) {
    if (!name.endsWith(suffix)) continue
    const base = name.slice(0, -suffix.length)
    const bt = type.get(base)
    if (bt === 'histogram' || (bt === 'summary' && suffix !== '_bucket')) return base
  }
  return undefined
}

function requireFloatLabel (sample: ParsedSample, label: string, line: number): void {
  const v = sample.labels[label]
  if (v === undefined || parseValue(v) === undefined) throw new ExpositionError(`line ${line}: ${sample.name} needs a numeric ${label} label`)
}

function parseSample (raw: string, line: number): ParsedSample {
  let i = 0
  const fail = (why: string): never => { throw new ExpositionError(`line ${line}: ${why}: ${JSON.stringify(raw)}`) }
  while (i < raw.length && /[a-zA-Z0-9_:]/.test(raw[i]!)) i++
  const name = raw.slice(0, i)
  if (!metricName.test(name)) fail('invalid metric name')
  const labels: Record<string, string> = {}
  if (raw[i] === '{') {
    i++
    for (;;) {
      if (raw[i] === '}') { i++; break }
      const start = i
      if (!labelNameStart.test(raw[i] ?? '')) fail('invalid label name')
      while (i < raw.length && labelNameChar.test(raw[i]!)) i++
      const labelName = raw.slice(start, i)
      if (Object.hasOwn(labels, labelName)) fail(`label ${labelName} twice`)
      if (raw[i] !== '=' || raw[i + 1] !== '"') fail('expected ="')
      i += 2
      let value = ''
      for (;;) {
        const c = raw[i]
        if (c === undefined) fail('unterminated label value')
        if (c === '"') { i++; break }
        if (c === '\\') {
          const next = raw[i + 1]
          if (next === '\\') value += '\\'
          else if (next === '"') value += '"'
          else if (next === 'n') value += '\n'
          else fail(`invalid escape \\${next ?? ''} in a label value`)
          i += 2
          continue
        }
        value += c
        i++
      }
      labels[labelName] = value
      if (raw[i] === ',') { i++; continue }
      if (raw[i] === '}') { i++; break }
      fail('expected , or } after a label')
    }
  }
  const rest = raw.slice(i)
  const m = /^[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*$/.exec(rest)
  if (m === null) fail('expected a value after the name and labels')
  const value = parseValue(m![1]!)
  if (value === undefined) fail(`invalid value ${JSON.stringify(m![1])}`)
  const sample: ParsedSample = { name, labels, value: value! }
  if (m![2] !== undefined) {
    if (!/^-?\d+$/.test(m![2])) fail('invalid timestamp')
    sample.timestampMs = Number(m![2])
  }
  return sample
}

function parseValue (text: string): number | undefined {
  if (text === 'NaN') return NaN
  if (text === '+Inf') return Infinity
  if (text === '-Inf') return -Infinity
  return floatText.test(text) ? Number(text) : undefined
}

function unescapeHelp (text: string, line: number): string {
  let out = ''
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!
    if (c !== '\\') { out += c; continue }
    const next = text[++i]
    if (next === '\\') out += '\\'
    else if (next === 'n') out += '\n'
    else throw new ExpositionError(`line ${line}: invalid escape \\${next ?? ''} in HELP text`)
  }
  return out
}

/** The value of the one sample of `name` whose labels are exactly `labels`; undefined when there is none. */
export function sampleValue (families: Map<string, ParsedFamily>, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = JSON.stringify(Object.entries(labels).sort(([a], [b]) => a < b ? -1 : 1))
  for (const family of families.values()) {
    for (const s of family.samples) {
      if (s.name === name && JSON.stringify(Object.entries(s.labels).sort(([a], [b]) => a < b ? -1 : 1)) === wanted) return s.value
    }
  }
  return undefined
}
