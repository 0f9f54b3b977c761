/**
 * agentctl rollout register ID --url URL --model M: registers an
 * OpenAI-compatible streaming completion server of this node (vLLM, SGLang)
 * as a rollout instance (POST /v1/rollout/instances). The agent asks the
 * engine's /v1/models first and refuses one that does not serve M.
 */
import { UsageError, type Command } from './command.ts'
import { integerFlag } from './flags.ts'

export const rolloutRegisterCommand: Command = {
  summary: 'register an engine of this node (OpenAI-compatible, streaming) as a rollout instance; the same ID again replaces it',
  usage: 'ID --url URL --model M [--weight-version V] [--gpu N]... [--reserved]',
  arguments: [{ name: 'ID', description: 'the instance\'s id on this node (letters, digits, . _ : -)' }],
  options: {
    url: { type: 'string', value: 'URL', description: 'the engine\'s base URL, reachable from every node that runs steps (it serves URL/v1/completions)' },
    model: { type: 'string', value: 'M', description: 'the model name the engine serves (its /v1/models)' },
    'weight-version': { type: 'string', value: 'V', description: 'the weight version it runs, when known' },
    gpu: { type: 'string', multiple: true, value: 'N', description: 'a GPU index it runs on (repeat for more)' },
    reserved: { type: 'boolean', description: 'an engine of the training cluster: in a seeded step it takes requests only during the seeding window' },
  },
  examples: [
    { what: 'a vLLM server on this node', run: 'agentctl rollout register vllm0 --url http://10.0.0.7:8000 --model Qwen/Qwen2.5-7B-Instruct --gpu 0 --gpu 1' },
  ],
  async run ({ client, positionals, values, signal }) {
    const id = positionals[0]
    if (id === undefined) throw new UsageError('rollout register: the instance ID is required')
    if (typeof values.url !== 'string' || typeof values.model !== 'string') throw new UsageError('rollout register: --url and --model are required')
    const gpus = (values.gpu as string[] | undefined)?.map(g => integerFlag('rollout register', g, 'gpu', 0))
    const answer = await client.rolloutRegister({
      id, url: values.url, model: values.model,
      ...(values['weight-version'] !== undefined ? { weightVersion: integerFlag('rollout register', values['weight-version'], 'weight-version', 0) } : {}),
      ...(gpus !== undefined ? { gpus } : {}),
      ...(values.reserved === true ? { reserved: true as const } : {}),
    }, { signal })
    return { json: answer, human: `rollout instance ${answer.id} registered: ${answer.url} serves ${answer.model} (${answer.state})` }
  },
}
