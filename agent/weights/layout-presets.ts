/**
 * Built-in layouts for Llama- and Qwen-style tensor names (Hugging Face
 * naming, as vLLM and Megatron shard them):
 * - column parallel (dim 0): q/k/v_proj, gate_proj, up_proj (and their biases)
 * - row parallel (dim 1): o_proj, down_proj (their biases replicated)
 * - vocab parallel (dim 0, ceil split): embed_tokens, lm_head
 * - fused qkv_proj (q|k|v along dim 0, GQA: kv heads replicated when tp > kv heads)
 * - fused gate_up_proj ([gate; up] along dim 0, each half split)
 * - everything else (norms, rotary buffers) replicated
 * Head counts are needed for GQA: from the caller or the model's metadata
 * (`num_attention_heads`, `num_key_value_heads` in the safetensors
 * __metadata__ of the published version).
 */
import { AgentError } from '../../core/errors.ts'
import type { LayoutRule } from './reshard.ts'

export const layoutPresetNames = ['llama', 'qwen'] as const
export type LayoutPresetName = typeof layoutPresetNames[number]

export interface PresetOptions {
  /** Attention (query) heads; needed for fused qkv. */
  heads?: number
  /** Key/value heads (GQA); needed for fused qkv and whenever tp may exceed them. */
  kvHeads?: number
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
  const out: PresetOptions = {}
  if (heads !== undefined) out.heads = heads
  if (kvHeads !== undefined) out.kvHeads = kvHeads
  return out
}

/** The rules of a preset; Qwen2/3 names are the Llama names plus q/k/v biases, handled by the same patterns. */
export function presetRules (name: string, options: PresetOptions = {}): LayoutRule[] {
  if (!(layoutPresetNames as readonly string[]).includes(name)) {
    throw new AgentError('ERR_LAYOUT_INVALID', `unknown layout preset "${name}" (one of ${layoutPresetNames.join(', ')})`)
  }
  const { heads, kvHeads } = options
  const kv = kvHeads !== undefined ? { kvHeads } : {}
  const rules: LayoutRule[] = [
    { pattern: '(^|\\.)(embed_tokens|wte|word_embeddings)\\.weight$', dim: 0, vocab: true },
    { pattern: '(^|\\.)lm_head\\.weight$', dim: 0, vocab: true },
    { pattern: '\\.q_proj\\.(weight|bias)$', dim: 0 },
    { pattern: '\\.[kv]_proj\\.(weight|bias)$', dim: 0, ...kv },
    { pattern: '\\.(gate_proj|up_proj)\\.(weight|bias)$', dim: 0 },
    { pattern: '\\.gate_up_proj\\.(weight|bias)$', dim: 0, parts: options.intermediateSize !== undefined ? [options.intermediateSize, options.intermediateSize] : 2 },
    { pattern: '\\.(o_proj|down_proj)\\.weight$', dim: 1 },
    { pattern: '\\.(o_proj|down_proj)\\.bias$', dim: null },
  ]
  // Without head counts a fused qkv cannot be split: heads 0 makes the planner say what is missing.
  rules.splice(2, 0, { pattern: '\\.qkv_proj\\.(weight|bias)$', dim: 0, qkv: { heads: heads ?? 0, kvHeads: kvHeads ?? 0 } })
  return rules
}
