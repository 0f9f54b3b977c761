/**
 * Issue 27, item 8: a SIGTERM to an agent with live reward workers stops it
 * gracefully. The workers get SIGTERM and, if they do not exit, SIGKILL after
 * reward.workerStopGraceMs (2 s here, 5 s by default); the agent's own shutdown grace
 * must outlast that. Before, a dev agent's shutdown grace equalled the
 * workers' stop grace (5 s), so such a stop always ended in "graceful stop
 * took too long: forcing exit" (exit code 1) instead of a clean exit.
 */
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { tempDir } from '../../helpers/agent-process.ts'
import { startTestMesh } from '../../helpers/test-mesh.ts'

t.test('SIGTERM with a worker that ignores it: the worker is killed after its grace and the agent exits cleanly', async t => {
  // A worker that ignores SIGTERM (a reward model still finishing a long request): it is killed after the grace.
  // It writes `ready` once it ignores SIGTERM (a SIGTERM before that, while Python starts, would simply end it).
  const ready = join(tempDir(t), 'ready')
  const stubborn = ['python3', '-c', `import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nopen(${JSON.stringify(ready)}, "w").close()\nwhile True: time.sleep(1)`]
  const stages = [{ name: 'judge', resource: 'cpu', command: stubborn, coresPerWorker: 1, timeoutMs: 60_000 }]
  const mesh = await startTestMesh(t, { nodes: 1, args: ['--set', `reward.stages=${JSON.stringify(stages)}`, '--set', 'reward.cpuCores=1', '--set', 'reward.workerStopGraceMs=2000'] })
  const agent = mesh.agents[0]!
  for (const deadline = performance.now() + 60_000; !(await agent.client.leader().catch(() => undefined))?.acting; await sleep(100)) {
    if (performance.now() > deadline) throw new Error(`the dev agent does not lead:\n${agent.output()}`)
  }
  await agent.client.rewardBatchStart({ task: 't', batch: 0, size: 1 })
  await agent.client.rewardSubmit({ task: 't', batch: 0, requestId: 't-0-0', payload: {} })
  for (const deadline = performance.now() + 30_000; !existsSync(ready); await sleep(100)) {
    if (performance.now() > deadline) throw new Error(`no reward worker started:\n${agent.output()}`)
  }
  const t0 = performance.now()
  agent.proc.kill('SIGTERM')
  const exit = await agent.exited
  const tookMs = performance.now() - t0
  t.same(exit, { code: 0, signal: null }, 'the agent exited cleanly')
  t.notMatch(agent.output(), /graceful stop took too long/, 'not forced out')
  t.ok(tookMs >= 1800, `the worker had its stop grace before it was killed (stopped after ${Math.round(tookMs)} ms)`)
})
