/**
 * Reward-worker churn (issue 27, item 4): cold starts of dozens of worker
 * processes, on 3 dev agents that form one cluster with the default election
 * timings, each offering reward.cpuCores cores to one CPU stage run by the
 * example worker (agent/reward/examples/reward-worker.py). A trainer on the
 * first agent runs --batches batches of --size requests (--stage-ms each, the
 * first batch a cold start: the planner asks for a worker per request), with
 * --think-ms between batches (the trainer's training step).
 *
 * Measured per configuration, in the same run:
 *   - the agents' event-loop delay while the first batch's workers start
 *     (GET /metrics, agentd_event_loop_delay_seconds: p99 and max over that
 *     window, worst agent; goal p99 < 50 ms),
 *   - leader changes during the whole run (the leader's epoch; goal 0),
 *   - worker processes started per batch (every agent's log), batch times.
 * Configurations: `defaults` (reward.workerStartConcurrency 4,
 * reward.workerKeepWarmMs 60 s, reward.workerNice 10); `paced+warm, nice 0`
 * (the same with workers at the agent's priority: the defaults before
 * workerNice); `baseline`, the behaviour before pacing (every worker spawned
 * at once, workers stopped as soon as the plan drops them, not niced:
 * workerStartConcurrency 1024, workerKeepWarmMs 0, workerNice 0).
 * Batch 0 starts once the leader has every agent's capacity: the cold start
 * is of the whole batch (a worker per request), not of one agent's share.
 * Requests take 3 s by default, so that the batch still needs all its
 * workers when the last of them starts (with 300 ms requests a paced batch
 * was over after 30-some of the 60 had started, which measured less).
 * The trainer repeats a call its agent did not answer in time (submissions
 * are idempotent by id): a starved agent is measured, not a crashed bench.
 *
 *   node_modules/.bin/node test/bench/reward-coldstart.bench.ts [--runs 1] [--cores 20] [--size 60] [--batches 3] [--stage-ms 3000] [--think-ms 2000]
 */
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { repoRoot } from '../helpers/agent-process.ts'
import { startTestMesh, type MeshAgent } from '../helpers/test-mesh.ts'
import { python } from '../helpers/python.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '1' },
    cores: { type: 'string', default: '20' },
    size: { type: 'string', default: '60' },
    batches: { type: 'string', default: '3' },
    'stage-ms': { type: 'string', default: '3000' },
    'think-ms': { type: 'string', default: '2000' },
  },
})
const runs = Number(values.runs)
const cores = Number(values.cores)
const size = Number(values.size)
const batches = Number(values.batches)
const stageMs = Number(values['stage-ms'])
const thinkMs = Number(values['think-ms'])

const stages = [{ name: 'verify', resource: 'cpu', command: [python, join(repoRoot, 'agent/reward/examples/reward-worker.py')], coresPerWorker: 1, timeoutMs: 60_000 }]
const configurations = {
  defaults: [] as string[],
  'paced+warm, nice 0': ['--set', 'reward.workerNice=0'],
  baseline: ['--set', 'reward.workerStartConcurrency=1024', '--set', 'reward.workerKeepWarmMs=0', '--set', 'reward.workerNice=0'],
}

/** agentd_event_loop_delay_seconds quantiles since the previous scrape (which this resets). */
async function loopDelay (agent: MeshAgent): Promise<{ p99: number, max: number }> {
  const status = await agent.client.status() as { metrics?: { address: string } }
  const text = await (await fetch(`http://${status.metrics!.address}/metrics`)).text()
  const q = (quantile: string): number => Number(new RegExp(`^agentd_event_loop_delay_seconds\\{quantile="${quantile}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN)
  return { p99: q('0.99') * 1000, max: q('1') * 1000 }
}

/** A call repeated while its agent does not answer in time (the trainer's retry; every call here is idempotent). */
async function patiently<T> (call: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await call()
    } catch (err) {
      if ((err as { code?: string }).code !== 'ERR_AGENT_UNREACHABLE' || tries >= 10) throw err
      unanswered++
    }
  }
}
let unanswered = 0

const started = (agents: MeshAgent[]): number => agents.reduce((n, a) => n + (a.output().match(/"msg":"reward worker started"/g)?.length ?? 0), 0)

async function runOnce (name: keyof typeof configurations): Promise<{ p99: number, max: number, leaderChanges: number, startedPerBatch: number[], batchS: number[], unanswered: number }> {
  unanswered = 0
  const teardowns: Array<() => unknown> = []
  try {
    const mesh = await startTestMesh({ teardown: fn => { teardowns.push(fn) } }, {
      nodes: 3,
      clusterServers: 3,
      args: ['--set', `reward.stages=${JSON.stringify(stages)}`, '--set', `reward.cpuCores=${cores}`, '--set', 'metrics.listen=127.0.0.1:0', ...configurations[name]],
    })
    const [trainer] = mesh.agents
    let leader = await trainer!.client.leader()
    for (const deadline = performance.now() + 60_000; leader.leaderId === null; leader = await trainer!.client.leader()) {
      if (performance.now() > deadline) throw new Error('no leader acts')
      await sleep(200)
    }
    // Every agent's capacity known to the leader first: a cold start of the whole batch (size workers), not of one agent's share.
    for (const deadline = performance.now() + 60_000; (await trainer!.client.rewardStatus()).nodes.length < mesh.agents.length;) {
      if (performance.now() > deadline) throw new Error('the leader did not hear every agent\'s reward capacity')
      await sleep(200)
    }
    const firstEpoch = leader.epoch
    const startedPerBatch: number[] = []
    const batchS: number[] = []
    let coldStart = { p99: 0, max: 0 }
    for (let b = 0; b < batches; b++) {
      if (b === 0) for (const a of mesh.agents) await loopDelay(a) // resets the window
      const before = started(mesh.agents)
      const t0 = performance.now()
      await patiently(() => trainer!.client.rewardBatchStart({ task: 'math', batch: b, size }))
      for (let i = 0; i < size; i++) await patiently(() => trainer!.client.rewardSubmit({ task: 'math', batch: b, requestId: `math-${b}-${i}`, payload: { stageMs: { verify: stageMs } } }))
      for (let i = 0; i < size; i++) {
        for (;;) {
          // Long polls shorter than the client's 5 s timeout: a 5 s poll answered on time could still lose that race under load.
          const r = await patiently(() => trainer!.client.rewardResult(`math-${b}-${i}`, 2000))
          if (r.state === 'done') break
        }
      }
      batchS.push((performance.now() - t0) / 1000)
      startedPerBatch.push(started(mesh.agents) - before)
      if (b === 0) {
        const delays = await Promise.all(mesh.agents.map(loopDelay))
        coldStart = { p99: Math.max(...delays.map(d => d.p99)), max: Math.max(...delays.map(d => d.max)) }
        const planMs = mesh.agents.flatMap(a => [...a.output().matchAll(/"planMs":(\d+)/g)].map(m => Number(m[1])))
        console.log(`  ${name}, batch 0: planner runs ${planMs.length}, longest ${Math.max(0, ...planMs)} ms`)
      }
      await sleep(thinkMs)
    }
    const last = await patiently(() => trainer!.client.leader())
    return { ...coldStart, leaderChanges: last.epoch - firstEpoch, startedPerBatch, batchS, unanswered }
  } finally {
    for (const fn of teardowns.reverse()) await fn()
  }
}

const results: Record<string, Array<Awaited<ReturnType<typeof runOnce>>>> = Object.fromEntries(Object.keys(configurations).map(name => [name, []]))
for (let r = 0; r < runs; r++) {
  for (const name of Object.keys(configurations) as Array<keyof typeof configurations>) {
    const result = await runOnce(name)
    results[name]!.push(result)
    console.log(`run ${r + 1} ${name}: cold-start event-loop delay p99 ${result.p99.toFixed(1)} ms, max ${result.max.toFixed(1)} ms (worst of 3 agents); leader changes ${result.leaderChanges}; workers started per batch ${result.startedPerBatch.join(', ')}; batch times ${result.batchS.map(s => s.toFixed(2)).join(', ')} s; trainer calls not answered in 5 s ${result.unanswered}`)
  }
}
for (const [name, list] of Object.entries(results)) {
  console.log(`${name}: cold start (${size} requests, ${3 * cores} cores on 3 agents) event-loop delay p99 median ${median(list.map(x => x.p99)).toFixed(1)} ms (goal < 50), max median ${median(list.map(x => x.max)).toFixed(1)} ms; leader changes ${list.map(x => x.leaderChanges).join('/')} (goal 0); workers started after the first batch ${list.map(x => x.startedPerBatch.slice(1).reduce((a, b) => a + b, 0)).join('/')}`)
}
