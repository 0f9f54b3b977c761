/**
 * A model's Hugging Face config.json, read for what splitting its tensors
 * needs (safetensors files carry no head counts): attention and key/value
 * heads and the MLP's intermediate size. Multimodal configs keep these under
 * `text_config`, which is read when the top level lacks them.
 *
 * The same figures travel with a published version as metadata under the
 * config's own names (`agentctl weights publish --config`), where the
 * presets find them (layout-presets.ts presetOptionsFromMetadata).
 */
import { AgentError } from '../../core/errors.ts'
import type { PresetOptions } from './layout-presets.ts'

/** The config keys kept as version metadata. */
export const modelConfigKeys = ['num_attention_heads', 'num_key_value_heads', 'intermediate_size', 'head_dim', 'hidden_size', 'vocab_size', 'model_type'] as const

export interface ModelConfig {
  heads: number
  /** num_key_value_heads, else num_attention_heads (Hugging Face's default: no GQA). */
  kvHeads: number
  intermediateSize?: number
  /** The config's values of modelConfigKeys, as strings (for version metadata). */
  metadata: Record<string, string>
}

/** Parses config.json text; ERR_BAD_REQUEST naming `source` and the field when it cannot give the head counts. */
export function parseModelConfig (text: string, source: string): ModelConfig {
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch (cause) {
    throw new AgentError('ERR_BAD_REQUEST', `${source}: not JSON (${(cause as Error).message})`, { cause })
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new AgentError('ERR_BAD_REQUEST', `${source}: expected a JSON object (a Hugging Face config.json)`)
  const top = doc as Record<string, unknown>
  const text_ = top.text_config
  const config = top.num_attention_heads === undefined && typeof text_ === 'object' && text_ !== null ? text_ as Record<string, unknown> : top
  const count = (key: string, required: boolean): number | undefined => {
    const v = config[key]
    if (v === undefined || v === null) {
      if (required) throw new AgentError('ERR_BAD_REQUEST', `${source}: ${key} is missing (the head counts split the attention tensors)`)
      return undefined
    }
    if (!Number.isSafeInteger(v) || (v as number) < 1) throw new AgentError('ERR_BAD_REQUEST', `${source}: ${key} must be a positive integer, got ${JSON.stringify(v)}`)
    return v as number
  }
  const heads = count('num_attention_heads', true)!
  const kvHeads = count('num_key_value_heads', false) ?? heads
  if (heads % kvHeads !== 0) throw new AgentError('ERR_BAD_REQUEST', `${source}: num_attention_heads ${heads} is not a multiple of num_key_value_heads ${kvHeads}`)
  const intermediateSize = count('intermediate_size', false)
  for (const key of ['head_dim', 'hidden_size', 'vocab_size']) count(key, false)
  const metadata: Record<string, string> = { num_attention_heads: String(heads), num_key_value_heads: String(kvHeads) }
  for (const key of modelConfigKeys) {
    const v = config[key]
    if (metadata[key] === undefined && (typeof v === 'number' || typeof v === 'string')) metadata[key] = String(v)
  }
  return { heads, kvHeads, ...(intermediateSize !== undefined ? { intermediateSize } : {}), metadata }
}

/** The preset options a config gives. */
export function presetOptionsOf (config: ModelConfig): PresetOptions {
  return { heads: config.heads, kvHeads: config.kvHeads, ...(config.intermediateSize !== undefined ? { intermediateSize: config.intermediateSize } : {}) }
}
