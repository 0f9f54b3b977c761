/**
 * Rollout on preemptible instances (RLBoost §4.2, §6): a step of generation requests over six
 * engine-double processes (test/helpers/engine-double.ts: continuous batching, long-tailed lengths),
 * run by the rollout step (mesh/control/rollout/rollout-step.ts).
 *
 * 1. Preemption: three of the six instances SIGKILLed early (at 20 % of the undisturbed step time) or
 *    mid-step (50 %). Step-time overhead over the undisturbed step, with token-level migration (the
 *    moved requests go on from their tokens) and with recompute (from their prompts), measured in the
 *    same run. The paper: migration cuts the overhead by 33 % (early) to 76 % (mid-step).
 * 2. Balancing: the same requests under Algorithm 2 (delayed dispatch + continuous balancing),
 *    join-the-shortest-queue and round-robin, no preemption.
 * 3. Each live figure beside the simulator's prediction for the same engines and requests
 *    (mesh/sim/rollout-sim.ts, the same policy code): live / simulated.
 * Each figure is the median of --runs; every run starts fresh engines, and every response is checked
 * token for token against an uninterrupted generation.
 *
 * --through-agents: the product's path. Three agents in a mesh (separate processes); the six engines
 * are registered with them (two each) and every step is run by a trainer through its agent's API
 * (POST /v1/rollout/steps), which finds the instances in its mesh view. The direct figures are measured
 * in the same run as the baseline (agents / direct).
 *
 *   node_modules/.bin/node test/bench/rollout-preemption.bench.ts [--runs 3] [--requests 96] [--max-tokens 1000] [--decode-step-ms 5] [--through-agents]
 */
import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnEngineDouble, tokenize, uninterrupted } from '../helpers/engine-double.ts'
import { startRolloutStep, type RolloutInstance, type RolloutRequest, type RolloutStepOptions, type RolloutStepResult } from '../../mesh/control/rollout/rollout-step.ts'
import { simulateRolloutStep, type SimEngine } from '../../mesh/sim/rollout-sim.ts'
import { median } from './bench-stats.ts'
import { startTestMesh, type TestMesh } from '../helpers/test-mesh.ts'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    requests: { type: 'string', default: '96' },
    'max-tokens': { type: 'string', default: '1000' },
    'decode-step-ms': { type: 'string', default: '5' },
    'eos-every': { type: 'string', default: '250' },
    'through-agents': { type: 'boolean', default: false },
  },
})
const runs = Number(values.runs)
const maxTokens = Number(values['max-tokens'])
const eosEvery = Number(values['eos-every'])
const engineArgs = ['--decode-step-ms', values['decode-step-ms'], '--decode-ms-per-seq', '0.3', '--prefill-ms-per-token', '0.02', '--kv-capacity-tokens', '32768', '--eos-every', String(eosEvery)]
const requests: RolloutRequest[] = Array.from({ length: Number(values.requests) }, (_, i) => ({
  id: `r${i}`, prompt: Array.from({ length: 100 + (i * 37) % 300 }, (_, k) => `t${(i * 7919 + k * 104_729) % 30_000}`).join(' '), maxTokens,
}))
const expected = requests.map(r => uninterrupted(r.prompt, r.maxTokens, eosEvery).text)
const lengths = expected.map(e => tokenize(e).length).sort((a, b) => a - b)
/** The simulator's step time for the same six engines (three preempted at `killAtS`) and requests. */
const simulated = (options: Partial<RolloutStepOptions>, killAtS?: number): number => {
  const engines: SimEngine[] = Array.from({ length: 6 }, (_, i) => ({
    id: `e${i}`, decodeStepMs: Number(values['decode-step-ms']), decodeMsPerSeq: 0.3, prefillMsPerToken: 0.02, kvCapacityTokens: 32_768, maxRunning: 256,
    ...(killAtS !== undefined && i < 3 ? { preemptAtS: killAtS } : {}),
  }))
  const simRequests = requests.map((r, i) => ({ id: r.id, promptTokens: tokenize(r.prompt).length, maxTokens: r.maxTokens, responseTokens: tokenize(expected[i]!).length }))
  return simulateRolloutStep(engines, simRequests, { balancer: options.balancer ?? 'rlboost', resume: options.resume ?? 'tokens', maxPending: 4, rebalanceIntervalMs: 200, plateau: null }).stepS * 1000
}
const vsSim = (liveMs: number, simMs: number): string => `simulated ${fmt(simMs)}, live/sim ${(liveMs / simMs).toFixed(2)}`
console.log(`${requests.length} requests, response lengths: median ${lengths[lengths.length >> 1]}, p90 ${lengths[Math.floor(lengths.length * 0.9)]}, max ${lengths.at(-1)} tokens (max_tokens ${maxTokens})`)

async function engines (n: number): Promise<Array<RolloutInstance & { kill(): void }>> {
  return await Promise.all(Array.from({ length: n }, async (_, i) => await spawnEngineDouble({ teardown: () => {} }, `e${i}`, engineArgs)))
}

const teardowns: Array<() => unknown> = []
process.once('exit', () => { for (const f of teardowns.reverse()) void f() })
/** The agents of --through-agents: the trainer's is the first. */
const mesh: TestMesh | undefined = values['through-agents'] ? await startTestMesh({ teardown: f => { teardowns.push(f) } }, { nodes: 3 }) : undefined

/** Registers the engines with the agents (two each; the same ids replace the last run's) and waits until the trainer's agent sees every one. */
async function registered (m: TestMesh, es: RolloutInstance[]): Promise<void> {
  await Promise.all(es.map(async (e, i) => await m.agents[i % 3]!.client.rolloutRegister({ id: `e${i >> 1}`, url: e.url, model: 'double' })))
  const urls = new Set(es.map(e => e.url))
  for (const deadline = performance.now() + 30_000; ;) {
    const seen = (await m.agents[0]!.client.rollout()).cluster.filter(i => urls.has(i.url)).length
    if (seen === urls.size) return
    if (performance.now() > deadline) throw new Error(`the trainer's agent sees ${seen} of the ${urls.size} engines`)
    await sleep(50)
  }
}

async function step (options: Partial<RolloutStepOptions>, killAtMs?: number, through?: TestMesh): Promise<Pick<RolloutStepResult, 'responses' | 'stepMs'>> {
  const es = await engines(6)
  try {
    if (through !== undefined) await registered(through, es)
    const began = performance.now()
    const done = through !== undefined
      ? through.agents[0]!.client.rolloutStep({ requests, options: { maxPending: 4, ...options } }).then(a => ({ ...a, stepMs: performance.now() - began }))
      : startRolloutStep(requests, es, { maxPending: 4, ...options }).done
    if (killAtMs !== undefined) void sleep(killAtMs).then(() => { for (const e of es.slice(0, 3)) e.kill() })
    const r = await done
    const wrong = r.responses.filter((x, i) => x.text !== expected[i]).length
    if (wrong > 0) throw new Error(`${wrong} responses differ from an uninterrupted generation`)
    return r
  } finally {
    for (const e of es) e.kill()
  }
}

const fmt = (ms: number): string => `${(ms / 1000).toFixed(2)} s`
const stepMs = async (options: Partial<RolloutStepOptions>, killAtMs?: number, through?: TestMesh): Promise<number[]> => {
  const out: number[] = []
  for (let i = 0; i < runs; i++) out.push((await step(options, killAtMs, through)).stepMs)
  return out
}

const undisturbed = median(await stepMs({}))
console.log(`undisturbed step (Algorithm 2, 6 instances): median ${fmt(undisturbed)} (${vsSim(undisturbed, simulated({}))})`)
for (const [label, at] of [['early (20 %)', 0.2], ['mid-step (50 %)', 0.5]] as const) {
  const migrate = median(await stepMs({ resume: 'tokens' }, at * undisturbed))
  const recompute = median(await stepMs({ resume: 'recompute' }, at * undisturbed))
  const overMigrate = migrate - undisturbed
  const overRecompute = recompute - undisturbed
  console.log(`3 of 6 preempted ${label}: migrate median ${fmt(migrate)} (+${fmt(overMigrate)}; ${vsSim(migrate, simulated({ resume: 'tokens' }, at * undisturbed / 1000))}), recompute median ${fmt(recompute)} (+${fmt(overRecompute)}; ${vsSim(recompute, simulated({ resume: 'recompute' }, at * undisturbed / 1000))}); migration cuts the overhead by ${(100 * (1 - overMigrate / overRecompute)).toFixed(0)} % (paper: 33 % early, 76 % mid-step)`)
}
const balanced: Array<[RolloutStepOptions['balancer'], number]> = []
for (const balancer of ['rlboost', 'jsq', 'round-robin'] as const) balanced.push([balancer, median(await stepMs({ balancer }))])
console.log(`balancing, no preemption: ${balanced.map(([b, ms]) => `${b} median ${fmt(ms)} (${vsSim(ms, simulated({ balancer: b }))})`).join(', ')}; Algorithm 2 vs JSQ ${(balanced[1]![1] / balanced[0]![1]).toFixed(2)}x, vs round-robin ${(balanced[2]![1] / balanced[0]![1]).toFixed(2)}x`)

if (mesh !== undefined) {
  // The product's path against the direct step, in the same run: what the agents' API, the mesh view
  // and the instance registry cost on top of the step runner.
  const viaAgents = median(await stepMs({}, undefined, mesh))
  console.log(`through agents (3 agents, trainer's agent runs the step): undisturbed median ${fmt(viaAgents)}, agents/direct ${(viaAgents / undisturbed).toFixed(2)}x (${vsSim(viaAgents, simulated({}))})`)
  for (const [label, at] of [['early (20 %)', 0.2], ['mid-step (50 %)', 0.5]] as const) {
    const migrate = median(await stepMs({ resume: 'tokens' }, at * undisturbed, mesh))
    const recompute = median(await stepMs({ resume: 'recompute' }, at * undisturbed, mesh))
    console.log(`through agents, 3 of 6 preempted ${label}: migrate median ${fmt(migrate)} (+${fmt(migrate - viaAgents)}), recompute median ${fmt(recompute)} (+${fmt(recompute - viaAgents)}); migration cuts the overhead by ${(100 * (1 - (migrate - viaAgents) / (recompute - viaAgents))).toFixed(0)} %`)
  }
}
process.exit(0)
