// Decision kinds owned by a subsystem (leader-service.ts `kinds`): the API's generic route
// (POST /v1/leader/decisions) refuses them, so one call cannot replace the acknowledged job table or
// the leader's own record; payloads of the kinds it takes are bounded. On a real dev agent.
import t from 'tap'
import { spawnAgent, tempDir, untilActing } from '../../helpers/agent-process.ts'

t.test('POST /v1/leader/decisions: owned kinds are ERR_FORBIDDEN (403), big payloads 413, the job table intact', async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', 'inventory.gpus=[{"model":"fake","memoryBytes":1073741824,"uuid":"GPU-0","pciBus":"0000:00:00.0"}]'] })
  await untilActing(agent)
  const submitted = await agent.client.submitJob({ id: 'keep', nodes: 1, gpusPerNode: 1, periodS: 60, iterations: 100, segments: [{ offsetS: 0, durationS: 10 }], maxSlowdown: 2 })
  t.equal(submitted.job.state, 'RUNNING')
  for (const kind of ['jobs', 'leader', 'reward-workers', 'reward-history']) {
    await t.rejects(agent.client.decide(kind, { evil: true }), { code: 'ERR_FORBIDDEN', message: /belongs to/ }, `${kind} is refused`)
  }
  await t.rejects(agent.client.decide('notes', { blob: 'x'.repeat(900_000) }), { code: 'ERR_BODY_TOO_LARGE' }, 'a 900 KB payload is refused')
  t.match(await agent.client.decide('notes', { ok: true }), { epoch: Number }, 'a kind nobody owns is still published')
  const jobs = await agent.client.jobs()
  t.same(jobs.jobs.map(j => [j.id, j.state]), [['keep', 'RUNNING']], 'the acknowledged job is still there')
})
