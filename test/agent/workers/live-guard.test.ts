// The slowdown guard, live, on one real agent (--dev: it leads itself) with real Python workers (CPU torch
// over shared memory): two live jobs share GPU 0; gb's long operations keep ga's waiting until ga's
// measured slowdown passes its bound (1.5). The leader evicts the latest colocation, gb: its queued and
// next operations fail with ERR_JOB_NOT_RUNNING giving the reason, both jobs' events say so, gb is not
// placed back beside ga while ga stays over its bound, and is once ga completes.
import t from 'tap'
import { spawnAgent, agentctlMain, runNode, tempDir } from '../../helpers/agent-process.ts'
import { liveJobSpec, startTrainer, twoFakeGpus } from '../../helpers/live-workers.ts'
import { torchSkipReason } from '../../helpers/python.ts'

const skip = torchSkipReason()

t.test('a job measured over its bound: the latest colocation on its GPU goes back to the queue', { skip }, async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `inventory.gpus=${twoFakeGpus}`, '--set', 'placement.measuredPublishMs=200'] })
  t.match(await agent.client.submitJob(liveJobSpec('ga', { gpusPerNode: 1, maxSlowdown: 1.5 })), { job: { state: 'RUNNING' } })
  t.match(await agent.client.submitJob(liveJobSpec('gb', { gpusPerNode: 1 })), { job: { state: 'RUNNING' } }, 'gb colocated on the same GPU (rank 0 of each job is GPU 0)')
  await Promise.all(['ga', 'gb'].map((job, i) => startTrainer(t, agent.socketPath, { job, rank: 0, gpu: 0, seed: 7 + i })))

  // gb's controller keeps GPU 0 busy with 250 ms operations; ga's controller runs short steps behind them.
  let gbError: unknown
  const gbDone = (async () => {
    for (let k = 0; ; k++) {
      try {
        await agent.client.runOp('gb', { name: 'sleep', args: { ms: 250 }, opId: `sleep-${k}` })
      } catch (err) {
        gbError = err
        return
      }
    }
  })()
  for (let k = 0; gbError === undefined; k++) {
    if (k > 200) throw new Error('the guard never evicted gb')
    await agent.client.runOp('ga', { name: 'train_step', args: { step: k }, opId: `step-${k}` })
  }
  await gbDone
  // An operation in flight when the guard evicts gb is cut off with its worker, and says why; so does the next one.
  if ((gbError as { code?: string }).code === 'ERR_WORKER_LOST') {
    t.match(gbError, { message: /rank 0 of job gb .* is gone: job gb no longer runs on this node \(evicted by the slowdown guard: job ga: measured slowdown/ }, 'the operation in flight ended with its worker, and the eviction\'s reason')
    gbError = await agent.client.runOp('gb', { name: 'noop', opId: 'retry' }).then(() => undefined, err => err)
  }
  t.match(gbError, { code: 'ERR_JOB_NOT_RUNNING', message: /job gb is QUEUED \(evicted by the slowdown guard: job ga: measured slowdown \d+\.\d+ over its bound 1\.5; the latest colocation on its nodes, gb, back to the queue\)/ }, 'gb\'s controller is told why')
  await t.rejects(agent.client.runOp('gb', { name: 'noop', opId: 'after' }), { code: 'ERR_JOB_NOT_RUNNING', message: /evicted by the slowdown guard/ }, 'and so is every operation until it runs again')

  const view = await agent.client.jobs()
  const [ga, gb] = ['ga', 'gb'].map(id => view.jobs.find(j => j.id === id)!)
  t.match(ga, { state: 'RUNNING', events: [{ message: /^slowdown guard: job ga: measured slowdown/ }] })
  t.ok(ga!.measured!.slowdown > 1.5, `ga measured over its bound (${ga!.measured!.slowdown})`)
  t.match(gb, { state: 'QUEUED', evictions: 1, requeues: 0 })
  const shown = await runNode(agentctlMain, ['--socket', agent.socketPath, 'jobs', 'show', 'gb'])
  t.equal(shown.code, 0, shown.stderr)
  t.match(shown.stdout, /slowdown bound 1000: .*evicted 1 time\(s\) by the slowdown guard\nevents:\n {2}\S+ {2}evicted by the slowdown guard: job ga/, 'jobs show gives gb\'s bound, its evictions and the event')
  const shownA = await runNode(agentctlMain, ['--socket', agent.socketPath, 'jobs', 'show', 'ga'])
  t.match(shownA.stdout, /slowdown bound 1\.5: over it \(measured \d+\.\d+ over \d+ operations\)/)

  await new Promise(resolve => setTimeout(resolve, 600))
  t.equal((await agent.client.jobs()).jobs.find(j => j.id === 'gb')!.state, 'QUEUED', 'gb is not placed back beside ga while ga stays over its bound')
  await agent.client.completeJob('ga')
  for (const deadline = Date.now() + 10_000; (await agent.client.jobs()).jobs.find(j => j.id === 'gb')!.state !== 'RUNNING';) {
    if (Date.now() > deadline) throw new Error('gb was not placed again once ga completed')
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  t.pass('gb placed again once ga completed')
})
