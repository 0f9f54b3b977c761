/**
 * Live multiplexed execution (agent/workers/, mesh/control/jobs/op-scheduler.ts) with real Python
 * workers (CPU torch over shared memory) on real agents, against same-run baselines:
 *
 * 1. Context switch: two jobs (2 ranks each, --hidden 1536: 29 MB of state per rank) alternate `noop`
 *    operations on one node, so every operation offloads one job and onloads the other. Switch time
 *    (slowest node's offload + onload) vs a single-threaded memcpy of the same bytes (both
 *    directions, every rank) in this process. Goal: ≤ 1.2×.
 * 2. Control overhead: submit → worker handler start (the worker's wall clock minus the
 *    controller's, same host) of `noop` on a resident job: local (the controller's agent leads and
 *    hosts the workers) and through the leader (3-server cluster: the controller on a follower, the
 *    leader elsewhere, the workers on a fourth, GPU node). Goals: median < 5 ms local, < 20 ms
 *    through the leader.
 * 3. Makespan: three jobs, each `--iterations` iterations of a GPU segment (`sleep` --segment-ms)
 *    then controller think time (--think-ms, off the GPU), multiplexed on one 2-GPU node, vs the same
 *    jobs run one after another in isolation, vs `agentctl sim placement`'s prediction for the same
 *    shapes (simulatePlacement, measured switch cost). Runs under HRRS and FCFS: switch counts of
 *    both on the same workload.
 *
 *   node_modules/.bin/node test/bench/live-multiplex.bench.ts [--runs 3] [--iterations 6] [--segment-ms 400] [--think-ms 800] [--latency-ops 200] [--hidden 1536]
 */
import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnAgent, tempDir, type AgentProcess } from '../helpers/agent-process.ts'
import { startElectionCluster, waitForLeader } from '../helpers/test-election.ts'
import { liveJobSpec, startTrainer, twoFakeGpus } from '../helpers/live-workers.ts'
import { torchSkipReason } from '../helpers/python.ts'
import { simulatePlacement } from '../../mesh/sim/placement-sim.ts'
import type { AgentClient } from '../../agent/client/client.ts'
import { median, percentile } from './bench-stats.ts'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    iterations: { type: 'string', default: '6' },
    'segment-ms': { type: 'string', default: '400' },
    'think-ms': { type: 'string', default: '800' },
    'latency-ops': { type: 'string', default: '200' },
    hidden: { type: 'string', default: '1536' },
  },
})
const runs = Number(values.runs)
const iterations = Number(values.iterations)
const segmentMs = Number(values['segment-ms'])
const thinkMs = Number(values['think-ms'])
const latencyOps = Number(values['latency-ops'])
const switchHidden = Number(values.hidden)

const skip = torchSkipReason()
if (skip !== false) {
  console.log(`live-multiplex not run: ${skip}`)
  process.exit(0)
}

const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const liveSpec = (id: string) => liveJobSpec(id, { periodS: (segmentMs + thinkMs) / 1000, segmentS: segmentMs / 1000, iterations })
const fmt = (x: number, d = 1): string => x.toFixed(d)

async function devAgent (extra: string[] = []): Promise<AgentProcess> {
  const dir = tempDir(t)
  return await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `inventory.gpus=${twoFakeGpus}`, '--set', 'log.level=warn', ...extra] })
}

async function startJob (client: AgentClient, socketPath: string, id: string, seed: number, hidden: number): Promise<void> {
  await client.submitJob(liveSpec(id))
  await Promise.all([0, 1].map(rank => startTrainer(t, socketPath, { job: id, rank, gpu: rank, seed, hidden })))
}

/** Submit → handler start of each rank, ms, for `count` noops of a resident job. */
async function noopLatencies (client: AgentClient, job: string, count: number): Promise<number[]> {
  await client.runOp(job, { name: 'noop' })
  const out: number[] = []
  for (let i = 0; i < count; i++) {
    const submitted = performance.timeOrigin + performance.now() // wall clock, ms, like the worker's time.time()
    const a = await client.runOp(job, { name: 'noop' })
    out.push(Math.max(...a.ranks.map(r => r.startedAtMs)) - submitted)
  }
  return out
}

try {
  // 1. Context switch vs memcpy of the same bytes.
  {
    // Room in the host pool for both jobs' two stored versions: nothing spills to NVMe.
    const agent = await devAgent(['--set', `state.hostPoolBytes=${1 << 30}`])
    await startJob(agent.client, agent.socketPath, 'sw-a', 1, switchHidden)
    await startJob(agent.client, agent.socketPath, 'sw-b', 2, switchHidden)
    const stateBytes = (await agent.client.workers()).workers.filter(w => w.job === 'sw-a').reduce((n, w) => n + w.stateBytes, 0)
    const switchMs: number[] = []
    for (let i = 0; i < 8 * runs; i++) {
      for (const job of ['sw-a', 'sw-b']) {
        const a = await agent.client.runOp(job, { name: 'noop' })
        if (a.switched && i > 0) switchMs.push(a.offloadMs + a.onloadMs)
      }
    }
    // Baseline: one thread copies the bytes a switch moves (the outgoing job's state out, the incoming one's in).
    const moved = 2 * stateBytes
    const src = Buffer.alloc(moved, 1)
    const dst = Buffer.alloc(moved)
    const copyMs: number[] = []
    for (let i = 0; i < 20 * runs; i++) { const t0 = performance.now(); src.copy(dst); copyMs.push(performance.now() - t0) }
    console.log(`context switch (2 ranks x ${fmt(stateBytes / 2 / 2 ** 20, 2)} MiB out + in, ${switchMs.length} switches): median ${fmt(median(switchMs), 2)} ms, p90 ${fmt(percentile(switchMs, 90), 2)} ms`)
    console.log(`memcpy of the same ${fmt(moved / 2 ** 20, 2)} MiB, one thread: median ${fmt(median(copyMs), 3)} ms`)
    console.log(`switch / memcpy: median ${fmt(median(switchMs) / median(copyMs), 2)} x (goal <= 1.2)`)
    await agent.client.completeJob('sw-a')
    await agent.client.completeJob('sw-b')
  }

  // 2. Control overhead, local.
  {
    const agent = await devAgent()
    await startJob(agent.client, agent.socketPath, 'lat', 3, 64)
    const local = await noopLatencies(agent.client, 'lat', latencyOps)
    console.log(`submit -> worker start, local (${local.length} noops): median ${fmt(median(local), 2)} ms, p99 ${fmt(percentile(local, 99), 2)} ms (goal median < 5 ms)`)
  }

  // 2b. Control overhead through the leader.
  {
    const cluster = await startElectionCluster(t, { servers: 3, clients: 1, args: ['--set', 'log.level=warn'], clientArgs: ['--set', `inventory.gpus=${twoFakeGpus}`, '--set', 'state.enabled=true'] })
    const { leader } = await waitForLeader(cluster.agents, cluster.agents, 30_000)
    const gpuNode = cluster.clients[0]!
    const controllerAgent = cluster.servers.find(a => a !== leader)!
    await gpuNode.client.submitJob(liveSpec('lat'))
    while ((await gpuNode.client.jobs()).local.length === 0) await sleep(50)
    await Promise.all([0, 1].map(rank => startTrainer(t, gpuNode.socketPath, { job: 'lat', rank, gpu: rank, seed: 3, hidden: 64 })))
    const remote = await noopLatencies(controllerAgent.client, 'lat', latencyOps)
    console.log(`submit -> worker start, through the leader (${remote.length} noops; controller on a follower, workers on a 4th node): median ${fmt(median(remote), 2)} ms, p99 ${fmt(percentile(remote, 99), 2)} ms (goal median < 20 ms)`)
  }

  // 3. Makespan: multiplexed (HRRS, FCFS) vs one after another vs the simulator.
  {
    const jobs = ['mk-a', 'mk-b', 'mk-c']
    const controller = async (client: AgentClient, job: string): Promise<void> => {
      for (let k = 0; k < iterations; k++) {
        await client.runOp(job, { name: 'sleep', args: { ms: segmentMs } })
        await sleep(thinkMs)
      }
    }
    const multiplexed = async (scheduler: 'hrrs' | 'fcfs'): Promise<{ makespanS: number, switches: number, switchS: number }> => {
      const agent = await devAgent(['--set', `placement.runtime=${scheduler}`, '--set', 'placement.slotS=0.05'])
      for (const [i, job] of jobs.entries()) await startJob(agent.client, agent.socketPath, job, 10 + i, 256)
      const began = performance.now()
      await Promise.all(jobs.map(job => controller(agent.client, job)))
      const makespanS = (performance.now() - began) / 1000
      const top = await agent.client.jobsTop()
      return { makespanS, switches: top.switches, switchS: top.switches > 0 ? top.switchMs / top.switches / 1000 : 0 }
    }
    const hrrs: Array<Awaited<ReturnType<typeof multiplexed>>> = []
    const fcfs: Array<Awaited<ReturnType<typeof multiplexed>>> = []
    for (let r = 0; r < runs; r++) { hrrs.push(await multiplexed('hrrs')); fcfs.push(await multiplexed('fcfs')) }
    // Isolation: each job alone, one after another, on the same kind of agent.
    const isolated: number[] = []
    for (let r = 0; r < runs; r++) {
      const agent = await devAgent(['--set', 'placement.slotS=0.05'])
      let total = 0
      for (const [i, job] of jobs.entries()) {
        await startJob(agent.client, agent.socketPath, job, 10 + i, 256)
        const began = performance.now()
        await controller(agent.client, job)
        total += (performance.now() - began) / 1000
        await agent.client.completeJob(job)
      }
      isolated.push(total)
    }
    const switchS = median(hrrs.map(h => h.switchS))
    const predicted = simulatePlacement({
      cluster: { nodes: 1, gpusPerNode: 2, contextSwitchS: switchS, maxJobsPerNode: 4 },
      jobs: jobs.map(id => ({ id, nodes: 1, periodS: (segmentMs + thinkMs) / 1000, iterations, segments: [{ offsetS: 0, durationS: segmentMs / 1000 }], maxSlowdown: 4, profiled: true, switchS, submitS: 0 })),
    }, { policy: 'spread-backfill', runtime: 'hrrs', seed: 1, slotS: 0.05 })
    const live = median(hrrs.map(h => h.makespanS))
    console.log(`makespan, 3 jobs x ${iterations} iterations (${segmentMs} ms on the GPU group + ${thinkMs} ms off it), multiplexed on one node, HRRS: median ${fmt(live, 2)} s`)
    console.log(`makespan, the same jobs one after another in isolation: median ${fmt(median(isolated), 2)} s`)
    console.log(`makespan predicted by sim placement (measured switch ${fmt(switchS * 1000, 1)} ms): ${fmt(predicted.makespanS, 2)} s`)
    console.log(`live multiplexed / isolated: median ${fmt(live / median(isolated), 3)} x; live / predicted: median ${fmt(live / predicted.makespanS, 3)} x`)
    console.log(`switches on the same workload: HRRS median ${median(hrrs.map(h => h.switches))}, FCFS median ${median(fcfs.map(f => f.switches))} (makespan FCFS median ${fmt(median(fcfs.map(f => f.makespanS)), 2)} s)`)
  }
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
