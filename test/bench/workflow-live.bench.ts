/**
 * Placement auto, live (mesh/control/jobs/workflow-layout.ts, job-groups.ts): predicted vs measured
 * iteration time of a workflow job laid out by the RLinf planner, run by real Python workers on a real
 * agent with 3 stand-in GPUs, for the disaggregated plan (rollout on 1 GPU, actor on 2, pipelined over
 * 4 group batches) and the collocated plan (both on 2 GPUs, switched through the StateManager). The
 * workers' operations last what the config's cost model gives (test/helpers/live-workflow.ts), so the
 * gap is the runtime's: dispatch, queueing, switches. Same-run baseline: the planner's formula applied
 * to the handlers' own measured durations (a runtime with no overhead at all).
 * Goal (issue: RLinf planner, item 6): measured within 15 % of predicted.
 *
 *   node_modules/.bin/node test/bench/workflow-live.bench.ts [--runs 3] [--iterations 6]
 */
import { parseArgs } from 'node:util'
import { spawnAgent, tempDir } from '../helpers/agent-process.ts'
import { fakeGpus, liveJobSpec, startTrainer } from '../helpers/live-workers.ts'
import { reasoningConfig, runWorkflow, type Layout } from '../helpers/live-workflow.ts'
import { torchSkipReason } from '../helpers/python.ts'
import type { OpAnswer } from '../../agent/api/wire/workers.ts'
import { median } from './bench-stats.ts'

const { values } = parseArgs({ options: { runs: { type: 'string', default: '3' }, iterations: { type: 'string', default: '6' } } })
const runs = Number(values.runs)
const iterations = Number(values.iterations)
const skip = torchSkipReason()
if (skip !== false) { console.log(`workflow-live not run: ${skip}`); process.exit(0) }

const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const plans = [
  { name: 'disaggregated', gpus: 3, config: reasoningConfig(3, 8) },
  { name: 'collocated', gpus: 2, config: reasoningConfig(2, 1) },
]
const batches = 4

/** The planner's iteration formula over the handlers' measured durations (median per component). */
function idealS (layout: Layout, answers: OpAnswer[]): number {
  const b = (component: string): number => median(answers.filter(a => a.job.endsWith(`.${component}`)).flatMap(a => a.ranks.map(r => r.durationMs))) / 1000
  const [r, a] = [b('rollout'), b('actor')]
  return layout.mode === 'disaggregated' ? r + a + Math.max(r, a) * (batches - 1) : batches * (r + a)
}

try {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `inventory.gpus=${fakeGpus(3)}`] })
  for (const plan of plans) {
    const measured: number[] = []; const ideal: number[] = []; let predicted = 0
    for (let run = 0; run < runs; run++) {
      const id = `${plan.name}-${run}`
      const { job } = await agent.client.submitJob({ ...liveJobSpec(id, { gpusPerNode: plan.gpus }), placement: 'auto', workflow: plan.config })
      const layout = job.spec.layout as Layout
      if (layout.mode !== plan.name) throw new Error(`${plan.name} config planned ${layout.mode}`)
      predicted = layout.iterationS
      await Promise.all(layout.groups.flatMap(g => Array.from({ length: g.gpus[1] - g.gpus[0] }, async (_, rank) =>
        await startTrainer(t, agent.socketPath, { job: `${id}.${g.component}`, rank, gpu: (g.gpus[0] + rank) % plan.gpus, seed: 1 }))))
      const answers = await runWorkflow(agent.client, id, layout, plan.config, iterations, `r${run}`)
      const top = (await agent.client.jobsTop()).workflows.find(w => w.job === id)!
      measured.push(top.measuredIterationS!)
      ideal.push(idealS(layout, answers))
      await agent.client.completeJob(id)
    }
    const m = median(measured)
    console.log(`${plan.name}: predicted ${predicted.toFixed(3)} s, measured median ${m.toFixed(3)} s (${measured.map(x => x.toFixed(3)).join(', ')}) over ${iterations} iterations × ${runs} runs; measured/predicted ${(m / predicted).toFixed(3)} (goal within 15 %); no-overhead baseline median ${median(ideal).toFixed(3)} s, measured/baseline ${(m / median(ideal)).toFixed(3)}`)
  }
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
