/**
 * agentctl sim seeding: RLBoost's adaptive partial response seeding
 * (Algorithm 1) over many steps in simulated time (mesh/sim/seeding-sim.ts),
 * under an availability of remote instances that changes between steps:
 * the full algorithm, without its scheduler memory, and without seeding,
 * side by side (the paper's Figure 12 ablation). Local; no agent needed.
 */
import { simulateSeeding, type SeedingSimResult, type SeedingVariant } from '../../mesh/sim/seeding-sim.ts'
import { UsageError, type Command } from './command.ts'
import { choiceFlag, integerFlag, numberFlag } from './flags.ts'
import { formatTable } from './table.ts'

const name = 'sim seeding'
const variants = ['full', 'no-memory', 'no-seeding'] as const
/** Default availability: one instance of six left after preemptions, back to three, six, preempted again, …  */
const defaultAvailability = '1x6,3x4,6x4,1x4,3x4,6x4,2x4,6x4'

/** "COUNTxSTEPS,…" as one count per step; UsageError naming the bad item. */
export function parseAvailability (text: string): number[] {
  const out: number[] = []
  for (const item of text.split(',')) {
    const m = /^\s*(\d+)\s*x\s*(\d+)\s*$/.exec(item)
    if (m === null || Number(m[2]) < 1) throw new UsageError(`${name}: --available takes COUNTxSTEPS items ("1x6,3x4"), got "${item}"`)
    out.push(...Array.from({ length: Number(m[2]) }, () => Number(m[1])))
  }
  if (out.length > 10_000) throw new UsageError(`${name}: --available lists ${out.length} steps; at most 10000`)
  return out
}

export const simSeedingCommand: Command = {
  summary: 'simulate adaptive response seeding (RLBoost Algorithm 1) over many steps: full, without memory, without seeding (local, no agent)',
  usage: '[--available COUNTxSTEPS,...] [--requests N] [--mean-tokens T] [--max-tokens T] [--train-ms-per-response MS] [--microbatch B] [--reserved N] [--eta E] [--initial-seed-s S] [--seed S] [--variant full|no-memory|no-seeding|all] [--per-step]',
  options: {
    available: { type: 'string', value: 'COUNTxSTEPS,...', description: `remote instances available per step, e.g. 1x6,3x4: one for six steps, then three for four (default ${defaultAvailability})` },
    requests: { type: 'string', value: 'N', description: 'requests per step (default 512)' },
    'mean-tokens': { type: 'string', value: 'T', description: 'mean response length, long-tailed (default 400)' },
    'max-tokens': { type: 'string', value: 'T', description: 'max_tokens of every request (default 1024)' },
    'train-ms-per-response': { type: 'string', value: 'MS', description: 'training time per response on the training cluster (default 30)' },
    microbatch: { type: 'string', value: 'B', description: 'responses per training microbatch (default 32)' },
    reserved: { type: 'string', value: 'N', description: 'N_resv: rollout engines of the training cluster during its window (default 4)' },
    eta: { type: 'string', value: 'E', description: 'η: adaptation rate of the window (default 2; larger adapts more slowly)' },
    'initial-seed-s': { type: 'string', value: 'S', description: 'T_init: the first window, seconds (default 10)' },
    seed: { type: 'string', value: 'S', description: 'random seed of the response lengths (default 1)' },
    variant: { type: 'string', description: 'which to run (default all)', complete: [...variants, 'all'] },
    'per-step': { type: 'boolean', description: 'also list every step: instances used, window, step time, idle times' },
  },
  examples: [
    { what: 'the ablation on the default availability changes', run: 'agentctl sim seeding' },
    { what: 'steady scarcity, per step', run: 'agentctl sim seeding --available 1x20 --variant full --per-step' },
  ],
  async run ({ values }) {
    const available = parseAvailability(typeof values.available === 'string' ? values.available : defaultAvailability)
    const variant = choiceFlag(name, values.variant, 'variant', [...variants, 'all'], 'all')
    const options = {
      steps: available.length,
      available,
      requestsPerStep: integerFlag(name, values.requests, 'requests', 1, 512),
      meanResponseTokens: numberFlag(name, values['mean-tokens'], 'mean-tokens', 1, 400),
      maxTokens: integerFlag(name, values['max-tokens'], 'max-tokens', 1, 1024),
      trainSPerResponse: numberFlag(name, values['train-ms-per-response'], 'train-ms-per-response', 0.001, 30) / 1000,
      microbatch: integerFlag(name, values.microbatch, 'microbatch', 1, 32),
      seeding: { reservedEngines: integerFlag(name, values.reserved, 'reserved', 1, 4), eta: numberFlag(name, values.eta, 'eta', 0.001, 2), minSeedS: 0, maxSeedS: 3600 },
      initialSeedS: numberFlag(name, values['initial-seed-s'], 'initial-seed-s', 0, 10),
      seed: integerFlag(name, values.seed, 'seed', 0, 1),
      engine: { decodeStepMs: 20, decodeMsPerSeq: 0.25, prefillMsPerToken: 0.05, kvCapacityTokens: 65_536, maxRunning: 256 },
    }
    const results: SeedingSimResult[] = (variant === 'all' ? variants : [variant] as SeedingVariant[]).map(v => simulateSeeding({ ...options, variant: v }))
    const full = results.find(r => r.variant === 'full')
    const rows = results.map(r => [r.variant, r.throughput.toFixed(2), full !== undefined ? (r.throughput / full.throughput).toFixed(2) : '-', (100 * r.trainIdleShare).toFixed(0), (100 * r.remoteUtilization).toFixed(0),
      (r.steps.reduce((n, s) => n + s.stepS, 0) / r.steps.length).toFixed(1)])
    const perStep = values['per-step'] === true
      ? results.map(r => `${r.variant}\n${formatTable(['STEP', 'AVAILABLE', 'USED', 'SEED_S', 'STEP_S', 'TRAIN_WAIT_S', 'REMOTE_WAIT_S'], r.steps.map(s => [String(s.step), String(s.available), String(s.remote), s.seedS.toFixed(1), s.stepS.toFixed(1), s.trainWaitS.toFixed(1), s.remoteWaitS.toFixed(1)]))}`)
      : []
    return {
      json: results,
      human: [
        `${available.length} steps of ${options.requestsPerStep} requests; remote instances available: ${values.available ?? defaultAvailability}`,
        formatTable(['VARIANT', 'RESPONSES_PER_S', 'VS_FULL', 'TRAIN_IDLE_%', 'REMOTE_UTIL_%', 'MEAN_STEP_S'], rows),
        ...perStep,
      ].join('\n\n'),
    }
  },
}
