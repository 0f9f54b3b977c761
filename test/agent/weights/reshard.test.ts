// The reshard planner against an independent reference slicing (element-wise, by index arithmetic) for every rule kind and random shapes.
import t from 'tap'
import { groupRuns, planReshard, sliceRuns, parseLayoutRules, type LayoutRule, type TensorInfo } from '../../../agent/weights/reshard.ts'
import { presetRules } from '../../../agent/weights/layout-presets.ts'

/** Seeded PRNG (mulberry32). */
function rng (seed: number): () => number {
  let a = seed >>> 0
  return () => { a = (a + 0x6D2B79F5) >>> 0; let x = Math.imul(a ^ (a >>> 15), 1 | a); x ^= x + Math.imul(x ^ (x >>> 7), 61 | x); return ((x ^ (x >>> 14)) >>> 0) / 4294967296 }
}

/** A tensor whose element i holds the value i (u32), so a slice's bytes name the source elements. */
function indexTensor (shape: number[]): Buffer {
  const n = shape.reduce((a, b) => a * b, 1)
  const b = Buffer.alloc(n * 4)
  for (let i = 0; i < n; i++) b.writeUInt32LE(i, i * 4)
  return b
}

/** Reference: the flat source element indices of the rows `rows` (along dim) of a row-major tensor, in output order. */
function reference (shape: number[], dim: number, rows: number[]): number[] {
  const inner = shape.slice(dim + 1).reduce((a, b) => a * b, 1)
  const outer = shape.slice(0, dim).reduce((a, b) => a * b, 1)
  const out: number[] = []
  for (let o = 0; o < outer; o++) for (const r of rows) for (let i = 0; i < inner; i++) out.push((o * shape[dim]! + r) * inner + i)
  return out
}

/** Applies a plan through sliceRuns, in random windows, and returns the element indices received. */
function received (info: TensorInfo, data: Buffer, dim: number | null, ranges: Array<{ start: number, count: number }>, bytes: number, random: () => number): number[] {
  const out = Buffer.alloc(bytes)
  for (let at = 0; at < bytes;) {
    const len = Math.min(bytes - at, 4 * (1 + Math.floor(random() * 97)))
    let w = at
    for (const run of sliceRuns(info, dim, ranges, at, len)) { data.copy(out, w, run.offset, run.offset + run.length); w += run.length }
    t.equal(w - at, len, 'runs cover the window exactly')
    at += len
  }
  return Array.from({ length: bytes / 4 }, (_, i) => out.readUInt32LE(i * 4))
}

const span = (start: number, count: number): number[] => Array.from({ length: count }, (_, i) => start + i)

t.test('every rule kind, random shapes and tp: the slice equals the reference and the ranks tile the tensor', async t => {
  const random = rng(42)
  const pick = (xs: number[]): number => xs[Math.floor(random() * xs.length)]!
  let checked = 0
  for (let trial = 0; trial < 60; trial++) {
    const tp = pick([1, 2, 4, 8])
    const kind = pick([0, 1, 2, 3, 4, 5, 6])
    const headDim = pick([2, 4])
    const kvHeads = pick([1, 2, 4, 8])
    const heads = kvHeads * pick([1, 2, 4])
    const cols = pick([3, 8, 16])
    const inter = tp * pick([1, 2, 3])
    let shape: number[]
    let rule: LayoutRule
    let expectedRows: (rank: number) => number[] // rows along `dim` a rank must get, in order
    const dimOf = kind === 1 ? 1 : 0
    if (kind === 0) { shape = [tp * pick([1, 2, 5]), cols]; rule = { pattern: 'w', dim: 0 }; const c = shape[0]! / tp; expectedRows = r => span(r * c, c) }
    else if (kind === 1) { shape = [pick([2, 5]), tp * pick([1, 3]), pick([1, 2])]; rule = { pattern: 'w', dim: 1 }; const c = shape[1]! / tp; expectedRows = r => span(r * c, c) }
    else if (kind === 2) {
      // vLLM: the vocab padded to a multiple of 64 splits evenly; a rank gets the real rows of its part.
      shape = [pick([5, 17, 33, 64, 65, 130]), cols]; rule = { pattern: 'w', dim: 0, vocab: true }
      const per = Math.ceil(shape[0]! / 64) * 64 / tp
      expectedRows = r => span(Math.min(shape[0]!, r * per), Math.max(0, Math.min(shape[0]!, (r + 1) * per) - r * per))
    }
    else if (kind === 3) { shape = [2 * inter, cols]; rule = { pattern: 'w', dim: 0, parts: 2 }; const c = inter / tp; expectedRows = r => [...span(r * c, c), ...span(inter + r * c, c)] }
    else if (kind === 4) { shape = [inter + 2 * inter, cols]; rule = { pattern: 'w', dim: 0, parts: [inter, 2 * inter] }; expectedRows = r => [...span(r * inter / tp, inter / tp), ...span(inter + r * 2 * inter / tp, 2 * inter / tp)] }
    else {
      // Fused qkv (kind 5) or a separate k projection (kind 6), GQA with kv heads replicated when tp > kvHeads.
      const q = heads * headDim
      const kvRank = (r: number): number[] => tp <= kvHeads ? span(r * kvHeads / tp, kvHeads / tp) : [Math.floor(r * kvHeads / tp)]
      const headRows = (base: number, hs: number[]): number[] => hs.flatMap(h => span(base + h * headDim, headDim))
      if (tp > kvHeads && tp % kvHeads !== 0) continue
      if (heads % tp !== 0 && kind === 5) continue
      if (kind === 5) {
        shape = [q + 2 * kvHeads * headDim, cols]
        rule = { pattern: 'w', dim: 0, qkv: { heads, kvHeads } }
        expectedRows = r => [...span(r * q / tp, q / tp), ...headRows(q, kvRank(r)), ...headRows(q + kvHeads * headDim, kvRank(r))]
      } else {
        shape = [kvHeads * headDim, cols]
        rule = { pattern: 'w', dim: 0, kvHeads }
        expectedRows = r => headRows(0, kvRank(r))
      }
    }
    const info: TensorInfo = { name: 'w', shape, elementBytes: 4 }
    const data = indexTensor(shape)
    const seen = new Map<number, number>()
    for (let rank = 0; rank < tp; rank++) {
      const [slice] = planReshard([info], { tp, rank, rules: [rule] })
      const rows = expectedRows(rank)
      if (tp === 1) { t.equal(slice!.dim, null); continue }
      const want = reference(shape, dimOf, rows)
      t.equal(slice!.bytes, want.length * 4, `kind ${kind} tp ${tp} rank ${rank}: exactly the bytes needed`)
      if (slice!.bytes === 0) continue
      t.same(received(info, data, slice!.dim, slice!.ranges, slice!.bytes, random), want, `kind ${kind} shape [${shape}] tp ${tp} rank ${rank}`)
      for (const e of want) seen.set(e, (seen.get(e) ?? 0) + 1)
      checked++
    }
    const n = data.length / 4
    if (tp > 1 && (kind <= 4)) t.equal(seen.size, n, `kind ${kind}: the ranks together hold every element`)
    if (tp > 1 && kind <= 4) t.ok([...seen.values()].every(c => c === 1), `kind ${kind}: no element on two ranks`)
  }
  t.ok(checked > 50, `${checked} rank slices checked`)
})

t.test('replicated tensors and unmatched names come whole; tp 1 is the identity', async t => {
  const tensors = [{ name: 'model.norm.weight', shape: [64], elementBytes: 2 }, { name: 'other', shape: [8, 8], elementBytes: 2 }]
  const plan = planReshard(tensors, { tp: 4, rank: 3, rules: [{ pattern: 'norm', dim: null }] })
  t.same(plan.map(s => [s.dim, s.bytes]), [[null, 128], [null, 128]])
})

t.test('Llama preset: column, row, vocab, fused qkv with GQA (tp 8 > 2 kv heads), fused gate_up, norms', async t => {
  const hidden = 64
  const heads = 8
  const kvHeads = 2
  const headDim = 8
  const inter = 128
  const vocab = 1001
  const tensors: TensorInfo[] = [
    { name: 'model.embed_tokens.weight', shape: [vocab, hidden], elementBytes: 2 },
    { name: 'model.layers.0.self_attn.qkv_proj.weight', shape: [(heads + 2 * kvHeads) * headDim, hidden], elementBytes: 2 },
    { name: 'model.layers.0.self_attn.o_proj.weight', shape: [hidden, heads * headDim], elementBytes: 2 },
    { name: 'model.layers.0.mlp.gate_up_proj.weight', shape: [2 * inter, hidden], elementBytes: 2 },
    { name: 'model.layers.0.mlp.down_proj.weight', shape: [hidden, inter], elementBytes: 2 },
    { name: 'model.layers.0.self_attn.k_proj.weight', shape: [kvHeads * headDim, hidden], elementBytes: 2 },
    { name: 'model.layers.0.input_layernorm.weight', shape: [hidden], elementBytes: 2 },
    { name: 'lm_head.weight', shape: [vocab, hidden], elementBytes: 2 },
  ]
  const plan = planReshard(tensors, { tp: 8, rank: 5, rules: presetRules('llama', { heads, kvHeads }) })
  t.same(plan.map(s => [s.dim, s.shape]), [
    [0, [128, hidden]], // vLLM: 1001 padded to 1024, 128 rows a rank
    [0, [(1 + 2) * headDim, hidden]], // 1 q head + its shared k and v head
    [1, [hidden, headDim]],
    [0, [2 * inter / 8, hidden]],
    [1, [hidden, inter / 8]],
    [0, [headDim, hidden]], // kv head floor(5 * 2 / 8) = 1
    [null, [hidden]],
    [0, [128, hidden]],
  ])
  t.equal(plan[0]!.paddedShape, undefined, 'a rank whose rows are all real has no padding')
  t.same(plan[1]!.ranges, [{ start: 5 * headDim, count: headDim }, { start: heads * headDim + headDim, count: headDim }, { start: (heads + kvHeads) * headDim + headDim, count: headDim }])
  t.same(plan[5]!.ranges, [{ start: headDim, count: headDim }])
  const last = planReshard(tensors, { tp: 8, rank: 7, rules: presetRules('qwen', { heads, kvHeads }) })
  t.same(last[0]!.shape, [vocab - 7 * 128, hidden], 'the last vocab rank gets the real rows left')
  t.same(last[0]!.paddedShape, [128, hidden], 'and the engine\'s parameter shape, padding included')
  const megatron = planReshard(tensors, { tp: 8, rank: 7, rules: presetRules('llama', { heads, kvHeads, engine: 'megatron' }) })
  t.same([megatron[0]!.ranges, megatron[0]!.paddedShape], [[{ start: 7 * 128, count: vocab - 7 * 128 }], [128, hidden]], 'Megatron pads to 128 × tp: 1024 here too')
  const wide = planReshard([{ name: 'lm_head.weight', shape: [50257, 4], elementBytes: 2 }], { tp: 2, rank: 1, rules: presetRules('llama', { engine: 'megatron' }) })
  t.same([wide[0]!.ranges, wide[0]!.paddedShape], [[{ start: 25216, count: 50257 - 25216 }], [25216, 4]], 'Megatron, GPT-2 vocab, tp 2: padded to 50432 (a multiple of 256), 25216 rows a rank')
  const vllm = planReshard([{ name: 'lm_head.weight', shape: [50257, 4], elementBytes: 2 }], { tp: 2, rank: 1, rules: presetRules('llama') })
  t.same([vllm[0]!.ranges, vllm[0]!.paddedShape], [[{ start: 25152, count: 50257 - 25152 }], [25152, 4]], 'vLLM, same vocab: padded to 50304 (a multiple of 64), 25152 rows a rank')
})

t.test('bad layouts fail with ERR_LAYOUT_INVALID and say why', async t => {
  t.throws(() => parseLayoutRules({ rules: [{ pattern: '(', dim: 0 }] }, 'f.json'), { code: 'ERR_LAYOUT_INVALID' })
  t.throws(() => parseLayoutRules({ rules: [{ pattern: 'x', dim: 2 }] }, 'f.json'), { code: 'ERR_LAYOUT_INVALID', message: /dim must be 0, 1 or null/ })
  t.throws(() => parseLayoutRules({ rules: [{ pattern: 'x', dim: 0, split: 1 }] }, 'f.json'), { message: /unknown field "split"/ })
  t.throws(() => parseLayoutRules({}, 'f.json'), { code: 'ERR_LAYOUT_INVALID' })
  t.same(parseLayoutRules({ rules: [{ pattern: 'x', dim: null }, { pattern: 'qkv', dim: 0, qkv: { heads: 4, kvHeads: 2 } }] }, 'f'), [{ pattern: 'x', dim: null }, { pattern: 'qkv', dim: 0, qkv: { heads: 4, kvHeads: 2 } }])
  t.throws(() => planReshard([{ name: 'w', shape: [6, 4], elementBytes: 2 }], { tp: 4, rank: 0, rules: [{ pattern: 'w', dim: 0 }] }), { code: 'ERR_LAYOUT_INVALID', message: /6 does not divide by tp 4/ })
  t.throws(() => planReshard([{ name: 'x.qkv_proj.weight', shape: [48, 4], elementBytes: 2 }], { tp: 2, rank: 0, rules: presetRules('llama') }), { message: /head counts/ })
  t.throws(() => planReshard([], { tp: 2, rank: 2, rules: [] }), { message: /rank must be in 0..1/ })
  t.throws(() => presetRules('gpt9'), { code: 'ERR_LAYOUT_INVALID' })
})

t.test('groupRuns: strided runs of one length become one gather; the groups cover the runs in order', async t => {
  t.same(groupRuns([{ offset: 10, length: 4 }, { offset: 30, length: 4 }, { offset: 50, length: 4 }, { offset: 70, length: 2 }, { offset: 100, length: 8 }]),
    [{ offset: 10, runBytes: 4, runs: 3, stride: 20 }, { offset: 70, runBytes: 2, runs: 1, stride: 2 }, { offset: 100, runBytes: 8, runs: 1, stride: 8 }])
  const random = rng(7)
  for (let trial = 0; trial < 50; trial++) {
    const shape = [1 + Math.floor(random() * 9), 8 * (1 + Math.floor(random() * 6)), 1 + Math.floor(random() * 3)]
    const dim = Math.floor(random() * 2)
    const count = 1 + Math.floor(random() * (shape[dim]! - 1))
    const ranges = [{ start: Math.floor(random() * (shape[dim]! - count + 1)), count }]
    const info = { name: 'w', shape, elementBytes: 2 }
    const bytes = shape.reduce((a, b) => a * b, 1) * 2 / shape[dim]! * count
    const from = Math.floor(random() * bytes / 2)
    const runs = sliceRuns(info, dim, ranges, from, bytes - from)
    const expanded = groupRuns(runs).flatMap(g => Array.from({ length: g.runs }, (_, i) => ({ offset: g.offset + i * g.stride, length: g.runBytes })))
    t.same(expanded, runs, `shape [${shape}] dim ${dim}`)
  }
})
