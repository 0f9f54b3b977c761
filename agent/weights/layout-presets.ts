/**
 * Built-in layouts for Llama- and Qwen-style tensor names (Hugging Face
 * naming), split as the engine named by `engine` loads them (vLLM's
 * QKVParallelLinear, MergedColumnParallelLinear, RowParallelLinear and
 * VocabParallelEmbedding; SGLang's are the same; Megatron's differ in the
 * vocab padding):
 * - q_proj by query heads, k/v_proj by key/value heads (replicated when tp >
 *   kv heads), gate_proj, up_proj along dim 0 (and their biases)
 * - row parallel (dim 1): o_proj, down_proj (their biases replicated)
 * - vocab parallel (dim 0, the engine's padded split): embed_tokens, lm_head
 * - fused qkv_proj (q|k|v along dim 0, GQA: kv heads replicated when tp > kv heads)
 * - fused gate_up_proj ([gate; up] along dim 0, each half split)
 * - everything else (norms, rotary buffers) replicated
 * Head counts come from the caller, the model's config.json (model-config.ts)
 * or the version's metadata (`num_attention_heads`, `num_key_value_heads`,
 * e.g. from `agentctl weights publish --config`); a split that needs a count
 * nobody gave is refused when planned (safetensors carry no head counts).
 */
import { AgentError } from '../../core/errors.ts'
import type { LayoutRule, VocabEngine } from './reshard.ts'

export const layoutPresetNames = ['llama', 'qwen'] as const
export type LayoutPresetName = typeof layoutPresetNames[number]

export interface PresetOptions {
  /** Attention (query) heads; needed to split q_proj or a fused qkv. */
  heads?: number
  /** Key/value heads (GQA); needed to split k/v_proj or a fused qkv. */
  kvHeads?: number
  /** Whose vocab split to follow; default vllm. */
  engine?: VocabEngine
  /** Intermediate (MLP) size; fused gate_up is split as two equal halves when absent. */
  intermediateSize?: number
}

/** Head counts from a version's metadata (Hugging Face config names), where present. */
export function presetOptionsFromMetadata (metadata: Record<string, string>): PresetOptions {
  const num = (key: string): number | undefined => {
    const v = metadata[key]
    return v !== undefined && /^[1-9]\d*$/.test(v) ? Number(v) : undefined
  }
  const heads = num('num_attention_heads')
  const kvHeads = num('num_key_value_heads') ?? heads
  const intermediateSize = num('intermediate_size')
  const out: PresetOptions = {}
  if (heads !== undefined) out.heads = heads
  if (kvHeads !== undefined) out.kvHeads = kvHeads
  if (intermediateSize !== undefined) out.intermediateSize = intermediateSize
  return out
}

/** The rules of a preset; Qwen2/3 names are the Llama names plus q/k/v biases, handled by the same patterns. */
export function presetRules (name: string, options: PresetOptions = {}): LayoutRule[] {
  if (!(layoutPresetNames as readonly string[]).includes(name)) {
    throw new AgentError('ERR_LAYOUT_INVALID', `unknown layout preset "${name}" (one of ${layoutPresetNames.join(', ')})`)
  }
  const { heads, kvHeads } = options
  const vocab = options.engine ?? 'vllm'
  // A count of 0 is "not known": planning a tensor that needs it says what to give.
  const rules: LayoutRule[] = [
    { pattern: '(^|\\.)(embed_tokens|wte|word_embeddings)\\.weight$', dim: 0, vocab },
    { pattern: '(^|\\.)lm_head\\.weight$', dim: 0, vocab },
    { pattern: '\\.q_proj\\.(weight|bias)$', dim: 0, heads: heads ?? 0 },
    { pattern: '\\.[kv]_proj\\.(weight|bias)$', dim: 0, kvHeads: kvHeads ?? 0 },
    { pattern: '\\.(gate_proj|up_proj)\\.(weight|bias)$', dim: 0 },
    { pattern: '\\.gate_up_proj\\.(weight|bias)$', dim: 0, parts: options.intermediateSize !== undefined ? [options.intermediateSize, options.intermediateSize] : 2 },
    { pattern: '\\.(o_proj|down_proj)\\.weight$', dim: 1 },
    { pattern: '\\.(o_proj|down_proj)\\.bias$', dim: null },
  ]
  // Without head counts a fused qkv cannot be split: heads 0 makes the planner say what is missing.
  rules.splice(2, 0, { pattern: '\\.qkv_proj\\.(weight|bias)$', dim: 0, qkv: { heads: heads ?? 0, kvHeads: kvHeads ?? 0 } })
  return rules
}
