/**
 * Issue 27, item 6, live: a worker started outside the agent's supervisor
 * (the example worker run by hand with --external) registers for a stage,
 * is planned and served like a supervised one, and is known by its process:
 * another process cannot fetch with its worker id, and when it dies it is
 * gone from the agent's workers. Bad registrations are coded 4xx.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { repoRoot } from '../../helpers/agent-process.ts'
import { python } from '../../helpers/python.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'

const worker = join(repoRoot, 'agent/reward/examples/reward-worker.py')
const stages = [{ name: 'verify', resource: 'cpu', command: [python, worker], coresPerWorker: 1, timeoutMs: 20_000 }]

t.test('an external worker registers, serves its stage, is known by its process, and is gone when it dies', async t => {
  const mesh = await startTestMesh(t, { nodes: 1, args: ['--set', `reward.stages=${JSON.stringify(stages)}`, '--set', 'reward.cpuCores=1', '--set', 'reward.workerStopGraceMs=1000'] })
  const agent = mesh.agents[0]!
  for (const deadline = performance.now() + 60_000; !(await agent.client.leader().catch(() => undefined))?.acting; await sleep(100)) {
    if (performance.now() > deadline) throw new Error(`the dev agent does not lead:\n${agent.output()}`)
  }
  for (const [body, message] of [[{ stage: 'judge' }, /unknown stage "judge"; the stages are verify/], [{ stage: 'verify', slots: 0 }, /slots/], [{ stage: 'verify', extra: 1 }, /extra/]] as const) {
    await t.rejects(agent.client.call('POST', '/v1/reward/workers', body), { code: 'ERR_BAD_REQUEST', message }, JSON.stringify(body))
  }

  // This test process registers itself: twice the same answers the same ids, other slots are refused, leave ends it.
  const mine = await agent.client.call<{ stage: string, workerIds: string[] }>('POST', '/v1/reward/workers', { stage: 'verify', slots: 2 })
  t.same(mine.workerIds, [0, 1].map(k => `${mine.workerIds[0]!.replace(/-0$/, '')}-${k}`), 'one id per slot')
  t.same(await agent.client.call('POST', '/v1/reward/workers', { stage: 'verify', slots: 2 }), mine, 'registering again answers the same ids')
  await t.rejects(agent.client.call('POST', '/v1/reward/workers', { stage: 'verify', slots: 3 }), { code: 'ERR_BAD_REQUEST', message: /registered already.*leave first/ })
  t.same(await agent.client.call('POST', '/v1/reward/workers/leave', {}), { workerIds: mine.workerIds }, 'leave ends its slots')
  t.notOk((await agent.client.rewardStatus()).local.workers.some(w => mine.workerIds.includes(w.workerId)), 'gone from the agent\'s workers')

  const external = spawn(python, [worker, '--external', 'verify'], { env: { ...process.env, AGENTD_SOCKET: agent.socketPath }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { if (external.exitCode === null) external.kill('SIGKILL') })
  let stderr = ''
  external.stderr!.on('data', (c: Buffer) => { stderr += c.toString() })
  const workerId = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the external worker did not register:\n${stderr}`)), 30_000)
    createInterface({ input: external.stdout! }).on('line', line => { const m = /^registered as (\S+)$/.exec(line); if (m !== null) { clearTimeout(timer); resolve(m[1]!) } })
  })
  t.match(workerId, /\/verify\/ext-\d+-0$/, 'one worker id for its one slot')
  let local = (await agent.client.rewardStatus()).local.workers
  t.match(local.find(w => w.workerId === workerId), { state: 'external', pid: external.pid }, 'listed with its process')
  await t.rejects(agent.client.call('POST', '/v1/reward/work/fetch', { workerId, waitMs: 0 }), { code: 'ERR_FORBIDDEN', message: /only the worker's own process/ }, 'another process cannot fetch with its id')

  const size = 8
  await agent.client.rewardBatchStart({ task: 'ext', batch: 0, size })
  for (let i = 0; i < size; i++) await agent.client.rewardSubmit({ task: 'ext', batch: 0, requestId: `ext-0-${i}`, payload: { stageMs: { verify: 150 } } })
  const servedBy: string[] = []
  for (let i = 0; i < size; i++) {
    const r = await agent.client.rewardResult(`ext-0-${i}`, 20_000)
    t.match(r, { state: 'done', result: { status: 'ok' } }, `request ${i}`)
    if (r.state === 'done') servedBy.push((r.result.output as { worker: string }).worker)
  }
  t.ok(servedBy.includes(workerId), `the external worker served requests (${servedBy.filter(w => w === workerId).length} of ${size})`)

  external.kill('SIGKILL')
  for (const deadline = performance.now() + 10_000; local.some(w => w.workerId === workerId) && performance.now() < deadline; await sleep(100)) {
    local = (await agent.client.rewardStatus()).local.workers
  }
  t.notOk(local.some(w => w.workerId === workerId), 'gone once its process died')
})
