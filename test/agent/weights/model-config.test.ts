// A model's config.json read for the head counts a resharded pull needs; bad configs refused naming the field.
import t from 'tap'
import { parseModelConfig, presetOptionsOf } from '../../../agent/weights/model-config.ts'
import { presetOptionsFromMetadata } from '../../../agent/weights/layout-presets.ts'

t.test('Llama, Qwen2 and multimodal configs give heads, kv heads and the MLP size; the metadata carries them to pullers', async t => {
  const llama = parseModelConfig(JSON.stringify({ model_type: 'llama', hidden_size: 4096, num_attention_heads: 32, num_key_value_heads: 8, intermediate_size: 14336, vocab_size: 128256, rope_theta: 500000 }), 'config.json')
  t.same(presetOptionsOf(llama), { heads: 32, kvHeads: 8, intermediateSize: 14336 })
  t.same(llama.metadata, { num_attention_heads: '32', num_key_value_heads: '8', intermediate_size: '14336', hidden_size: '4096', vocab_size: '128256', model_type: 'llama' })
  t.same(presetOptionsFromMetadata(llama.metadata), presetOptionsOf(llama), 'published metadata gives the puller the same options')
  const noGqa = parseModelConfig(JSON.stringify({ num_attention_heads: 32 }), 'c')
  t.equal(noGqa.kvHeads, 32, 'no num_key_value_heads: one kv head per head (Hugging Face\'s default)')
  const multimodal = parseModelConfig(JSON.stringify({ model_type: 'qwen2_5_vl', text_config: { num_attention_heads: 28, num_key_value_heads: 4 } }), 'c')
  t.same([multimodal.heads, multimodal.kvHeads], [28, 4], 'read from text_config')
})

t.test('a config that cannot give the head counts is refused with the field', async t => {
  t.throws(() => parseModelConfig('{', 'x/config.json'), { code: 'ERR_BAD_REQUEST', message: /x\/config.json: not JSON/ })
  t.throws(() => parseModelConfig('[]', 'c'), { message: /expected a JSON object/ })
  t.throws(() => parseModelConfig('{"hidden_size": 4096}', 'c'), { message: /c: num_attention_heads is missing/ })
  t.throws(() => parseModelConfig('{"num_attention_heads": "32"}', 'c'), { message: /num_attention_heads must be a positive integer, got "32"/ })
  t.throws(() => parseModelConfig('{"num_attention_heads": 32, "num_key_value_heads": 0}', 'c'), { message: /num_key_value_heads must be a positive integer, got 0/ })
  t.throws(() => parseModelConfig('{"num_attention_heads": 32, "num_key_value_heads": 6}', 'c'), { message: /32 is not a multiple of num_key_value_heads 6/ })
  t.throws(() => parseModelConfig('{"num_attention_heads": 32, "intermediate_size": 1.5}', 'c'), { message: /intermediate_size must be a positive integer/ })
})
