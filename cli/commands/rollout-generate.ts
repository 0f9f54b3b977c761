/**
 * agentctl rollout generate F: runs one rollout step through this agent
 * (POST /v1/rollout/steps) with the prompts of F, JSON lines of
 * `{"prompt": "...", "id"?, "maxTokens"?, "sampling"?}` (id default: the
 * line number; maxTokens default: --max-tokens), and prints the step's
 * report; --json prints every response.
 */
import { UsageError, type Command } from './command.ts'
import { choiceFlag, integerFlag, readInputFile } from './flags.ts'
import type { RolloutStepBody } from '../../agent/api/wire/rollout.ts'

/** F's lines as the step's requests; a line that is not a prompt object is a UsageError naming it. */
export function parsePromptLines (text: string, path: string, maxTokens: number): RolloutStepBody['requests'] {
  const requests: RolloutStepBody['requests'] = []
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return
    let v: unknown
    try { v = JSON.parse(line) } catch { throw new UsageError(`${path}:${i + 1}: not JSON`) }
    const o = v as { id?: unknown, prompt?: unknown, maxTokens?: unknown, sampling?: unknown }
    if (typeof o !== 'object' || o === null || typeof o.prompt !== 'string') throw new UsageError(`${path}:${i + 1}: expected {"prompt": "..."}`)
    requests.push({
      id: typeof o.id === 'string' ? o.id : `p${i + 1}`,
      prompt: o.prompt,
      maxTokens: typeof o.maxTokens === 'number' ? o.maxTokens : maxTokens,
      ...(typeof o.sampling === 'object' && o.sampling !== null ? { sampling: o.sampling as Record<string, unknown> } : {}),
    })
  })
  if (requests.length === 0) throw new UsageError(`${path}: no prompts`)
  return requests
}

export const rolloutGenerateCommand: Command = {
  summary: 'run a rollout step over the cluster\'s instances with the prompts of a JSON-lines file; prints the step\'s report',
  usage: 'F [--model M] [--max-tokens N] [--balancer rlboost|jsq|round-robin] [--step-id ID]',
  arguments: [{ name: 'F', description: 'JSON lines: {"prompt": "...", "id"?, "maxTokens"?, "sampling"?}', complete: 'file' }],
  options: {
    model: { type: 'string', value: 'M', description: 'only instances serving M (sent as the requests\' model)' },
    'max-tokens': { type: 'string', value: 'N', description: 'for lines without maxTokens (default 256)' },
    balancer: { type: 'string', description: 'rlboost: Algorithm 2 (default); jsq and round-robin dispatch at once, never rebalance', complete: ['rlboost', 'jsq', 'round-robin'] },
    'step-id': { type: 'string', value: 'ID', description: 'name the step: run again with the same ID after a failure, it goes on from the tokens collected (or answers again once complete)' },
  },
  examples: [
    { what: 'generate for a file of prompts', run: 'agentctl rollout generate prompts.jsonl --model Qwen/Qwen2.5-7B-Instruct --max-tokens 512' },
  ],
  async run ({ client, positionals, values, signal }) {
    const path = positionals[0]
    if (path === undefined) throw new UsageError('rollout generate: the prompts file F is required')
    const requests = parsePromptLines(await readInputFile(path, 'prompts'), path, integerFlag('rollout generate', values['max-tokens'], 'max-tokens', 1, 256))
    const balancer = choiceFlag('rollout generate', values.balancer, 'balancer', ['rlboost', 'jsq', 'round-robin'] as const, 'rlboost')
    const answer = await client.rolloutStep({
      requests, options: { balancer },
      ...(typeof values.model === 'string' ? { model: values.model } : {}),
      ...(typeof values['step-id'] === 'string' ? { stepId: values['step-id'] } : {}),
    }, { signal })
    const tokens = answer.responses.reduce((n, r) => n + r.tokens, 0)
    return {
      json: answer,
      human: [
        `${answer.responses.length} responses, ${tokens} tokens in ${(answer.stepMs / 1000).toFixed(2)} s over ${answer.instances.length} instances`,
        ...(answer.resumed !== undefined ? [`resumed: ${answer.resumed.requests} requests with ${answer.resumed.tokens} tokens from the step's journal`] : []),
        `moved: ${answer.moves.lost} off lost instances, ${answer.moves.pending} queued and ${answer.moves.executing} generating by balancing`,
        ...answer.removed.map(r => `removed ${r.instance}: ${r.reason}`),
      ].join('\n'),
    }
  },
}
