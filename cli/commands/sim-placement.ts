/**
 * agentctl sim placement --trace F --policy P [--runtime hrrs|fcfs] [--seed S]:
 * replays a placement trace (mesh/sim/placement-trace.ts) through the
 * placement policy and runtime scheduler (mesh/sim/placement-sim.ts) and
 * prints makespan against the isolated policy's, jobs over their slowdown
 * bound, the slowdown and normalized-queue-delay distributions (PlexRL §6.3,
 * Fig. 8), context switches and per-job waits; with several policies, one
 * row each. Runs locally; needs no agent.
 */
import { parsePlacementTrace } from '../../mesh/sim/placement-trace.ts'
import { simulatePlacement, type PlacementSimResult } from '../../mesh/sim/placement-sim.ts'
import { placementPolicyNames, type PlacementPolicyName } from '../../mesh/policies/placement/placement-policy.ts'
import { runtimeSchedulerNames } from '../../mesh/policies/runtime/hrrs.ts'
import { UsageError, type Command } from './command.ts'
import { choiceFlag, integerFlag, readInputFile } from './flags.ts'
import { formatDuration, formatTable } from './table.ts'

const name = 'sim placement'

/** `--policy`: one policy, several separated by commas, or `all`; each at most once, in the order given. */
function policiesFlag (value: unknown): PlacementPolicyName[] {
  if (value === 'all') return [...placementPolicyNames]
  if (typeof value !== 'string') return [choiceFlag(name, value, 'policy', placementPolicyNames)]
  const out: PlacementPolicyName[] = []
  for (const one of value.split(',')) {
    const policy = choiceFlag(name, one.trim(), 'policy', placementPolicyNames)
    if (out.includes(policy)) throw new UsageError(`${name}: --policy names ${policy} twice`)
    out.push(policy)
  }
  return out
}

/** The summary lines of one policy's run, against the isolated makespan of the same trace. */
function summaryLines (result: PlacementSimResult, isolatedMakespanS: number): string[] {
  const q = result.normalizedQueueDelay
  const s = result.slowdown
  return [
    `makespan                 ${formatDuration(result.makespanS)} (${result.makespanS.toFixed(0)} s), ${(result.makespanS / isolatedMakespanS).toFixed(3)} of isolated`,
    `normalized queue delay   p50 ${q.p50.toFixed(2)}  p90 ${q.p90.toFixed(2)}  p99 ${q.p99.toFixed(2)}  max ${q.max.toFixed(2)}`,
    `slowdown                 p50 ${s.p50.toFixed(2)}  p99 ${s.p99.toFixed(2)}  max ${s.max.toFixed(2)}`,
    `jobs over their bound    ${result.jobsOverBound}`,
    `GPU busy fraction        ${(result.gpuBusyFraction * 100).toFixed(1)} %`,
    `context switches         ${result.contextSwitches}`,
    `jobs that shared nodes   ${result.sharedJobs}`,
    `slowdown guard evictions ${result.guardEvictions.length}`,
  ]
}

export const simPlacementCommand: Command = {
  summary: 'simulate cluster placement of a job trace under one or more policies, against isolated (local, no agent)',
  usage: `--trace F --policy ${placementPolicyNames.join('|')}|all [--runtime ${runtimeSchedulerNames.join('|')}] [--guard on|off] [--seed S]`,
  options: {
    trace: { type: 'string', value: 'F', description: 'the placement trace, JSON (mesh/sim/placement-trace.ts; agentctl sim trace placement makes one)', complete: 'file' },
    policy: { type: 'string', description: 'the placement policy (PlexRL\'s spread-backfill or a baseline); several separated by commas (pack,spread-backfill), or all, print a comparison', complete: [...placementPolicyNames, 'all'] },
    runtime: { type: 'string', description: 'the runtime scheduler of operations on shared nodes; default hrrs', complete: runtimeSchedulerNames },
    guard: { type: 'string', description: 'the slowdown guard: a job measured over its bound sends the latest colocation on its nodes back to the queue; default on', complete: ['on', 'off'] },
    seed: { type: 'string', value: 'S', description: 'random seed (>= 0); default 1' },
  },
  examples: [
    { what: 'PlexRL\'s placement over a generated trace', run: 'agentctl sim placement --trace trace.json --policy spread-backfill' },
    { what: 'every policy side by side: makespan vs isolated, jobs over their bound, slowdowns, switches', run: 'agentctl sim placement --trace trace.json --policy all' },
    { what: 'one node group per job, first come first served, for comparison', run: 'agentctl sim placement --trace trace.json --policy isolated --runtime fcfs' },
  ],
  async run ({ values }) {
    const path = typeof values.trace === 'string' ? values.trace : undefined
    const policies = policiesFlag(values.policy)
    const runtime = choiceFlag(name, values.runtime, 'runtime', runtimeSchedulerNames, 'hrrs')
    const seed = integerFlag(name, values.seed, 'seed', 0, 1)
    const guard = choiceFlag(name, values.guard, 'guard', ['on', 'off'], 'on') === 'on'
    if (path === undefined) throw new UsageError(`${name}: --trace is required`)
    const trace = parsePlacementTrace(await readInputFile(path, 'trace'), path)
    const results = policies.map(policy => simulatePlacement(trace, { policy, runtime, seed, guard }))
    // The baseline every makespan is compared with: each job on its own nodes, same runtime and seed.
    const isolatedMakespanS = (results.find(r => r.policy === 'isolated') ?? simulatePlacement(trace, { policy: 'isolated', runtime, seed })).makespanS
    if (results.length > 1) {
      const human = [
        `runtime ${runtime}: ${trace.jobs.length} jobs on ${trace.cluster.nodes} nodes; isolated makespan ${formatDuration(isolatedMakespanS)}`,
        formatTable(['POLICY', 'MAKESPAN', 'VS ISOLATED', 'OVER BOUND', 'SLOWDOWN P50', 'P99', 'MAX', 'SWITCHES', 'EVICTIONS', 'QUEUE DELAY P50'], results.map(r => [
          r.policy, formatDuration(r.makespanS), (r.makespanS / isolatedMakespanS).toFixed(3), String(r.jobsOverBound),
          r.slowdown.p50.toFixed(2), r.slowdown.p99.toFixed(2), r.slowdown.max.toFixed(2), String(r.contextSwitches), String(r.guardEvictions.length), r.normalizedQueueDelay.p50.toFixed(2),
        ])),
      ].join('\n')
      return { json: { isolatedMakespanS, results }, human }
    }
    const result = results[0]!
    const worst = [...result.jobs].sort((a, b) => b.waitS / (b.endS - b.startS) - a.waitS / (a.endS - a.startS)).slice(0, 10)
    const human = [
      `policy ${result.policy}, runtime ${result.runtime}: ${result.jobs.length} jobs on ${trace.cluster.nodes} nodes`,
      ...summaryLines(result, isolatedMakespanS),
      '',
      'longest normalized queue delays:',
      formatTable(['JOB', 'WAIT', 'RUN', 'DELAY/RUN', 'SLOWDOWN', 'PREDICTED', 'BOUND'], worst.map(j => [j.id, formatDuration(j.waitS), formatDuration(j.endS - j.startS), (j.waitS / (j.endS - j.startS)).toFixed(2), j.slowdown.toFixed(2), j.predictedSlowdown.toFixed(2), j.maxSlowdown.toFixed(2)])),
    ].join('\n')
    return { json: { ...result, isolatedMakespanS }, human }
  },
}
