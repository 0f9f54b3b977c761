/**
 * agentctl sim rollout --trace F: one rollout step (mesh/sim/rollout-trace.ts)
 * in simulated time under the balancers and resume modes asked for, side by
 * side: step time, requests moved, tokens generated against kept. Runs
 * locally; no agent needed.
 */
import { simulateRolloutStep, type RolloutSimOptions, type RolloutSimResult } from '../../mesh/sim/rollout-sim.ts'
import { parseRolloutTrace } from '../../mesh/sim/rollout-trace.ts'
import { UsageError, type Command } from './command.ts'
import { choiceFlag, integerFlag, readInputFile } from './flags.ts'
import { formatTable } from './table.ts'

const name = 'sim rollout'
const balancers = ['rlboost', 'jsq', 'round-robin'] as const
const resumes = ['tokens', 'recompute'] as const

export const simRolloutCommand: Command = {
  summary: 'simulate a rollout step: Algorithm 2 vs JSQ vs round-robin, migration vs recompute (local, no agent)',
  usage: '--trace F [--balancer rlboost|jsq|round-robin|all] [--resume tokens|recompute|all] [--max-pending N] [--rebalance-ms N] [--plateau B]',
  options: {
    trace: { type: 'string', value: 'F', description: 'the rollout trace, JSON (mesh/sim/rollout-trace.ts; agentctl sim trace rollout makes one)', complete: 'file' },
    balancer: { type: 'string', description: 'rlboost (RLBoost Algorithm 2: delayed dispatch and continuous balancing), jsq, round-robin, or all (default all)', complete: [...balancers, 'all'] },
    resume: { type: 'string', description: 'a moved request goes on from its tokens (tokens) or from its prompt (recompute), or all (default all)', complete: [...resumes, 'all'] },
    'max-pending': { type: 'string', value: 'N', description: 'Θ: requests per engine sent and not yet producing tokens, at most (rlboost; default 4)' },
    'rebalance-ms': { type: 'string', value: 'N', description: 'the balancing period (rlboost; default 200; 0 = off)' },
    plateau: { type: 'string', value: 'B', description: 'the batch size where throughput plateaus, from a previous step: executing requests beyond it move to idle engines (rlboost; default: none, only queued requests move)' },
  },
  examples: [
    { what: 'all balancers and resume modes on a generated trace', run: 'agentctl sim rollout --trace rollout.json' },
    { what: 'migration against recompute under Algorithm 2, as JSON', run: 'agentctl sim rollout --trace rollout.json --balancer rlboost --json' },
  ],
  async run ({ values }) {
    const file = values.trace
    if (typeof file !== 'string') throw new UsageError(`${name}: --trace F is required (a file from \`agentctl sim trace rollout\`)`)
    const balancer = choiceFlag(name, values.balancer, 'balancer', [...balancers, 'all'], 'all')
    const resume = choiceFlag(name, values.resume, 'resume', [...resumes, 'all'], 'all')
    const base = {
      maxPending: integerFlag(name, values['max-pending'], 'max-pending', 1, 4),
      rebalanceIntervalMs: integerFlag(name, values['rebalance-ms'], 'rebalance-ms', 0, 200),
      plateau: values.plateau === undefined ? null : integerFlag(name, values.plateau, 'plateau', 1),
    }
    const trace = parseRolloutTrace(await readInputFile(file, 'trace file'), file)
    const runs: Array<{ balancer: RolloutSimOptions['balancer'], resume: RolloutSimOptions['resume'], result: RolloutSimResult }> = []
    for (const b of balancer === 'all' ? balancers : [balancer]) {
      for (const r of resume === 'all' ? resumes : [resume]) {
        runs.push({ balancer: b, resume: r, result: simulateRolloutStep(trace.engines, trace.requests, { ...base, balancer: b, resume: r }) })
      }
    }
    const json = runs.map(x => ({ balancer: x.balancer, resume: x.resume, stepS: x.result.stepS, moves: x.result.moves, generatedTokens: x.result.generatedTokens, keptTokens: x.result.keptTokens }))
    const rows = runs.map(x => [x.balancer, x.resume, x.result.stepS.toFixed(2), String(x.result.moves.lost), String(x.result.moves.pending + x.result.moves.executing), String(x.result.generatedTokens), String(x.result.generatedTokens - x.result.keptTokens)])
    const preempted = trace.engines.filter(e => e.preemptAtS !== undefined).length
    const head = `${trace.requests.length} requests on ${trace.engines.length} engines${preempted > 0 ? `, ${preempted} preempted` : ''}`
    return { json, human: `${head}\n\n${formatTable(['BALANCER', 'RESUME', 'STEP_S', 'MOVED_LOST', 'MOVED_BALANCE', 'TOKENS', 'WASTED'], rows)}` }
  },
}
