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
  options: { jobs: { type: 'string' }, nodes: { type: 'string' }, seed: { type: 'string' }, load: { type: 'string' } },
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
