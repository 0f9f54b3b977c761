/**
 * What committing a decision by quorum costs a submitter: a real 3-server
 * election cluster on loopback (CPU-only agents), N jobs submitted one after
 * another through the leader and through a follower (POST /v1/jobs, answered
 * once the decision holding the job is committed and published; each job
 * asks for 8 GPUs, so it queues and the placement round costs next to
 * nothing), and N bare decisions on the leader (POST /v1/leader/decisions).
 * Baseline in the same
 * run: the same sequence against another build of the agent (`--baseline`,
 * the previous version's dist/bundle/agentd.js, which acknowledged a decision
 * once it was gossiped), runs interleaved.
 *
 *   node_modules/.bin/node test/bench/decision-commit.bench.ts [--jobs 40] [--runs 3] [--baseline PATH/agentd.js]
 *
 * Figures are per build: p50 and p99 over every run's samples, and the
 * per-run medians; with --baseline, the ratio of the medians of run medians.
 */
import { parseArgs } from 'node:util'
import { startElectionCluster, waitForLeader } from '../helpers/test-election.ts'
import type { SpawnOptions } from '../helpers/agent-process.ts'
import { median, percentile } from './bench-stats.ts'

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '40' }, runs: { type: 'string', default: '3' }, baseline: { type: 'string' } } })
const jobs = Number(values.jobs)
const runs = Number(values.runs)

interface Sample { viaLeader: number[], viaFollower: number[], decide: number[], failed: number }

/** A job no CPU-only node can take: it stays queued. */
const queuedJob = (id: string): Record<string, unknown> =>
  ({ id, nodes: 1, gpusPerNode: 8, periodS: 10, iterations: 10, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2 })

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
    const sample: Sample = { viaLeader: [], viaFollower: [], decide: [], failed: 0 }
    for (let i = 0; i < jobs; i++) {
      for (const [agent, into] of [[leader!, sample.viaLeader], [follower, sample.viaFollower]] as const) {
        const began = performance.now()
        try {
          await agent.client.submitJob(queuedJob(`r${run}-${agent.name}-${i}`))
          into.push(performance.now() - began)
        } catch (err) {
          console.log(`${String(built === true ? 'this build' : 'baseline')} run ${run}: submission ${i} through ${agent.name} failed after ${Math.round(performance.now() - began)} ms: ${(err as Error).message}`)
          sample.failed++
        }
      }
    }
    for (let i = 0; i < jobs; i++) {
      const began = performance.now()
      await leader!.client.decide('bench', { i })
      sample.decide.push(performance.now() - began)
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
const line = (name: string, via: 'viaLeader' | 'viaFollower' | 'decide'): string => {
  const per = results.get(name)!.map(s => s[via])
  const all = per.flat()
  const failed = results.get(name)!.reduce((n, s) => n + s.failed, 0)
  return `${name.padEnd(11)} ${via === 'viaLeader' ? 'submit via leader  ' : via === 'viaFollower' ? 'submit via follower' : 'decide on leader   '}  p50 ${percentile(all, 50).toFixed(1)} ms  p99 ${percentile(all, 99).toFixed(1)} ms  (per-run medians ${per.map(xs => median(xs).toFixed(1)).join(', ')}; ${failed} failed in all)`
}
for (const via of ['viaLeader', 'viaFollower', 'decide'] as const) {
  for (const v of variants) console.log(line(v.name, via))
  if (values.baseline !== undefined) {
    const m = (name: string): number => median(results.get(name)!.map(s => median(s[via])))
    console.log(`  ratio this/baseline (median of run medians): ${(m('this build') / m('baseline')).toFixed(2)}`)
  }
}
