/**
 * Issue 27, item 3, live: the planner's history survives a leader change,
 * here the same dev agent elected again after a restart (the case that shows
 * it is not kept in the leader's memory). Batch 0 of task `math` completes;
 * the agent restarts; the next batch is planned from batch 0's history (one
 * worker: the deadline is generous) instead of as a cold start (one worker
 * per request). Before, the restarted leader knew no history: it planned 8
 * workers for the batch of 8 and listed no history for the task.
 */
import t from 'tap'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { repoRoot } from '../../helpers/agent-process.ts'
import { startTestMesh, type MeshAgent } from '../../helpers/test-mesh.ts'

const worker = ['python3', join(repoRoot, 'agent/reward/examples/reward-worker.py')]
const stages = [{ name: 'verify', resource: 'cpu', command: worker, coresPerWorker: 1, timeoutMs: 20_000 }]
const size = 8

async function waitActing (agent: MeshAgent): Promise<void> {
  for (const deadline = performance.now() + 60_000; !(await agent.client.leader().catch(() => undefined))?.acting;) {
    if (performance.now() > deadline) throw new Error(`the dev agent does not lead:\n${agent.output()}`)
    await sleep(100)
  }
}

t.test('after a leader change the next batch is planned from its task\'s history, not as a cold start', async t => {
  // D = 60 s: with history, one worker meets every deadline; without, the planner sizes a batch at its size.
  const args = ['--set', `reward.stages=${JSON.stringify(stages)}`, '--set', 'reward.cpuCores=2', '--set', 'reward.workerStopGraceMs=1000', '--set', 'reward.maxExtraDelayMs=60000']
  const mesh = await startTestMesh(t, { nodes: 1, args })
  const first = mesh.agents[0]!
  await waitActing(first)

  await first.client.rewardBatchStart({ task: 'math', batch: 0, size })
  for (let i = 0; i < size; i++) await first.client.rewardSubmit({ task: 'math', batch: 0, requestId: `math-0-${i}`, payload: { stageMs: { verify: 20 }, reward: 1 } })
  for (let i = 0; i < size; i++) t.match(await first.client.rewardResult(`math-0-${i}`, 20_000), { state: 'done', result: { status: 'ok' } })
  let status = await first.client.rewardStatus()
  for (const deadline = performance.now() + 10_000; status.tasks.find(x => x.task === 'math')?.completedBatches !== 1 && performance.now() < deadline; await sleep(100)) {
    status = await first.client.rewardStatus()
  }
  t.match(status.tasks, [{ task: 'math', completedBatches: 1, historyRequests: size }], 'batch 0 is the history of task math')

  // The same agent, elected again: a new epoch, a new proxy.
  first.proc.kill('SIGTERM')
  await first.exited
  const again = await mesh.addAgent({ name: first.name, stateDir: join(mesh.dir, first.name), args })
  await waitActing(again)
  status = await again.client.rewardStatus()
  t.match(status.tasks, [{ task: 'math', historyRequests: size }], 'the new leader starts from the history')

  await again.client.rewardBatchStart({ task: 'math', batch: 1, size })
  for (const deadline = performance.now() + 20_000; (status.plan?.capacity?.unconstrained.verify ?? 0) === 0; await sleep(100)) {
    if (performance.now() > deadline) throw new Error(`batch 1 was not planned: ${JSON.stringify(status)}`)
    status = await again.client.rewardStatus()
  }
  t.same(status.plan?.capacity?.unconstrained, { verify: 1 }, 'planned from history: one worker, not one per request')
  t.same(status.plan?.wanted, { verify: 1 })
})
