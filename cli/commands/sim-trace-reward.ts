/**
 * agentctl sim trace reward --tasks N --batch B --iterations I --seed S:
 * writes a generated CUDA-reward-like trace (DistRS §3, see
 * mesh/sim/reward-trace-generator.ts) as JSON to stdout. Runs locally.
 */
import { generateRewardTrace } from '../../mesh/sim/reward-trace-generator.ts'
import { UsageError, type Command } from '../command.ts'

export const simTraceRewardCommand: Command = {
  summary: 'generate a reward-service trace (JSON on stdout; local, no agent)',
  usage: '--tasks N --batch B --iterations I --seed S',
  options: { tasks: { type: 'string' }, batch: { type: 'string' }, iterations: { type: 'string' }, seed: { type: 'string' } },
  async run ({ values }) {
    const trace = generateRewardTrace({
      tasks: integerFlag(values.tasks, 'tasks', 1),
      batchSize: integerFlag(values.batch, 'batch', 1),
      iterations: integerFlag(values.iterations, 'iterations', 2),
      seed: integerFlag(values.seed, 'seed', 0),
    })
    // The trace is the output either way; --json changes nothing.
    const text = JSON.stringify(trace)
    return { json: trace, human: text }
  },
}

function integerFlag (value: unknown, name: string, min: number): number {
  if (typeof value !== 'string') throw new UsageError(`sim trace reward: --${name} is required`)
  const n = Number(value)
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min) {
    throw new UsageError(`sim trace reward: --${name} must be an integer >= ${min}${name === 'iterations' ? ' (the first batch of each task is the planner\'s history)' : ''}, got "${value}"`)
  }
  return n
}
