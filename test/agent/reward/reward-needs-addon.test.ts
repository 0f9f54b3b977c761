// Without the native addon the agent cannot tell its workers' processes apart (SO_PEERCRED): the reward
// service is not started and says why, instead of starting workers whose every fetch is refused while
// their requests wait for ever (what happened before it required the addon).
import t from 'tap'
import { join } from 'node:path'
import { repoRoot, spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { python } from '../../helpers/python.ts'

t.test('an agent whose native addon is missing skips the reward service, naming the addon; nothing is started or held', async t => {
  const dir = tempDir(t)
  const stages = [{ name: 'verify', resource: 'cpu', command: [python, join(repoRoot, 'agent/reward/examples/reward-worker.py')], coresPerWorker: 1, timeoutMs: 10_000 }]
  const agent = await spawnAgent(t, {
    stateDir: dir,
    args: ['--dev', '--state-dir', dir, '--set', `reward.stages=${JSON.stringify(stages)}`, '--set', 'state.enabled=false', '--set', 'weights.enabled=false'],
    env: { AGENTD_NATIVE_ADDON: '/nonexistent/agentd_native.node' },
  })
  const status = await agent.client.status() as { subsystems: Array<{ id: string, state: string, reason?: string, error?: string }> }
  t.match(status.subsystems.find(s => s.id === 'native'), { state: 'failed' })
  t.match(status.subsystems.find(s => s.id === 'reward'), { state: 'skipped', reason: /requires native/ })
  await t.rejects(agent.client.rewardBatchStart({ task: 'math', batch: 0, size: 4 }), { code: 'ERR_UNAVAILABLE', message: /reward/ })
  t.notMatch(agent.output(), /reward worker started/, 'no worker was started')
})
