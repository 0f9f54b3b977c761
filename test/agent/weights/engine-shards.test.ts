// The presets' slices against a reference written from vLLM's loading rules (QKVParallelLinear,
// MergedColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding / ParallelLMHead; SGLang's
// are the same), independent of reshard.ts: real Llama- and Qwen2-shaped tensor tables, tp 1-8,
// every rank, odd vocabularies; what vLLM refuses to load is refused here too.
import t from 'tap'
import { planReshard, type TensorInfo, type TensorSlice } from '../../../agent/weights/reshard.ts'
import { presetRules } from '../../../agent/weights/layout-presets.ts'

interface ModelShape { name: string, hidden: number, heads: number, kvHeads: number, headDim: number, inter: number, vocab: number, qkvBias: boolean, tied: boolean, fused?: boolean }

const models: ModelShape[] = [
  { name: 'llama-3-8b', hidden: 4096, heads: 32, kvHeads: 8, headDim: 128, inter: 14336, vocab: 128256, qkvBias: false, tied: false },
  { name: 'llama-2-7b+pad-token', hidden: 4096, heads: 32, kvHeads: 32, headDim: 128, inter: 11008, vocab: 32001, qkvBias: false, tied: false },
  { name: 'qwen2-7b', hidden: 3584, heads: 28, kvHeads: 4, headDim: 128, inter: 18944, vocab: 152064, qkvBias: true, tied: false },
  { name: 'qwen2-0.5b', hidden: 896, heads: 14, kvHeads: 2, headDim: 64, inter: 4864, vocab: 151936, qkvBias: true, tied: true },
  { name: 'gpt2-vocab-gqa', hidden: 1024, heads: 16, kvHeads: 2, headDim: 64, inter: 4096, vocab: 50257, qkvBias: false, tied: false },
  { name: 'tiny-odd-vocab', hidden: 64, heads: 8, kvHeads: 1, headDim: 8, inter: 128, vocab: 1000, qkvBias: true, tied: false },
  { name: 'fused-phi3-like', hidden: 3072, heads: 32, kvHeads: 32, headDim: 96, inter: 8192, vocab: 32064, qkvBias: false, tied: false, fused: true },
]

function tensorTable (m: ModelShape): TensorInfo[] {
  const t = (name: string, shape: number[]): TensorInfo => ({ name, shape, elementBytes: 2 })
  const layer = 'model.layers.0'
  const q = m.heads * m.headDim
  const kv = m.kvHeads * m.headDim
  const attention = m.fused === true
    ? [t(`${layer}.self_attn.qkv_proj.weight`, [q + 2 * kv, m.hidden])]
    : [
        t(`${layer}.self_attn.q_proj.weight`, [q, m.hidden]),
        t(`${layer}.self_attn.k_proj.weight`, [kv, m.hidden]),
        t(`${layer}.self_attn.v_proj.weight`, [kv, m.hidden]),
        ...(m.qkvBias ? [t(`${layer}.self_attn.q_proj.bias`, [q]), t(`${layer}.self_attn.k_proj.bias`, [kv]), t(`${layer}.self_attn.v_proj.bias`, [kv])] : []),
      ]
  const mlp = m.fused === true
    ? [t(`${layer}.mlp.gate_up_proj.weight`, [2 * m.inter, m.hidden])]
    : [t(`${layer}.mlp.gate_proj.weight`, [m.inter, m.hidden]), t(`${layer}.mlp.up_proj.weight`, [m.inter, m.hidden])]
  return [
    t('model.embed_tokens.weight', [m.vocab, m.hidden]),
    ...attention,
    t(`${layer}.self_attn.o_proj.weight`, [m.hidden, q]),
    ...mlp,
    t(`${layer}.mlp.down_proj.weight`, [m.hidden, m.inter]),
    t(`${layer}.input_layernorm.weight`, [m.hidden]),
    t('model.norm.weight', [m.hidden]),
    ...(m.tied ? [] : [t('lm_head.weight', [m.vocab, m.hidden])]),
  ]
}

const range = (start: number, end: number): number[] => Array.from({ length: Math.max(0, end - start) }, (_, i) => start + i)
const divide = (a: number, b: number, what: string): number => {
  if (a % b !== 0) throw new Error(`vllm refuses: ${what}: ${a} is not divisible by ${b}`)
  return a / b
}

/** What vLLM loads on `rank`: the split dim, the source rows along it in the parameter's order, and the parameter's rows. */
function vllmShard (m: ModelShape, name: string, tp: number, rank: number): { dim: number | null, rows: number[], paramRows: number } {
  const headsPerRank = divide(m.heads, tp, 'total_num_heads by tp_size') // QKVParallelLinear
  // k/v heads: divided when tp < kv heads, else one head replicated tp / kv heads times.
  const replicas = tp >= m.kvHeads ? divide(tp, m.kvHeads, 'tp_size by total_num_kv_heads') : 1
  const kvPerRank = tp >= m.kvHeads ? 1 : divide(m.kvHeads, tp, 'total_num_kv_heads by tp_size')
  const kvRank = Math.floor(rank / replicas)
  const q = range(rank * headsPerRank * m.headDim, (rank + 1) * headsPerRank * m.headDim)
  const kv = (base: number): number[] => range(base + kvRank * kvPerRank * m.headDim, base + (kvRank + 1) * kvPerRank * m.headDim)
  const rows = (r: number[]): { dim: number, rows: number[], paramRows: number } => ({ dim: 0, rows: r, paramRows: r.length })
  if (/(embed_tokens|lm_head)\.weight$/.test(name)) {
    const padded = Math.ceil(m.vocab / 64) * 64 // VocabParallelEmbedding: pad_vocab_size(org_vocab_size, DEFAULT_VOCAB_PADDING_SIZE)
    const per = divide(padded, tp, 'the padded vocab by tp_size')
    return { dim: 0, rows: range(rank * per, Math.min(m.vocab, (rank + 1) * per)), paramRows: per }
  }
  if (/\.qkv_proj\.weight$/.test(name)) return rows([...q, ...kv(m.heads * m.headDim), ...kv((m.heads + m.kvHeads) * m.headDim)])
  if (/\.q_proj\.(weight|bias)$/.test(name)) return rows(q)
  if (/\.[kv]_proj\.(weight|bias)$/.test(name)) return rows(kv(0))
  if (/\.gate_up_proj\.weight$/.test(name)) { const per = divide(m.inter, tp, 'intermediate_size by tp_size'); return rows([...range(rank * per, (rank + 1) * per), ...range(m.inter + rank * per, m.inter + (rank + 1) * per)]) }
  if (/\.(gate|up)_proj\.weight$/.test(name)) { const per = divide(m.inter, tp, 'intermediate_size by tp_size'); return rows(range(rank * per, (rank + 1) * per)) }
  if (/o_proj\.weight$/.test(name)) { const per = divide(m.heads * m.headDim, tp, 'input_size by tp_size'); return { dim: 1, rows: range(rank * per, (rank + 1) * per), paramRows: per } }
  if (/down_proj\.weight$/.test(name)) { const per = divide(m.inter, tp, 'input_size by tp_size'); return { dim: 1, rows: range(rank * per, (rank + 1) * per), paramRows: per } }
  return { dim: null, rows: [], paramRows: 0 } // norms: replicated
}

const rowsOf = (slice: TensorSlice): number[] => slice.ranges.flatMap(r => range(r.start, r.start + r.count))

t.test('every rank of every model and tp: the slices are the rows vLLM loads, or both refuse', async t => {
  let compared = 0
  let refused = 0
  for (const m of models) {
    const tensors = tensorTable(m)
    for (const tp of [1, 2, 3, 4, 8]) {
      for (let rank = 0; rank < tp; rank++) {
        let expected: Array<ReturnType<typeof vllmShard>> | Error
        try { expected = tensors.map(x => vllmShard(m, x.name, tp, rank)) } catch (err) { expected = err as Error }
        let plan: TensorSlice[] | Error
        try { plan = planReshard(tensors, { tp, rank, rules: presetRules('llama', { heads: m.heads, kvHeads: m.kvHeads }) }) } catch (err) { plan = err as Error }
        const where = `${m.name} tp ${tp} rank ${rank}`
        if (expected instanceof Error) {
          t.ok(plan instanceof Error && (plan as Error & { code?: string }).code === 'ERR_LAYOUT_INVALID', `${where}: refused like vLLM (${expected.message})`)
          refused++
          continue
        }
        if (plan instanceof Error) { t.fail(`${where}: refused (${plan.message}) where vLLM loads`); continue }
        for (const [i, slice] of plan.entries()) {
          const want = expected[i]!
          if (tp === 1 || want.dim === null) {
            t.equal(slice.dim, null, `${where} ${slice.name}: whole`)
            continue
          }
          t.equal(slice.dim, want.dim, `${where} ${slice.name}: split dim`)
          t.same(rowsOf(slice), want.rows, `${where} ${slice.name}: rows`)
          t.equal((slice.paddedShape ?? slice.shape)[want.dim], want.paramRows, `${where} ${slice.name}: the engine parameter's rows`)
          compared++
        }
      }
    }
  }
  t.ok(compared > 500 && refused > 5, `${compared} rank slices compared, ${refused} layouts refused`)
})

t.test('head counts: needed, cross-checked against the head size, and never cut into fractions', async t => {
  const m = models[4]! // 16 heads, 2 kv heads of 64
  const tensors = tensorTable(m)
  t.throws(() => planReshard(tensors, { tp: 4, rank: 1, rules: presetRules('qwen') }), { code: 'ERR_LAYOUT_INVALID', message: /q_proj.weight: splitting query heads needs the head count \(--config/ })
  t.throws(() => planReshard(tensors, { tp: 4, rank: 1, rules: presetRules('qwen', { heads: 16 }) }), { message: /k_proj.weight: splitting key\/value heads needs their count/ })
  t.throws(() => planReshard(tensors, { tp: 4, rank: 1, rules: presetRules('qwen', { heads: 16, kvHeads: 4 }) }), { message: /k_proj.weight: 128 rows make 4 heads of 32, but .*q_proj.weight has heads of 64/ })
  t.throws(() => planReshard(tensors, { tp: 32, rank: 1, rules: presetRules('qwen', { heads: 16, kvHeads: 2 }) }), { message: /q_proj.weight heads: 16 does not divide by tp 32/ })
  const whole = planReshard(tensors, { tp: 1, rank: 0, rules: presetRules('qwen') })
  t.ok(whole.every(s => s.dim === null), 'tp 1 needs no head counts')
})

t.test('a rank whose vocab rows are all padding gets an empty slice with the padded shape', async t => {
  // Vocab 100 padded to 128, tp 8: 16 rows a rank; rank 7 starts at 112 > 100.
  const [slice] = planReshard([{ name: 'lm_head.weight', shape: [100, 4], elementBytes: 2 }], { tp: 8, rank: 7, rules: presetRules('llama') })
  t.same([slice!.shape, slice!.bytes, slice!.paddedShape], [[0, 4], 0, [16, 4]])
})
