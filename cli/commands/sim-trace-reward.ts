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
  options: {
    tasks: { type: 'string', value: 'N', description: 'training tasks submitting reward batches (>= 1)' },
    batch: { type: 'string', value: 'B', description: 'samples per batch (>= 1)' },
    iterations: { type: 'string', value: 'I', description: 'batches per task (>= 2: the first is the planner\'s history)' },
    seed: { type: 'string', value: 'S', description: 'random seed (>= 0); the same seed gives the same trace' },
  },
  examples: [
    { what: 'a trace of 4 tasks for sim reward', run: 'agentctl sim trace reward --tasks 4 --batch 32 --iterations 6 --seed 1 > reward.json' },
  ],
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
