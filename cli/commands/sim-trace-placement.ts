/**
 * agentctl sim trace placement --jobs N --nodes M --seed S [--load L]:
 * writes a generated placement trace (PlexRL-shaped jobs: 7B/30B/235B
 * cycles, bubble ratios 70–80 %, mixed gangs; mesh/sim/placement-trace.ts)
 * as JSON to stdout. Runs locally.
 */
import { generatePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { UsageError, type Command } from './command.ts'
import { integerFlag } from './flags.ts'

const name = 'sim trace placement'

export const simTracePlacementCommand: Command = {
  summary: 'generate a placement trace (JSON on stdout; local, no agent)',
  usage: '--jobs N --nodes M --seed S [--load L]',
  options: {
    jobs: { type: 'string', value: 'N', description: 'jobs in the trace (>= 1)' },
    nodes: { type: 'string', value: 'M', description: 'nodes in the cluster (>= 1)' },
    seed: { type: 'string', value: 'S', description: 'random seed (>= 0); the same seed gives the same trace' },
    load: { type: 'string', value: 'L', description: 'offered load: isolated node-seconds submitted per node-second of cluster (> 0); default 3' },
  },
  examples: [
    { what: '100 jobs on 16 nodes, for sim placement', run: 'agentctl sim trace placement --jobs 100 --nodes 16 --seed 1 > trace.json' },
  ],
  async run ({ values }) {
    let load: number | undefined
    if (values.load !== undefined) {
      load = Number(values.load)
      if (!(load > 0) || !Number.isFinite(load)) throw new UsageError(`${name}: --load must be a number > 0, got "${String(values.load)}"`)
    }
    const trace = generatePlacementTrace({
      jobs: integerFlag(name, values.jobs, 'jobs', 1),
      nodes: integerFlag(name, values.nodes, 'nodes', 1),
      seed: integerFlag(name, values.seed, 'seed', 0),
      load,
    })
    // The trace is the output either way; --json changes nothing.
    return { json: trace, human: JSON.stringify(trace) }
  },
}
