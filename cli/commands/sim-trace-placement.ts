/**
 * agentctl sim trace placement --jobs N --nodes M --seed S [--load L]
 * [--bound B] [--segments gap|back-to-back] [--gangs MIN-MAX]: writes a
 * generated placement trace (PlexRL-shaped jobs: 7B/30B/235B cycles, bubble
 * ratios 70–80 %, mixed gangs; mesh/sim/placement-trace.ts) as JSON to
 * stdout. Runs locally.
 */
import { generatePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { UsageError, type Command } from './command.ts'
import { choiceFlag, integerFlag } from './flags.ts'

const name = 'sim trace placement'

export const simTracePlacementCommand: Command = {
  summary: 'generate a placement trace (JSON on stdout; local, no agent)',
  usage: '--jobs N --nodes M --seed S [--load L] [--bound B] [--segments gap|back-to-back] [--gangs MIN-MAX]',
  options: {
    jobs: { type: 'string', value: 'N', description: 'jobs in the trace (>= 1)' },
    nodes: { type: 'string', value: 'M', description: 'nodes in the cluster (>= 1)' },
    seed: { type: 'string', value: 'S', description: 'random seed (>= 0); the same seed gives the same trace' },
    load: { type: 'string', value: 'L', description: 'offered load: isolated node-seconds submitted per node-second of cluster (> 0); default 3' },
    bound: { type: 'string', value: 'B', description: 'every job\'s maxSlowdown (1 to 1000); default drawn from 1.2-1.5 per job' },
    segments: { type: 'string', description: 'gap (default): log-prob, a short gap, update + sync; back-to-back: log-prob, update and sync as three touching segments', complete: ['gap', 'back-to-back'] },
    gangs: { type: 'string', value: 'MIN-MAX', description: 'gang sizes drawn uniformly from MIN to MAX nodes; default each model family\'s own' },
  },
  examples: [
    { what: '100 jobs on 16 nodes, for sim placement', run: 'agentctl sim trace placement --jobs 100 --nodes 16 --seed 1 > trace.json' },
    { what: 'every job bound at 1.25, log-prob/update/sync back to back, gangs of 1-8 nodes', run: 'agentctl sim trace placement --jobs 240 --nodes 64 --seed 1 --bound 1.25 --segments back-to-back --gangs 1-8 > trace.json' },
  ],
  async run ({ values }) {
    let load: number | undefined
    if (values.load !== undefined) {
      load = Number(values.load)
      if (!(load > 0) || !Number.isFinite(load)) throw new UsageError(`${name}: --load must be a number > 0, got "${String(values.load)}"`)
    }
    let maxSlowdown: number | undefined
    if (values.bound !== undefined) {
      maxSlowdown = Number(values.bound)
      if (!(maxSlowdown >= 1 && maxSlowdown <= 1000)) throw new UsageError(`${name}: --bound must be a number from 1 to 1000, got "${String(values.bound)}"`)
    }
    let gangs: { min: number, max: number } | undefined
    if (values.gangs !== undefined) {
      const m = /^(\d+)-(\d+)$/.exec(String(values.gangs))
      if (m === null || Number(m[1]) < 1 || Number(m[2]) < Number(m[1])) throw new UsageError(`${name}: --gangs must be MIN-MAX with 1 <= MIN <= MAX, got "${String(values.gangs)}"`)
      gangs = { min: Number(m[1]), max: Number(m[2]) }
    }
    const trace = generatePlacementTrace({
      jobs: integerFlag(name, values.jobs, 'jobs', 1),
      nodes: integerFlag(name, values.nodes, 'nodes', 1),
      seed: integerFlag(name, values.seed, 'seed', 0),
      load,
      maxSlowdown,
      segments: choiceFlag(name, values.segments, 'segments', ['gap', 'back-to-back'] as const, 'gap'),
      gangs,
    })
    // The trace is the output either way; --json changes nothing.
    return { json: trace, human: JSON.stringify(trace) }
  },
}
