/**
 * Issue 27, item 1, live: a two-stage pipeline on one dev agent whose cores
 * hold fewer workers than the plan wants (stages `parse` and `verify`, 1 core
 * each, reward.cpuCores = 2, a first batch of 8). The plan must give both
 * stages a worker and say it is capacity-bound; every request completes.
 * Before, placement gave parse both cores and verify none: 0 of 8 done, for ever.
 */
import t from 'tap'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { agentctlMain, repoRoot, runNode } from '../../helpers/agent-process.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'
import type { ResultAnswer } from '../../../agent/reward/reward-submitter.ts'

const worker = ['python3', join(repoRoot, 'agent/reward/examples/reward-worker.py')]
const stages = ['parse', 'verify'].map(name => ({ name, resource: 'cpu', command: worker, coresPerWorker: 1, timeoutMs: 20_000 }))

t.test('two stages, 2 cores, a batch of 8: both stages get a worker and the batch completes', async t => {
  const mesh = await startTestMesh(t, {
    nodes: 1,
    args: ['--set', `reward.stages=${JSON.stringify(stages)}`, '--set', 'reward.cpuCores=2', '--set', 'reward.workerStopGraceMs=1000'],
  })
  const agent = mesh.agents[0]!
  for (const deadline = performance.now() + 30_000; !(await agent.client.leader().catch(() => undefined))?.acting;) {
    if (performance.now() > deadline) throw new Error('the dev agent does not lead')
    await sleep(100)
  }
  await agent.client.rewardBatchStart({ task: 'math', batch: 0, size: 8 })
  const ids = Array.from({ length: 8 }, (_, i) => `math-0-${i}`)
  for (const [i, requestId] of ids.entries()) {
    await agent.client.rewardSubmit({ task: 'math', batch: 0, requestId, payload: { stageMs: { parse: 100, verify: 100 }, reward: i / 10 } })
  }

  // The plan as the trainer's operator sees it, while the batch runs.
  let status = await agent.client.rewardStatus()
  for (const deadline = performance.now() + 20_000; status.plan?.capacity === undefined && performance.now() < deadline; await sleep(100)) {
    status = await agent.client.rewardStatus()
  }
  t.match(status.plan?.capacity, { bound: true, cpuCores: 2, shortBy: { parse: 7, verify: 7 }, waiting: [] }, 'the plan is capacity-bound: 16 workers wanted, 2 fit')
  t.same(status.plan?.wanted, { parse: 1, verify: 1 }, 'one worker for each stage')
  const printed = await runNode(agentctlMain, ['--socket', agent.socketPath, 'reward', 'status'])
  t.match(printed.stdout, /plan capacity-bound: wants 16 workers \(parse 8, verify 8\), 2 cores and 0 GPUs hold 2 \(parse 1, verify 1\): short by 14/, 'agentctl reward status says so')

  const results = new Map<string, ResultAnswer>()
  const began = performance.now()
  for (const id of ids) {
    for (;;) {
      const answer = await agent.client.rewardResult(id, 2000)
      if (answer.state === 'done') { results.set(id, answer); break }
      if (performance.now() - began > 40_000) break
    }
  }
  t.equal(results.size, 8, `all 8 requests done (${results.size} in ${Math.round(performance.now() - began)} ms)`)
  for (const [i, id] of ids.entries()) {
    const answer = results.get(id)
    t.match(answer, { state: 'done', result: { status: 'ok', reward: i / 10 } }, `${id}: ran both stages`)
    if (answer?.state === 'done') t.ok(answer.result.stageS[0]! > 0 && answer.result.stageS[1]! > 0, `${id}: time at both stages (${answer.result.stageS.join(', ')} s)`)
  }
})
