/**
 * Live multiplexed execution (agent/workers/, mesh/control/jobs/op-scheduler.ts) with real Python
 * workers (CPU torch over shared memory) on real agents, against same-run baselines:
 *
 * 1. Context switch: two jobs (2 ranks each, --hidden 1536: 29 MB of state per rank) alternate `noop`
 *    operations on one node, so every operation offloads one job and onloads the other. Switch time
 *    (slowest node's switch: the onload overlapping the offload, as when the device has room for
 *    both, and again with placement.overlapSwitches=false, as when it has not) vs a single-threaded
 *    memcpy of the same bytes (both directions, every rank, one after the other) in this process.
 *    Goal: ≤ 1.2×. With --device cuda (a GPU machine;
 *    --parts switch): one rank per job on GPU 0 with CUDA tensors, against torch copying the same
 *    bytes device -> pinned host -> device (cuda_copy_baseline.py) in the same run.
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
 *   node_modules/.bin/node test/bench/live-multiplex.bench.ts [--parts switch,spill,latency,makespan] [--runs 3] [--iterations 6] [--segment-ms 400] [--think-ms 800] [--latency-ops 200] [--hidden 1536]
 */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnAgent, tempDir, type AgentProcess } from '../helpers/agent-process.ts'
import { startElectionCluster, waitForLeader } from '../helpers/test-election.ts'
import { liveJobSpec, startTrainer, twoFakeGpus } from '../helpers/live-workers.ts'
import { python, torchSkipReason } from '../helpers/python.ts'
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
    parts: { type: 'string', default: 'switch,spill,latency,makespan' },
    device: { type: 'string', default: 'cpu' },
    'pool-jobs': { type: 'string', default: '2.5' },
  },
})
const runs = Number(values.runs)
const iterations = Number(values.iterations)
const segmentMs = Number(values['segment-ms'])
const thinkMs = Number(values['think-ms'])
const latencyOps = Number(values['latency-ops'])
const switchHidden = Number(values.hidden)
const parts = new Set(values.parts.split(','))
const device = values.device
if (device !== 'cpu' && device !== 'cuda') throw new Error(`--device is cpu or cuda, got ${device}`)

const skip = torchSkipReason()
if (skip !== false) {
  console.log(`live-multiplex not run: ${skip}`)
  process.exit(0)
}

const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const liveSpec = (id: string) => liveJobSpec(id, { periodS: (segmentMs + thinkMs) / 1000, segmentS: segmentMs / 1000, iterations })
const fmt = (x: number, d = 1): string => x.toFixed(d)

/** Bytes of one rank's tiny-trainer state at `hidden` (parameters and AdamW's two moments, fp32), rounded up. */
const stateBudget = (hidden: number): number => 3 * 4 * (hidden * hidden + 48 * hidden + 1024)

/** Single-thread memcpy of `bytes` between two buffers in this process, `count` times, ms each. */
function hostCopyMs (bytes: number, count: number): number[] {
  const src = Buffer.alloc(bytes, 1)
  const dst = Buffer.alloc(bytes)
  src.copy(dst)
  const out: number[] = []
  for (let i = 0; i < count; i++) { const t0 = performance.now(); src.copy(dst); out.push(performance.now() - t0) }
  return out
}

/** Device -> pinned host -> device of `bytes` with torch, `count` times, ms each (cuda_copy_baseline.py). */
function cudaCopyMs (bytes: number, count: number): number[] {
  const r = spawnSync(python, [join(import.meta.dirname, 'cuda_copy_baseline.py'), '--bytes', String(bytes), '--runs', String(count)], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`cuda_copy_baseline.py failed: ${r.stderr}`)
  return (JSON.parse(r.stdout) as { totalMs: number[] }).totalMs
}

async function devAgent (extra: string[] = []): Promise<AgentProcess> {
  return await realGpuAgent(['--set', `inventory.gpus=${twoFakeGpus}`, ...extra])
}

/** A dev agent with the machine's own GPUs (none here: the stand-ins come from devAgent). */
async function realGpuAgent (extra: string[]): Promise<AgentProcess> {
  const dir = tempDir(t)
  return await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', 'log.level=warn', ...extra] })
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
  // 1. Context switch vs a raw copy of the same bytes.
  if (parts.has('switch')) {
    // Room in the host pool for both jobs' stored versions (two kept per rank, a third while one is stored): nothing spills to NVMe.
    const cuda = device === 'cuda'
    /** Switches of two jobs alternating `noop`s, with the onload overlapping the offload or after it. */
    const switches = async (overlap: boolean): Promise<{ switchMs: number[], offMs: number[], onMs: number[], stateBytes: number, ranks: number[] }> => {
      const config = ['--set', `state.hostPoolBytes=${Math.max(16 * stateBudget(switchHidden), 64 * 2 ** 20)}`, '--set', `placement.overlapSwitches=${overlap}`]
      const agent = cuda ? await realGpuAgent(config) : await devAgent(config)
      const ranks = cuda ? [0] : [0, 1]
      const ids = overlap ? ['sw-a', 'sw-b'] : ['sq-a', 'sq-b']
      for (const [i, id] of ids.entries()) {
        await agent.client.submitJob(liveJobSpec(id, { gpusPerNode: ranks.length }))
        await Promise.all(ranks.map(rank => startTrainer(t, agent.socketPath, { job: id, rank, gpu: rank, seed: i + 1, hidden: switchHidden, ...(cuda ? { device: 'cuda' as const } : {}) })))
      }
      const stateBytes = (await agent.client.workers()).workers.filter(w => w.job === ids[0]).reduce((n, w) => n + w.stateBytes, 0)
      const switchMs: number[] = []; const offMs: number[] = []; const onMs: number[] = []
      for (let i = 0; i < 8 * runs; i++) {
        for (const job of ids) {
          const a = await agent.client.runOp(job, { name: 'noop' })
          if (a.switched && i > 0) { switchMs.push(a.switchMs); offMs.push(a.offloadMs); onMs.push(a.onloadMs) }
        }
      }
      for (const id of ids) await agent.client.completeJob(id)
      return { switchMs, offMs, onMs, stateBytes, ranks }
    }
    const overlapped = await switches(true)
    const sequential = await switches(false)
    // Baseline: the bytes a switch moves (the outgoing job's state out, the incoming one's in) copied raw, one after the other.
    const { stateBytes, ranks } = overlapped
    const moved = 2 * stateBytes
    const copyMs = cuda ? cudaCopyMs(stateBytes, 20 * runs) : hostCopyMs(moved, 20 * runs)
    const per = ranks.length > 1 ? `${ranks.length} ranks x ${fmt(stateBytes / ranks.length / 2 ** 20, 2)} MiB` : `${fmt(stateBytes / 2 ** 20, 2)} MiB`
    console.log(`raw copy of the ${fmt(moved / 2 ** 20, 2)} MiB a switch moves (${cuda ? 'torch: device -> pinned host, then pinned host -> device' : 'memcpy, one thread'}): median ${fmt(median(copyMs), 3)} ms`)
    for (const [label, r] of [['onload overlapping the offload (room on the device for both)', overlapped], ['onload after the offload (no room for both)', sequential]] as const) {
      console.log(`context switch on ${cuda ? 'a CUDA GPU (CUDA IPC, pinned host pool)' : 'stand-in GPUs (shared memory)'}, ${label} (${per} out + in, ${r.switchMs.length} switches): median ${fmt(median(r.switchMs), 2)} ms (offload ${fmt(median(r.offMs), 2)}, onload done ${fmt(median(r.onMs), 2)} ms after the start), p90 ${fmt(percentile(r.switchMs, 90), 2)} ms; switch / raw copy: ${fmt(median(r.switchMs) / median(copyMs), 2)} x (goal <= 1.2)`)
    }
  }

  // 1b. Switches through NVMe: the host pool holds 1.5 jobs' state, so the incoming job's stored state is
  // mostly on NVMe. Alternating operations (each submitted when the other finished: nothing to overlap)
  // read it in the onload; concurrent controllers (the next operation waits while the other job runs
  // --segment-ms) let the leader's prefetch bring it back first. Same agent configuration, same run.
  if (parts.has('spill')) {
    const perJob = 2 * stateBudget(switchHidden)
    const poolJobs = Number(values['pool-jobs'])
    const pool = ['--set', `state.hostPoolBytes=${Math.round(poolJobs * perJob)}`]
    const measure = async (concurrent: boolean): Promise<{ on: number[], off: number[], promoted: number }> => {
      const agent = await devAgent(pool)
      for (const [i, id] of ['sp-a', 'sp-b'].entries()) {
        await agent.client.submitJob(liveJobSpec(id))
        await Promise.all([0, 1].map(rank => startTrainer(t, agent.socketPath, { job: id, rank, gpu: rank, seed: 20 + i, hidden: switchHidden })))
      }
      const answers: Array<{ switched: boolean, onloadMs: number, offloadMs: number }> = []
      const op = async (job: string): Promise<void> => { answers.push(await agent.client.runOp(job, concurrent ? { name: 'sleep', args: { ms: segmentMs } } : { name: 'noop' })) }
      if (concurrent) {
        await Promise.all(['sp-a', 'sp-b'].map(async job => { for (let i = 0; i < 6 * runs; i++) await op(job) }))
      } else {
        for (let i = 0; i < 6 * runs; i++) for (const job of ['sp-a', 'sp-b']) await op(job)
      }
      const sw = answers.slice(2).filter(a => a.switched)
      const promoted = (await agent.client.call<{ counters: { promoted: number } }>('GET', '/v1/state/residency')).counters.promoted
      await agent.client.completeJob('sp-a'); await agent.client.completeJob('sp-b')
      return { on: sw.map(a => a.onloadMs), off: sw.map(a => a.offloadMs), promoted }
    }
    const cold = await measure(false)
    const warm = await measure(true)
    console.log(`switch through NVMe (host pool ${fmt(poolJobs * perJob / 2 ** 20, 1)} MiB = ${poolJobs} jobs; ${fmt(perJob / 2 ** 20, 1)} MiB per job): onload median ${fmt(median(cold.on), 1)} ms with nothing to overlap (${cold.on.length} switches, ${cold.promoted} keys read back), ${fmt(median(warm.on), 1)} ms when prefetched while the other job ran (${warm.on.length} switches, ${warm.promoted} keys read back); offload median ${fmt(median(cold.off), 1)} / ${fmt(median(warm.off), 1)} ms`)
    console.log(`onload prefetched / not: median ${fmt(median(warm.on) / median(cold.on), 2)} x`)
  }

  // 2. Control overhead, local.
  if (parts.has('latency')) {
    const agent = await devAgent()
    await startJob(agent.client, agent.socketPath, 'lat', 3, 64)
    const local = await noopLatencies(agent.client, 'lat', latencyOps)
    console.log(`submit -> worker start, local (${local.length} noops): median ${fmt(median(local), 2)} ms, p99 ${fmt(percentile(local, 99), 2)} ms (goal median < 5 ms)`)
  }

  // 2b. Control overhead through the leader.
  if (parts.has('latency')) {
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
  if (parts.has('makespan')) {
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
