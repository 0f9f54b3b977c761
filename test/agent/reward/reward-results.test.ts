/**
 * Issue 27, item 2, live: results outlive the trainer's own agent. One
 * election server (the leader, running the workers) and two client agents;
 * a trainer submits 16 requests through n1, n1 receives all 16 results
 * (unfetched), and n1 is SIGKILLed. Through n2 the trainer then fetches every
 * result, and resubmitting the same ids is answered with the results.
 * Before, n2 answered 404 "not submitted through this agent" and the
 * resubmission "batch 0 ... has already completed".
 */
import t from 'tap'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { repoRoot } from '../../helpers/agent-process.ts'
import { waitForLeader } from '../../helpers/test-election.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'

const worker = ['python3', join(repoRoot, 'agent/reward/examples/reward-worker.py')]
const stages = [{ name: 'verify', resource: 'cpu', command: worker, coresPerWorker: 1, timeoutMs: 10_000 }]

t.test('results of a batch submitted through an agent that died are fetched and resubmitted through another', async t => {
  const mesh = await startTestMesh(t, {
    nodes: 3,
    clusterServers: 1,
    args: ['--set', `reward.stages=${JSON.stringify(stages)}`, '--set', 'reward.cpuCores=2', '--set', 'reward.workerStopGraceMs=1000'],
  })
  const [leader, n1, n2] = mesh.agents as [typeof mesh.agents[0], typeof mesh.agents[0], typeof mesh.agents[0]]
  const agreed = await waitForLeader(mesh.agents, mesh.agents, 30_000)
  t.equal(agreed.leaderId, leader.peerId, 'the server leads; n1 and n2 are clients')

  const size = 16
  const ids = Array.from({ length: size }, (_, i) => `code-0-${i}`)
  const payloadOf = (i: number): unknown => ({ stageMs: { verify: 20 }, reward: i / 100 })
  await n1.client.rewardBatchStart({ task: 'code', batch: 0, size })
  for (const [i, requestId] of ids.entries()) {
    const ack = await n1.client.rewardSubmit({ task: 'code', batch: 0, requestId, payload: payloadOf(i) })
    t.equal(ack.duplicate, false, `${requestId} acknowledged by n1`)
  }
  // n1 holds all 16 results; the trainer has fetched none of them.
  let local = (await n1.client.rewardStatus()).local
  for (const deadline = performance.now() + 60_000; local.done < size && performance.now() < deadline; await sleep(200)) local = (await n1.client.rewardStatus()).local
  t.match(local, { pending: 0, done: size }, 'n1 holds the 16 results')

  n1.proc.kill('SIGKILL')
  await n1.exited

  // Resubmitted first (never fetched): the answer carries the result.
  for (const [i, requestId] of ids.slice(0, 8).entries()) {
    const again = await n2.client.rewardSubmit({ task: 'code', batch: 0, requestId, payload: payloadOf(i) })
    t.match(again, { requestId, duplicate: true, result: { requestId, status: 'ok', reward: i / 100 } }, `${requestId} resubmitted through n2: answered with its result`)
  }
  for (const [i, requestId] of ids.entries()) {
    const answer = await n2.client.rewardResult(requestId, 5000).catch((err: Error) => err)
    t.match(answer, { state: 'done', result: { requestId, task: 'code', batch: 0, status: 'ok', reward: i / 100 } }, `${requestId} fetched through n2`)
  }
  t.match(await n2.client.rewardResult(ids[0]!, 0), { state: 'done', result: { reward: 0 } }, 'a repeated fetch gets it again')
  for (const [i, requestId] of ids.slice(8).entries()) {
    const again = await n2.client.rewardSubmit({ task: 'code', batch: 0, requestId, payload: payloadOf(i + 8) })
    t.match(again, { duplicate: true, result: { requestId, status: 'ok', reward: (i + 8) / 100 } }, `${requestId} resubmitted after the fetch: its result`)
  }

  t.match(await n2.client.rewardSubmit({ task: 'code', batch: 0, requestId: ids[0]!, payload: { other: true } }).catch((err: Error) => err),
    { code: 'ERR_REWARD_CONFLICT' }, 'the same id with another payload is refused')
  t.match(await n2.client.rewardResult('never-submitted', 0).catch((err: Error) => err), { code: 'ERR_NOT_FOUND' }, 'an id nobody submitted: not found')
  t.match(await n2.client.rewardSubmit({ task: 'code', batch: 0, requestId: 'code-0-extra', payload: {} }).catch((err: Error) => err),
    { code: 'ERR_BAD_REQUEST', message: /has already completed/ }, 'a new id in the completed batch is still refused')
})
