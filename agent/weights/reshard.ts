/**
 * The reshard planner (RLBoost §4.3: "each rollout rank receives only the
 * slices its tensor-parallel layout needs"). Pure: a tensor table plus a
 * target layout in, the exact slice of every tensor out. No I/O, no clocks.
 *
 * A slice is the concatenation, along one dimension, of one or more index
 * ranges of a row-major tensor (several ranges only for fused tensors: qkv,
 * gate_up). `sliceRuns` turns a byte window of a slice into the contiguous
 * source byte runs that make it up; the data server gathers those runs and the
 * puller receives exactly the slice's bytes (nothing more).
 *
 * Rule kinds (first matching rule wins; a tensor no rule matches is replicated):
 * - `dim: null`                  replicate (norms, biases of row-parallel layers)
 * - `dim: 0 | 1`                 even split (column parallel on 0, row parallel on 1);
 *                                the dimension must divide by tp
 * - `vocab: true | ENGINE`        vocab-parallel as the engine loads it (true: vllm):
 *                                vLLM and SGLang pad the vocab to a multiple of 64,
 *                                Megatron to a multiple of 128 × tp; the padded size
 *                                splits evenly (P / tp rows a rank), and a rank gets
 *                                the real rows of its range (the last ranks fewer,
 *                                possibly none); the slice's paddedShape is the
 *                                engine's parameter (rows past the real ones are padding)
 * - `parts: [n1, n2, ...] | N`   fused tensor of parts concatenated along `dim`
 *                                (gate_up: [I, I], or 2 equal parts); each part split evenly
 * - `qkv: { heads, kvHeads }`    fused q|k|v along `dim` with grouped-query
 *                                attention: q heads split evenly; kv heads split
 *                                evenly when tp <= kvHeads, otherwise each rank
 *                                gets kv head floor(rank * kvHeads / tp)
 *                                (replicated tp / kvHeads times)
 * - `heads: H` (with dim 0)      a separate q projection: H heads split evenly
 *                                (H % tp must be 0, as vLLM requires)
 * - `kvHeads: K` (with dim 0)    a separate k or v projection: like qkv's k part
 *
 * A head count of 0 in a rule means "not known" (a preset without the model's
 * config): planning a tensor that needs it fails with what to give. Across
 * the table, the q, k and v projections of one attention module must agree
 * on the head size (rows / heads): a wrong kv-head count is refused rather
 * than cut into fractions of heads.
 */
import { createHash } from 'node:crypto'
import { AgentError } from '../../core/errors.ts'

export interface TensorInfo {
  name: string
  shape: number[]
  /** Bytes per element. */
  elementBytes: number
}

/** The engines whose vocab split a rule can follow. */
export const vocabEngines = ['vllm', 'sglang', 'megatron'] as const
export type VocabEngine = typeof vocabEngines[number]

export interface LayoutRule {
  /** Regular expression matched (unanchored) against the tensor name. */
  pattern: string
  /** Split dimension; null replicates. */
  dim: 0 | 1 | null
  /** Vocab-parallel, split as this engine loads it (true: vllm). */
  vocab?: boolean | VocabEngine
  /** Sizes of the fused parts along dim, or how many equal parts. */
  parts?: number[] | number
  qkv?: { heads: number, kvHeads: number }
  heads?: number
  kvHeads?: number
}

export interface TargetLayout {
  /** Tensor-parallel size, >= 1. */
  tp: number
  /** This rank, 0 <= rank < tp. */
  rank: number
  rules: LayoutRule[]
}

export interface SliceRange { start: number, count: number }

export interface TensorSlice {
  name: string
  /** Index into the tensor table the plan was made from. */
  index: number
  /** null: the whole tensor. */
  dim: number | null
  /** Index ranges along `dim`, concatenated in this order (empty when dim is null). */
  ranges: SliceRange[]
  /** Shape of the slice (ranges concatenated along dim). */
  shape: number[]
  /** Global offsets of the slice's first element (exact when it is one range). */
  offsets: number[]
  bytes: number
  /** The engine's parameter for this rank when larger than `shape` (vocab padding): rows past `shape` are padding. */
  paddedShape?: number[]
}

/** Whether two slices of a tensor cut the same dim into the same ranges, in the same order. */
export function sameSlice (a: Pick<TensorSlice, 'dim' | 'ranges'>, b: Pick<TensorSlice, 'dim' | 'ranges'>): boolean {
  return a.dim === b.dim && a.ranges.length === b.ranges.length && a.ranges.every((r, i) => r.start === b.ranges[i]!.start && r.count === b.ranges[i]!.count)
}

function layoutError (message: string): AgentError {
  return new AgentError('ERR_LAYOUT_INVALID', message)
}

/** Validates a rules document `{ "rules": [...] }` (from a JSON file or a preset). */
export function parseLayoutRules (doc: unknown, source: string): LayoutRule[] {
  const rules = (doc as { rules?: unknown } | null)?.rules
  if (!Array.isArray(rules)) throw layoutError(`${source}: expected { "rules": [ { "pattern", "dim" }, ... ] }`)
  return rules.map((r: unknown, i): LayoutRule => {
    const where = `${source}: rules[${i}]`
    if (typeof r !== 'object' || r === null) throw layoutError(`${where} is not an object`)
    const rule = r as Record<string, unknown>
    const known = new Set(['pattern', 'dim', 'vocab', 'parts', 'qkv', 'heads', 'kvHeads'])
    const unknown = Object.keys(rule).find(k => !known.has(k))
    if (unknown !== undefined) throw layoutError(`${where}: unknown field "${unknown}" (allowed: ${[...known].join(', ')})`)
    if (typeof rule.pattern !== 'string' || rule.pattern === '') throw layoutError(`${where}.pattern must be a non-empty regular expression`)
    try { new RegExp(rule.pattern) } catch (cause) { throw new AgentError('ERR_LAYOUT_INVALID', `${where}.pattern: ${(cause as Error).message}`, { cause }) }
    if (rule.dim !== 0 && rule.dim !== 1 && rule.dim !== null) throw layoutError(`${where}.dim must be 0, 1 or null`)
    const out: LayoutRule = { pattern: rule.pattern, dim: rule.dim }
    const positive = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 1
    const kinds = ['vocab', 'parts', 'qkv', 'heads', 'kvHeads'].filter(k => rule[k] !== undefined)
    if (kinds.length > 1) throw layoutError(`${where}: give at most one of vocab, parts, qkv, heads, kvHeads`)
    if (kinds.length === 1 && rule.dim === null) throw layoutError(`${where}: ${kinds[0]} needs dim 0 or 1`)
    if (rule.vocab !== undefined) {
      if (typeof rule.vocab !== 'boolean' && !(vocabEngines as readonly unknown[]).includes(rule.vocab)) {
        throw layoutError(`${where}.vocab must be true (vllm's split) or one of ${vocabEngines.join(', ')}`)
      }
      out.vocab = rule.vocab as boolean | VocabEngine
    }
    if (rule.parts !== undefined) {
      if (!positive(rule.parts) && (!Array.isArray(rule.parts) || rule.parts.length === 0 || !rule.parts.every(positive))) {
        throw layoutError(`${where}.parts must be a non-empty list of positive sizes or a count of equal parts`)
      }
      out.parts = rule.parts as number[] | number
    }
    if (rule.qkv !== undefined) {
      const q = rule.qkv as Record<string, unknown>
      if (typeof q !== 'object' || q === null || !positive(q.heads) || !positive(q.kvHeads) || q.heads % q.kvHeads !== 0) {
        throw layoutError(`${where}.qkv must be { heads, kvHeads } with heads a multiple of kvHeads`)
      }
      out.qkv = { heads: q.heads, kvHeads: q.kvHeads }
    }
    for (const key of ['heads', 'kvHeads'] as const) {
      if (rule[key] === undefined) continue
      if (!positive(rule[key])) throw layoutError(`${where}.${key} must be a positive integer`)
      out[key] = rule[key]
    }
    return out
  })
}

function checkLayout (layout: TargetLayout): void {
  if (!Number.isSafeInteger(layout.tp) || layout.tp < 1) throw layoutError(`tp must be a positive integer, got ${layout.tp}`)
  if (!Number.isSafeInteger(layout.rank) || layout.rank < 0 || layout.rank >= layout.tp) throw layoutError(`rank must be in 0..${layout.tp - 1}, got ${layout.rank}`)
}

/** Even split of `size` into tp parts: this rank's range; ERR_LAYOUT_INVALID when tp does not divide it. */
function evenRange (size: number, tp: number, rank: number, what: string): SliceRange {
  if (size % tp !== 0) throw layoutError(`${what}: ${size} does not divide by tp ${tp}`)
  const count = size / tp
  return { start: rank * count, count }
}

/**
 * A rank's rows of a vocab-parallel tensor of `size` rows as `engine` loads
 * it (vLLM's VocabParallelEmbedding / ParallelLMHead, SGLang's, Megatron's
 * padded vocab), and the rows of the engine's parameter (`padded`).
 */
export function vocabRange (engine: VocabEngine, size: number, tp: number, rank: number, what: string): { range: SliceRange, padded: number } {
  const multiple = engine === 'megatron' ? 128 * tp : 64
  const paddedVocab = Math.ceil(size / multiple) * multiple
  if (paddedVocab % tp !== 0) throw layoutError(`${what}: ${engine} pads the vocab of ${size} to ${paddedVocab}, which does not divide by tp ${tp}`)
  const per = paddedVocab / tp
  const start = Math.min(size, rank * per)
  return { range: { start, count: Math.min(size, rank * per + per) - start }, padded: per }
}

/** Ranges along the split dimension for one tensor under `rule` (and, for vocab, the engine parameter's rows). */
function rangesFor (rule: LayoutRule, size: number, tp: number, rank: number, what: string): { ranges: SliceRange[], padded?: number } {
  if (rule.vocab !== undefined && rule.vocab !== false) {
    const { range, padded } = vocabRange(rule.vocab === true ? 'vllm' : rule.vocab, size, tp, rank, what)
    return { ranges: [range], padded }
  }
  return { ranges: splitRanges(rule, size, tp, rank, what) }
}

function splitRanges (rule: LayoutRule, size: number, tp: number, rank: number, what: string): SliceRange[] {
  if (rule.parts !== undefined) {
    const n = rule.parts
    if (typeof n === 'number' && size % n !== 0) throw layoutError(`${what}: ${size} does not divide into ${n} equal fused parts`)
    const parts = typeof n === 'number' ? Array.from({ length: n }, () => size / n) : n
    const total = parts.reduce((a, b) => a + b, 0)
    if (total !== size) throw layoutError(`${what}: parts [${parts.join(', ')}] sum to ${total}, the dimension is ${size}`)
    let base = 0
    return parts.map((part, i) => {
      const r = evenRange(part, tp, rank, `${what} part ${i}`)
      const out = { start: base + r.start, count: r.count }
      base += part
      return out
    })
  }
  if (rule.qkv !== undefined) {
    const { heads, kvHeads } = rule.qkv
    if (heads < 1 || kvHeads < 1) throw layoutError(`${what}: a fused qkv needs the head counts (--heads/--kv-heads, or num_attention_heads/num_key_value_heads in the model's metadata)`)
    if (size % (heads + 2 * kvHeads) !== 0) throw layoutError(`${what}: ${size} is not (heads ${heads} + 2 × kvHeads ${kvHeads}) × headDim`)
    const headDim = size / (heads + 2 * kvHeads)
    const q = evenRange(heads, tp, rank, `${what} q heads`)
    const kv = kvHeadRange(kvHeads, tp, rank, what)
    const kBase = heads * headDim
    const vBase = kBase + kvHeads * headDim
    return [
      { start: q.start * headDim, count: q.count * headDim },
      { start: kBase + kv.start * headDim, count: kv.count * headDim },
      { start: vBase + kv.start * headDim, count: kv.count * headDim },
    ]
  }
  if (rule.heads !== undefined) {
    if (rule.heads < 1) throw layoutError(`${what}: splitting query heads needs the head count (--config with the model's config.json, --heads, or num_attention_heads in the version's metadata)`)
    if (size % rule.heads !== 0) throw layoutError(`${what}: ${size} does not divide into ${rule.heads} heads`)
    const headDim = size / rule.heads
    const q = evenRange(rule.heads, tp, rank, `${what} heads`)
    return [{ start: q.start * headDim, count: q.count * headDim }]
  }
  if (rule.kvHeads !== undefined) {
    if (rule.kvHeads < 1) throw layoutError(`${what}: splitting key/value heads needs their count (--config with the model's config.json, --kv-heads, or num_key_value_heads in the version's metadata)`)
    if (size % rule.kvHeads !== 0) throw layoutError(`${what}: ${size} does not divide into ${rule.kvHeads} kv heads`)
    const headDim = size / rule.kvHeads
    const kv = kvHeadRange(rule.kvHeads, tp, rank, what)
    return [{ start: kv.start * headDim, count: kv.count * headDim }]
  }
  return [evenRange(size, tp, rank, what)]
}

/** KV heads of a rank: an even split when tp <= kvHeads, else one head shared by tp / kvHeads ranks. */
function kvHeadRange (kvHeads: number, tp: number, rank: number, what: string): SliceRange {
  if (tp <= kvHeads) return evenRange(kvHeads, tp, rank, `${what} kv heads`)
  if (tp % kvHeads !== 0) throw layoutError(`${what}: tp ${tp} > kv heads ${kvHeads} needs tp to be a multiple of the kv heads`)
  return { start: Math.floor(rank * kvHeads / tp), count: 1 }
}

export function elementCount (shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1)
}

/** The slice of one tensor for a layout (first matching rule; none = replicate). */
export function planTensorSlice (tensor: TensorInfo, index: number, layout: TargetLayout, compiled = compileRules(layout.rules)): TensorSlice {
  const whole: TensorSlice = { name: tensor.name, index, dim: null, ranges: [], shape: [...tensor.shape], offsets: tensor.shape.map(() => 0), bytes: elementCount(tensor.shape) * tensor.elementBytes }
  if (layout.tp === 1) return whole
  const match = compiled.find(c => c.regex.test(tensor.name))
  if (match === undefined || match.rule.dim === null) return whole
  const dim = match.rule.dim
  if (dim >= tensor.shape.length) throw layoutError(`${tensor.name}: rule "${match.rule.pattern}" splits dim ${dim} of a rank-${tensor.shape.length} tensor`)
  const planned = rangesFor(match.rule, tensor.shape[dim]!, layout.tp, layout.rank, tensor.name)
  const ranges = planned.ranges.filter(r => r.count > 0)
  const shape = [...tensor.shape]
  shape[dim] = ranges.reduce((a, r) => a + r.count, 0)
  const offsets = tensor.shape.map(() => 0)
  offsets[dim] = ranges[0]?.start ?? 0
  const slice: TensorSlice = { name: tensor.name, index, dim, ranges, shape, offsets, bytes: elementCount(shape) * tensor.elementBytes }
  if (planned.padded !== undefined && planned.padded > shape[dim]!) {
    slice.paddedShape = [...shape]
    slice.paddedShape[dim] = planned.padded
  }
  return slice
}

interface CompiledRule { rule: LayoutRule, regex: RegExp }
function compileRules (rules: readonly LayoutRule[]): CompiledRule[] {
  return rules.map(rule => ({ rule, regex: new RegExp(rule.pattern) }))
}

/** Every tensor's slice for `layout`, in table order. */
export function planReshard (tensors: readonly TensorInfo[], layout: TargetLayout): TensorSlice[] {
  checkLayout(layout)
  const compiled = compileRules(layout.rules)
  const plan = tensors.map((t, i) => planTensorSlice(t, i, layout, compiled))
  if (layout.tp > 1) checkHeadSizes(tensors, compiled)
  return plan
}

/**
 * The q, k and v projections of one attention module (names alike but for
 * q_proj / k_proj / v_proj) split by head counts must agree on the head size:
 * a wrong count would cut heads into pieces (vLLM reads head_dim from the
 * config and would load something else).
 */
function checkHeadSizes (tensors: readonly TensorInfo[], compiled: readonly CompiledRule[]): void {
  const modules = new Map<string, { name: string, headDim: number }>()
  for (const tensor of tensors) {
    const part = /\.([qkv])_proj\.(weight|bias)$/.exec(tensor.name)
    if (part === null) continue
    const rule = compiled.find(c => c.regex.test(tensor.name))?.rule
    const heads = rule?.dim === 0 ? (part[1] === 'q' ? rule.heads : rule.kvHeads) : undefined
    if (heads === undefined || heads < 1) continue
    const headDim = tensor.shape[0]! / heads
    const module = `${tensor.name.slice(0, part.index)}.${part[2]}`
    const seen = modules.get(module)
    if (seen === undefined) { modules.set(module, { name: tensor.name, headDim }); continue }
    if (seen.headDim !== headDim) {
      throw layoutError(`${tensor.name}: ${tensor.shape[0]} rows make ${heads} heads of ${headDim}, but ${seen.name} has heads of ${seen.headDim}: the head counts (--heads/--kv-heads, --config, or the version's metadata) do not fit this model`)
    }
  }
}

/** A contiguous byte run of the source tensor. */
export interface ByteRun { offset: number, length: number }

/**
 * The source byte runs (in order) that make up bytes [from, from + length)
 * of the slice's contiguous output. Validates the slice against the tensor.
 */
export function sliceRuns (tensor: TensorInfo, dim: number | null, ranges: readonly SliceRange[], from: number, length: number): ByteRun[] {
  const total = elementCount(tensor.shape) * tensor.elementBytes
  if (dim === null) {
    if (from + length > total) throw layoutError(`${tensor.name}: bytes ${from}..${from + length} past its ${total} bytes`)
    return length === 0 ? [] : [{ offset: from, length }]
  }
  if (dim >= tensor.shape.length) throw layoutError(`${tensor.name}: dim ${dim} of a rank-${tensor.shape.length} tensor`)
  const dimSize = tensor.shape[dim]!
  for (const r of ranges) {
    if (!Number.isSafeInteger(r.start) || !Number.isSafeInteger(r.count) || r.start < 0 || r.count < 1 || r.start + r.count > dimSize) {
      throw layoutError(`${tensor.name}: range ${r.start}+${r.count} outside dim ${dim} of size ${dimSize}`)
    }
  }
  const inner = elementCount(tensor.shape.slice(dim + 1)) * tensor.elementBytes
  const outer = elementCount(tensor.shape.slice(0, dim))
  const rowOut = ranges.reduce((a, r) => a + r.count, 0) * inner
  if (from + length > rowOut * outer) throw layoutError(`${tensor.name}: bytes ${from}..${from + length} past the slice's ${rowOut * outer} bytes`)
  const runs: ByteRun[] = []
  let pos = from
  const end = from + length
  while (pos < end) {
    const o = Math.floor(pos / rowOut)
    let within = pos - o * rowOut
    for (const r of ranges) {
      const runBytes = r.count * inner
      if (within >= runBytes) { within -= runBytes; continue }
      const take = Math.min(runBytes - within, end - pos)
      const offset = (o * dimSize + r.start) * inner + within
      const last = runs[runs.length - 1]
      if (last !== undefined && last.offset + last.length === offset) last.length += take
      else runs.push({ offset, length: take })
      pos += take
      within = 0
      if (pos >= end) break
    }
  }
  return runs
}

/** Runs of equal length at a constant stride: one native gather call each. */
export interface StridedRuns { offset: number, runBytes: number, runs: number, stride: number }

/** Groups consecutive runs into strided gathers (a row-parallel slice window becomes ~3 groups instead of one per row). */
export function groupRuns (runs: readonly ByteRun[]): StridedRuns[] {
  const groups: StridedRuns[] = []
  for (const run of runs) {
    const g = groups[groups.length - 1]
    if (g !== undefined && g.runBytes === run.length) {
      const stride = g.runs === 1 ? run.offset - g.offset : g.stride
      if (stride >= run.length && run.offset === g.offset + stride * g.runs) { g.stride = stride; g.runs++; continue }
    }
    groups.push({ offset: run.offset, runBytes: run.length, runs: 1, stride: run.length })
  }
  return groups
}

/**
 * A layout's identity across agents: `tp<T>-r<R>-<16 hex of sha256 of the
 * rules in canonical form>`. Two layouts with the same id plan the same
 * slices of the same tensor table; a partial holder advertises the id of the
 * (layout, rank) it holds (PROTOCOL.md "Partial holders").
 */
export function layoutId (layout: TargetLayout): string {
  const canonical = layout.rules.map(r => [r.pattern, r.dim, r.vocab === true ? 'vllm' : r.vocab ?? null, r.parts ?? null, r.qkv !== undefined ? [r.qkv.heads, r.qkv.kvHeads] : null, r.kvHeads ?? null, ...(r.heads !== undefined ? [r.heads] : [])])
  return `tp${layout.tp}-r${layout.rank}-${createHash('sha256').update(JSON.stringify(canonical)).digest('hex').slice(0, 16)}`
}
