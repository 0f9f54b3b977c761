/**
 * What committing a decision by quorum costs a submitter: a real 3-server
 * election cluster on loopback, N jobs submitted one after another through
 * the leader and through a follower (POST /v1/jobs, answered once the
 * decision holding the job is committed and published). Baseline in the same
 * run: the same sequence against another build of the agent (`--baseline`,
 * the previous version's dist/bundle/agentd.js, which acknowledged a decision
 * once it was gossiped), runs interleaved.
 *
 *   node_modules/.bin/node test/bench/decision-commit.bench.ts [--jobs 40] [--runs 3] [--baseline PATH/agentd.js]
 */
import { parseArgs } from 'node:util'
import { startElectionCluster, waitForLeader } from '../helpers/test-election.ts'
import type { SpawnOptions } from '../helpers/agent-process.ts'
import { jepsenJob } from '../helpers/jepsen.ts'
import { median, percentile } from './bench-stats.ts'

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '40' }, runs: { type: 'string', default: '3' }, baseline: { type: 'string' } } })
const jobs = Number(values.jobs)
const runs = Number(values.runs)

interface Sample { viaLeader: number[], viaFollower: number[] }

async function measure (built: SpawnOptions['built'], run: number): Promise<Sample> {
  const teardowns: Array<() => unknown> = []
  try {
    const cluster = await startElectionCluster({ teardown: fn => { teardowns.push(fn) } }, {
      servers: 3,
      args: ['--set', 'log.level=warn', '--set', `placement.maxActiveJobs=${2 * jobs + 1}`],
      built,
    })
    const { leader } = await waitForLeader(cluster.agents, cluster.agents, 30_000)
    const follower = cluster.agents.find(a => a !== leader)!
    const sample: Sample = { viaLeader: [], viaFollower: [] }
    for (let i = 0; i < jobs; i++) {
      for (const [agent, into] of [[leader!, sample.viaLeader], [follower, sample.viaFollower]] as const) {
        const began = performance.now()
        await agent.client.submitJob(jepsenJob(`r${run}-${agent.name}-${i}`))
        into.push(performance.now() - began)
      }
    }
    return sample
  } finally {
    for (const fn of teardowns.reverse()) await fn()
  }
}

const variants: Array<{ name: string, built: SpawnOptions['built'] }> = [
  { name: 'this build', built: true },
  ...(values.baseline !== undefined ? [{ name: 'baseline', built: { entry: values.baseline } }] : []),
]
const results = new Map<string, Sample[]>(variants.map(v => [v.name, []]))
for (let run = 0; run < runs; run++) {
  for (const v of variants) results.get(v.name)!.push(await measure(v.built, run))
}

console.log(`${jobs} jobs submitted one after another through the leader and through a follower of a 3-server cluster, ${runs} runs per build, interleaved`)
const line = (name: string, via: keyof Sample): string => {
  const per = results.get(name)!.map(s => s[via])
  const all = per.flat()
  return `${name.padEnd(11)} via ${via === 'viaLeader' ? 'leader  ' : 'follower'}  p50 ${percentile(all, 50).toFixed(1)} ms  p99 ${percentile(all, 99).toFixed(1)} ms  (per-run medians ${per.map(xs => median(xs).toFixed(1)).join(', ')})`
}
for (const via of ['viaLeader', 'viaFollower'] as const) {
  for (const v of variants) console.log(line(v.name, via))
  if (values.baseline !== undefined) {
    const m = (name: string): number => median(results.get(name)!.map(s => median(s[via])))
    console.log(`  ratio this/baseline (median of run medians): ${(m('this build') / m('baseline')).toFixed(2)}`)
  }
}
