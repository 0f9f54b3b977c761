/**
 * agentctl sim placement --trace F --policy P [--runtime hrrs|fcfs] [--seed S]:
 * replays a placement trace (mesh/sim/placement-trace.ts) through the
 * placement policy and runtime scheduler (mesh/sim/placement-sim.ts) and
 * prints makespan, per-job wait/slowdown and the normalized-queue-delay
 * distribution (PlexRL §6.3, Fig. 8). Runs locally; needs no agent.
 */
import { parsePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { simulatePlacement } from '../../mesh/sim/placement-sim.ts'
import { placementPolicyNames } from '../../mesh/policies/placement/placement-policy.ts'
import { runtimeSchedulerNames } from '../../mesh/policies/runtime/hrrs.ts'
import { UsageError, type Command } from './command.ts'
import { choiceFlag, integerFlag, readInputFile } from './flags.ts'
import { formatDuration, formatTable } from './table.ts'

const name = 'sim placement'

export const simPlacementCommand: Command = {
  summary: 'simulate cluster placement of a job trace under a policy (local, no agent)',
  usage: `--trace F --policy ${placementPolicyNames.join('|')} [--runtime ${runtimeSchedulerNames.join('|')}] [--seed S]`,
  options: {
    trace: { type: 'string', value: 'F', description: 'the placement trace, JSON (mesh/sim/placement-trace.ts; agentctl sim trace placement makes one)', complete: 'file' },
    policy: { type: 'string', description: 'the placement policy (PlexRL\'s spread-backfill or a baseline)', complete: placementPolicyNames },
    runtime: { type: 'string', description: 'the runtime scheduler of operations on shared nodes; default hrrs', complete: runtimeSchedulerNames },
    seed: { type: 'string', value: 'S', description: 'random seed (>= 0); default 1' },
  },
  examples: [
    { what: 'PlexRL\'s placement over a generated trace', run: 'agentctl sim placement --trace trace.json --policy spread-backfill' },
    { what: 'one node group per job, first come first served, for comparison', run: 'agentctl sim placement --trace trace.json --policy isolated --runtime fcfs' },
  ],
  async run ({ values }) {
    const path = typeof values.trace === 'string' ? values.trace : undefined
    const policy = choiceFlag(name, values.policy, 'policy', placementPolicyNames)
    const runtime = choiceFlag(name, values.runtime, 'runtime', runtimeSchedulerNames, 'hrrs')
    const seed = integerFlag(name, values.seed, 'seed', 0, 1)
    if (path === undefined) throw new UsageError(`${name}: --trace is required`)
    const trace = parsePlacementTrace(await readInputFile(path, 'trace'), path)
    const result = simulatePlacement(trace, { policy, runtime, seed })
    const q = result.normalizedQueueDelay
    const worst = [...result.jobs].sort((a, b) => b.waitS / (b.endS - b.startS) - a.waitS / (a.endS - a.startS)).slice(0, 10)
    const human = [
      `policy ${result.policy}, runtime ${result.runtime}: ${result.jobs.length} jobs on ${trace.cluster.nodes} nodes`,
      `makespan                 ${formatDuration(result.makespanS)} (${result.makespanS.toFixed(0)} s)`,
      `normalized queue delay   p50 ${q.p50.toFixed(2)}  p90 ${q.p90.toFixed(2)}  p99 ${q.p99.toFixed(2)}  max ${q.max.toFixed(2)}`,
      `GPU busy fraction        ${(result.gpuBusyFraction * 100).toFixed(1)} %`,
      `context switches         ${result.contextSwitches}`,
      `jobs that shared nodes   ${result.sharedJobs}`,
      `jobs over their bound    ${result.jobs.filter(j => j.slowdown > j.maxSlowdown + 1e-9).length}`,
      '',
      'longest normalized queue delays:',
      formatTable(['JOB', 'WAIT', 'RUN', 'DELAY/RUN', 'SLOWDOWN', 'PREDICTED', 'BOUND'], worst.map(j => [j.id, formatDuration(j.waitS), formatDuration(j.endS - j.startS), (j.waitS / (j.endS - j.startS)).toFixed(2), j.slowdown.toFixed(2), j.predictedSlowdown.toFixed(2), j.maxSlowdown.toFixed(2)])),
    ].join('\n')
    return { json: result, human }
  },
}
