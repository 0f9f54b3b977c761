/**
 * agentctl sim trace rollout --requests N --engines M [--preempt K --at S]
 * --seed S: writes a generated rollout trace (mesh/sim/rollout-trace.ts) as
 * JSON to stdout. Runs locally.
 */
import { generateRolloutTrace } from '../../mesh/sim/rollout-trace.ts'
import { UsageError, type Command } from './command.ts'
import { integerFlag } from './flags.ts'

const name = 'sim trace rollout'

export const simTraceRolloutCommand: Command = {
  summary: 'generate a rollout step trace (JSON on stdout; local, no agent)',
  usage: '--requests N --engines M [--preempt K --at S] [--mean-tokens T] [--max-tokens T] --seed S',
  options: {
    requests: { type: 'string', value: 'N', description: 'generation requests in the step (>= 1)' },
    engines: { type: 'string', value: 'M', description: 'rollout engines (>= 1)' },
    preempt: { type: 'string', value: 'K', description: 'engines preempted during the step (default 0)' },
    at: { type: 'string', value: 'S', description: 'when they are preempted, seconds into the step (with --preempt)' },
    'mean-tokens': { type: 'string', value: 'T', description: 'mean response length before the cap, tokens (default 600)' },
    'max-tokens': { type: 'string', value: 'T', description: 'max_tokens of every request (default 4096)' },
    seed: { type: 'string', value: 'S', description: 'random seed (>= 0); the same seed gives the same trace' },
  },
  examples: [
    { what: '256 requests on 8 engines, 4 preempted 20 s in', run: 'agentctl sim trace rollout --requests 256 --engines 8 --preempt 4 --at 20 --seed 1 > rollout.json' },
  ],
  async run ({ values }) {
    const engines = integerFlag(name, values.engines, 'engines', 1)
    const preempt = integerFlag(name, values.preempt, 'preempt', 0, 0)
    if (preempt > engines) throw new UsageError(`${name}: --preempt ${preempt} exceeds --engines ${engines}`)
    if (preempt > 0 && values.at === undefined) throw new UsageError(`${name}: --preempt needs --at S (seconds into the step)`)
    const trace = generateRolloutTrace({
      requests: integerFlag(name, values.requests, 'requests', 1),
      engines,
      preempt,
      atS: preempt > 0 ? integerFlag(name, values.at, 'at', 0) : 0,
      meanResponseTokens: integerFlag(name, values['mean-tokens'], 'mean-tokens', 1, 600),
      maxTokens: integerFlag(name, values['max-tokens'], 'max-tokens', 1, 4096),
      seed: integerFlag(name, values.seed, 'seed', 0),
    })
    const text = JSON.stringify(trace)
    return { json: trace, human: text }
  },
}
