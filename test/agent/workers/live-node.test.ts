// Live execution on one real agent (--dev: it leads itself) with real Python workers (CPU torch over
// shared memory): two jobs with 2-rank groups share the node's two GPUs and are switched in and out
// by the agent through the StateManager; their results are bit-identical to each job run alone.
// Also: bad registrations and operations (coded 4xx, nothing registered or stored), a worker killed
// mid-operation (ERR_WORKER_LOST naming the rank, the other job untouched, the restarted worker
// loaded from the stored state and the job resumed to the same result). And the job's measured profile:
// operations run with a component, planned from by `agentctl plan workflow CONFIG --job`.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml'
import { agentctlMain, repoRoot, runNode, spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { liveJobSpec, runAlone, startTrainer, twoFakeGpus, type WorkerProcess } from '../../helpers/live-workers.ts'
import { torchSkipReason } from '../../helpers/python.ts'
import type { OpAnswer } from '../../../agent/api/wire/workers.ts'

const skip = torchSkipReason()
const seeds: Record<string, number> = { ja: 11, jb: 22 }

t.test('two live jobs time-share one node: switched by the agent, bit-identical to running alone', { skip }, async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `inventory.gpus=${twoFakeGpus}`] })
  for (const id of ['ja', 'jb']) t.match(await agent.client.submitJob(liveJobSpec(id)), { job: { id, state: 'RUNNING' } }, `${id} placed`)
  const workers = new Map<string, WorkerProcess>()
  const start = async (job: string, rank: number): Promise<WorkerProcess> => {
    const w = await startTrainer(t, agent.socketPath, { job, rank, gpu: rank, seed: seeds[job]! })
    workers.set(`${job}/${rank}`, w)
    return w
  }
  for (const job of ['ja', 'jb']) for (const rank of [0, 1]) t.equal((await start(job, rank)).registered.stored, null, `${job}/${rank} registered; its initial state stored`)

  const steps = 8
  const results = new Map<string, OpAnswer[]>()
  /** Runs steps [from, to) of the job; `attempt` names a replay (after a rollback, the same step is a new operation). */
  const controller = async (job: string, from: number, to: number, attempt = 0): Promise<void> => {
    for (let k = from; k < to; k++) {
      const a = await agent.client.runOp(job, { name: 'train_step', args: { step: k }, opId: `step-${k}.${attempt}` })
      results.set(job, [...(results.get(job) ?? []), a])
    }
  }
  await Promise.all([controller('ja', 0, steps), controller('jb', 0, steps)])
  const switched = [...results.values()].flat().filter(a => a.switched).length
  t.ok(switched >= steps, `the jobs were switched in and out: ${switched} of ${2 * steps} operations moved state first`)
  const alone = new Map<string, Awaited<ReturnType<typeof runAlone>>>()
  for (const job of ['ja', 'jb']) for (const rank of [0, 1]) alone.set(`${job}/${rank}`, await runAlone({ job, rank, seed: seeds[job]!, steps: 12 }))
  for (const job of ['ja', 'jb']) {
    for (const rank of [0, 1]) {
      const live = results.get(job)!.map(a => a.ranks.find(r => r.rank === rank)!.result)
      t.same(live, alone.get(`${job}/${rank}`)!.steps.slice(0, steps), `${job} rank ${rank}: every step's loss and state hash bit-identical to the job alone`)
    }
  }
  const residency = await agent.client.workers()
  t.equal(residency.workers.length, 4, 'four workers listed')
  t.equal(residency.workers.filter(w => w.onDevice).length, 2, 'one job\'s two ranks on the devices, the other\'s offloaded')

  t.test('bad registrations and operations: coded 4xx, nothing registered, nothing stored', async t => {
    const keysBefore = (await agent.client.call<{ keys: unknown[] }>('GET', '/v1/state/residency')).keys.length
    const tensor = { name: 'w', key: 'ja/r0/w:param@[0]/[4]:f32#v0', memory: { kind: 'shm', name: 'agentd-test-missing', offset: 0 } }
    const reg = (over: Record<string, unknown>) => agent.client.call('POST', '/v1/workers', { job: 'ja', rank: 0, gpu: 0, ops: ['f'], tensors: [tensor], ...over })
    await t.rejects(reg({ job: 'nope' }), { code: 'ERR_JOB_NOT_FOUND' }, 'unknown job')
    await t.rejects(reg({ rank: 7 }), { code: 'ERR_BAD_REQUEST', message: /rank 7 .* not hosted on this node/ }, 'rank outside the group')
    await t.rejects(reg({ gpu: 1 }), { code: 'ERR_BAD_REQUEST', message: /GPU 0/ }, 'the wrong GPU for the rank')
    await t.rejects(reg({ ops: [] }), { code: 'ERR_BAD_REQUEST', message: /ops/ }, 'no operations')
    await t.rejects(reg({ tensors: [{ ...tensor, key: 'ja/w:nope' }] }), { code: 'ERR_KEY_INVALID' }, 'a key that does not parse')
    await t.rejects(reg({ tensors: [{ ...tensor, key: 'other/w:param@[0]/[4]:f32#v0' }] }), { code: 'ERR_KEY_INVALID', message: /namespace/ }, 'a key outside the job')
    await t.rejects(reg({ tensors: [tensor, tensor] }), { code: 'ERR_BAD_REQUEST', message: /twice/ }, 'a name twice')
    await t.rejects(reg({}), { code: 'ERR_WORKER_EXISTS' }, 'a rank with a live worker')
    await t.rejects(agent.client.runOp('ja', { name: 'no_such_op' }), { code: 'ERR_UNKNOWN_OPERATION', message: /no_such_op/ }, 'an operation no worker registered')
    await t.rejects(agent.client.runOp('ja', { name: 'noop', args: { blob: 'x'.repeat(70_000) } }), { code: 'ERR_BODY_TOO_LARGE' }, 'oversized args')
    await t.rejects(agent.client.runOp('nope', { name: 'noop' }), { code: 'ERR_JOB_NOT_FOUND' }, 'unknown job')
    await t.rejects(agent.client.runOp('ja', { name: 'bad name!' }), { code: 'ERR_BAD_REQUEST' }, 'a name that is not one')
    t.equal((await agent.client.workers()).workers.length, 4, 'no worker registered')
    t.equal((await agent.client.call<{ keys: unknown[] }>('GET', '/v1/state/residency')).keys.length, keysBefore, 'nothing stored')
  })

  t.test('a worker killed mid-operation: ERR_WORKER_LOST naming the rank; restarted, it is loaded from the stored state', async t => {
    // Switch jb in so that ja's state at step 8 is stored, then run ja (switching it back) and kill its rank 1 mid-sleep.
    await controller('jb', steps, steps + 1)
    await controller('ja', steps, steps + 1)
    const sleeping = agent.client.runOp('ja', { name: 'sleep', args: { ms: 3000 }, opId: 'long-sleep' })
    await sleep(800)
    workers.get('ja/1')!.proc.kill('SIGKILL')
    await t.rejects(sleeping, { code: 'ERR_WORKER_LOST', message: /rank 1 of job ja/ })
    // The other job is untouched.
    await controller('jb', steps + 1, steps + 3)
    const restarted = await start('ja', 1)
    t.ok(restarted.registered.stored !== null, `the restarted rank is loaded from stored version ${restarted.registered.stored?.version}`)
    const status = await agent.client.runOp('ja', { name: 'status' })
    const resumeAt = (status.ranks[0]!.result as { step: number }).step
    t.same(status.ranks.map(r => r.result), [{ step: resumeAt }, { step: resumeAt }], `both ranks rolled back to the stored step ${resumeAt}`)
    t.ok(resumeAt <= steps + 1, 'at most the last step before the kill')
    // A replayed step is a new operation (a new opId): the old id answers the old result, it never runs twice.
    const repeat = await agent.client.runOp('ja', { name: 'train_step', args: { step: steps }, opId: `step-${steps}.0` })
    t.same(repeat.ranks.map(r => (r.result as { step: number }).step), [steps, steps], 'the pre-kill step id answers its first result without running')
    await controller('ja', resumeAt, 12, 1)
    await controller('jb', steps + 3, 12)
    for (const job of ['ja', 'jb']) {
      const hashes = await agent.client.runOp(job, { name: 'state_hash' })
      for (const r of hashes.ranks) t.equal((r.result as { hash: string }).hash, alone.get(`${job}/${r.rank}`)!.final, `${job} rank ${r.rank}: final state after 12 steps equals the run alone`)
    }
  })
  t.test('a worker killed between operations after it ran: the next operation says so; the job replays from the stored state', async t => {
    await controller('ja', 12, 13) // ja switched in and stepped: its memory holds step 12, no stored version does
    const victim = workers.get('ja/0')!
    victim.proc.kill('SIGKILL')
    await victim.exited
    for (const deadline = Date.now() + 10_000; (await agent.client.workers()).workers.some(w => w.job === 'ja' && w.rank === 0);) {
      if (Date.now() > deadline) throw new Error('the agent never noticed the dead worker')
      await sleep(50)
    }
    await controller('jb', 12, 13) // another job is untouched
    const restarted = await start('ja', 0)
    t.ok(restarted.registered.stored !== null, 'the restarted rank is loaded from the stored state')
    await t.rejects(agent.client.runOp('ja', { name: 'train_step', args: { step: 13 }, opId: 'step-13.0' }), { code: 'ERR_WORKER_LOST', message: /rank 0 of job ja was lost between operations/ }, 'the next operation reports the loss instead of running on a silently rolled-back state')
    const status = await agent.client.runOp('ja', { name: 'status' })
    t.same(status.ranks.map(r => r.result), [{ step: 12 }, { step: 12 }], 'both ranks back at the stored step 12 (step 12\'s effect was only in memory)')
    const longer = await Promise.all([0, 1].map(async rank => await runAlone({ job: 'ja', rank, seed: seeds.ja!, steps: 14 })))
    const replayed = [12, 13]
    for (const k of replayed) {
      const a = await agent.client.runOp('ja', { name: 'train_step', args: { step: k }, opId: `step-${k}.2` })
      t.same(a.ranks.map(r => r.result), longer.map(l => l.steps[k]), `replayed step ${k} bit-identical to the job alone`)
    }
    const next = await agent.client.runOp('jb', { name: 'status' })
    t.same(next.ranks.map(r => r.result), [{ step: 13 }, { step: 13 }], 'jb kept its progress')
  })
  t.test('operations run with a component make the job\'s measured profile; plan workflow --job plans an RLinf config from it', async t => {
    const phases = [['rollout', 150, 1], ['inference', 30, 1], ['actor', 40, 2]] as const
    for (let iteration = 0; iteration < 3; iteration++) {
      for (const [component, ms, times] of phases) for (let k = 0; k < times; k++) await agent.client.runOp('jb', { name: 'sleep', args: { ms }, component, iteration })
    }
    await t.rejects(agent.client.runOp('jb', { name: 'sleep', args: { ms: 1 }, component: 'bad name!' }), { code: 'ERR_BAD_REQUEST', message: /component/ })
    await t.rejects(agent.client.runOp('jb', { name: 'sleep', args: { ms: 1 }, component: 'actor', granularity: 0 }), { code: 'ERR_BAD_REQUEST', message: /granularity/ })
    await t.rejects(agent.client.call('POST', '/v1/jobs/jb/ops', { name: 'sleep', args: { ms: 1 }, component: 'actor', iteration: '1' }), { code: 'ERR_BAD_REQUEST', message: /iteration/ }, 'no coercion')
    const top = await agent.client.jobsTop()
    const measured = top.jobs.find(j => j.job === 'jb')!.components
    t.same(measured.map(c => [c.component, c.gpus, c.granularity, c.iterations, c.ops]), [['actor', 2, null, 3, 6], ['inference', 2, null, 3, 3], ['rollout', 2, null, 3, 3]], 'per component on the job\'s 2 GPUs: 3 iterations; the refused operations recorded nothing')
    for (const [component, ms, times] of phases) {
      const c = measured.find(x => x.component === component)!
      t.ok(c.iterationMs >= ms * times && c.iterationMs < ms * times + 500, `${component}: ${c.iterationMs.toFixed(1)} ms per iteration for ${times} × ${ms} ms of sleep`)
    }
    // An RLinf config of 8 GPUs with no profile_data: every cost comes from jb, extrapolated from its 2 GPUs.
    const config = parseYaml(readFileSync(join(repoRoot, 'examples/rlinf-grpo.yaml'), 'utf8')) as Record<string, any>
    delete config.profile_data
    config.cluster = { num_nodes: 1, num_gpus_per_node: 8 }
    const file = join(dir, 'grpo-8.yaml')
    writeFileSync(file, stringifyYaml(config))
    const planned = await runNode(agentctlMain, ['--socket', agent.socketPath, 'plan', 'workflow', file, '--job', 'jb', '--json'])
    t.equal(planned.code, 0, planned.stderr)
    const plan = JSON.parse(planned.stdout)
    t.same(plan.profileSources.map((s: { key: string, source: string }) => [s.key, s.source]), [['profile_data.rollout_cost', 'extrapolated'], ['profile_data.inference_cost', 'extrapolated'], ['profile_data.actor_cost', 'extrapolated']])
    t.match(plan.profileSources[2].detail, /on 8 GPUs from 0\.\d+ s measured on 2 \(actor of job jb, 3 iterations, 6 ops\)/)
    t.ok(plan.iterationS > 0 && ['collocated', 'disaggregated'].includes(plan.mode), `a plan: ${plan.mode}, ${plan.iterationS.toFixed(3)} s per iteration`)
    const human = await runNode(agentctlMain, ['--socket', agent.socketPath, 'plan', 'workflow', file, '--job', 'jb'])
    t.match(human.stdout, /profile_data:\nKEY\s+SOURCE\s+HOW\nprofile_data.rollout_cost\s+extrapolated/)
    const topText = await runNode(agentctlMain, ['--socket', agent.socketPath, 'jobs', 'top'])
    t.match(topText.stdout, /JOB\s+COMPONENT\s+GPUS\s+GRANULARITY\s+ITERATIONS\s+OPS\s+PER_ITERATION\njb\s+actor\s+2\s+-\s+3\s+6\s+0\.\d+ s/)
    const unknown = await runNode(agentctlMain, ['--socket', agent.socketPath, 'plan', 'workflow', file, '--job', 'nope', '--json'])
    t.equal(unknown.code, 1)
    t.match(JSON.parse(unknown.stdout).error, { code: 'ERR_JOB_NOT_FOUND', message: /job nope/ })
    const graph = await runNode(agentctlMain, ['--socket', agent.socketPath, 'plan', 'workflow', join(repoRoot, 'examples/workflow.json'), '--job', 'jb'])
    t.equal(graph.code, 2, 'a workflow graph carries its own profile: --job is a usage error')
    t.match(graph.stderr, /--job plans an RLinf config/)
  })
})
