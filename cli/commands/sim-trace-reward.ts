/**
 * agentctl sim trace reward --tasks N --batch B --iterations I --seed S:
 * writes a generated CUDA-reward-like trace (DistRS §3, see
 * mesh/sim/reward-trace-generator.ts) as JSON to stdout. Runs locally.
 */
import { generateRewardTrace } from '../../mesh/sim/reward-trace-generator.ts'
import type { Command } from './command.ts'
import { integerFlag } from './flags.ts'

const name = 'sim trace reward'

export const simTraceRewardCommand: Command = {
  summary: 'generate a reward-service trace (JSON on stdout; local, no agent)',
  usage: '--tasks N --batch B --iterations I (>= 2: each task\'s first batch is the planner\'s history) --seed S',
  options: { tasks: { type: 'string' }, batch: { type: 'string' }, iterations: { type: 'string' }, seed: { type: 'string' } },
  async run ({ values }) {
    const trace = generateRewardTrace({
      tasks: integerFlag(name, values.tasks, 'tasks', 1),
      batchSize: integerFlag(name, values.batch, 'batch', 1),
      // The first batch of each task is the planner's history, so at least two.
      iterations: integerFlag(name, values.iterations, 'iterations', 2),
      seed: integerFlag(name, values.seed, 'seed', 0),
    })
    // The trace is the output either way; --json changes nothing.
    const text = JSON.stringify(trace)
    return { json: trace, human: text }
  },
}
