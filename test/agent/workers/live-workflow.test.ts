// Placement auto on one real agent (--dev: it leads itself) with real Python workers: a job submitted with
// an RLinf config gets one worker group per workflow component, laid out by the planner. Disaggregated
// (rollout on GPU 0, actor on GPUs 1-2) the groups run side by side; collocated (both on GPU 0) they
// share the GPUs and switch through the device locks and the StateManager. `jobs top` shows the plan's
// predicted iteration time against the measured one. Bad specs, registrations and operations are refused
// with a code and leave nothing behind.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringify as stringifyYaml } from 'yaml'
import { agentctlMain, runNode, spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { fakeGpus, liveJobSpec, startTrainer } from '../../helpers/live-workers.ts'
import { reasoningConfig, runWorkflow, type Layout } from '../../helpers/live-workflow.ts'
import { torchSkipReason } from '../../helpers/python.ts'
import type { OpAnswer } from '../../../agent/api/wire/workers.ts'

const skip = torchSkipReason()

/** The [start, end) wall-clock interval each rank of the answer ran. */
const spans = (answers: OpAnswer[]): Array<[number, number]> => answers.flatMap(a => a.ranks.map(r => [r.startedAtMs, r.startedAtMs + r.durationMs] as [number, number]))

t.test('placement auto: worker groups laid out by the plan, run by the agent as planned', { skip }, async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `inventory.gpus=${fakeGpus(3)}`] })
  const auto = (id: string, gpus: number, workflow: unknown, over: Record<string, unknown> = {}) => ({ ...liveJobSpec(id, { gpusPerNode: gpus }), placement: 'auto', workflow, ...over })

  t.test('bad specs: a coded error, nothing in the table', async t => {
    await t.rejects(agent.client.submitJob(auto('bad', 3, reasoningConfig(3, 8), { live: false })), { code: 'ERR_JOB_INVALID', message: /set "live": true/ })
    await t.rejects(agent.client.submitJob({ ...liveJobSpec('bad', { gpusPerNode: 3 }), workflow: reasoningConfig(3, 8) }), { code: 'ERR_JOB_INVALID', message: /only with "placement": "auto"/ })
    await t.rejects(agent.client.submitJob(auto('bad', 3, undefined)), { code: 'ERR_JOB_INVALID', message: /workflow: required/ })
    const { profile_data: _, ...unprofiled } = reasoningConfig(3, 8)
    await t.rejects(agent.client.submitJob(auto('bad', 3, unprofiled)), { code: 'ERR_JOB_INVALID', message: /profile_data/ })
    await t.rejects(agent.client.submitJob(auto('bad', 0, reasoningConfig(3, 8))), { code: 'ERR_JOB_INVALID', message: /gpusPerNode/ })
    t.same((await agent.client.jobs()).jobs, [], 'nothing was added')
  })

  t.test('disaggregated: the rollout and actor groups run side by side on their own GPUs', async t => {
    const config = reasoningConfig(3, 8)
    // Through agentctl, the workflow given as the path of its YAML next to the spec.
    writeFileSync(join(dir, 'wf-d.yaml'), stringifyYaml(config))
    writeFileSync(join(dir, 'wf-d.json'), JSON.stringify(auto('wf-d', 3, 'wf-d.yaml')))
    const submitted = await runNode(agentctlMain, ['--socket', agent.socketPath, 'jobs', 'submit', join(dir, 'wf-d.json'), '--json'])
    t.equal(submitted.code, 0, submitted.stderr)
    const job = JSON.parse(submitted.stdout).job
    t.match(job, { id: 'wf-d', state: 'RUNNING' })
    const layout = job.spec.layout as Layout
    t.same(layout.groups, [{ component: 'rollout', gpus: [0, 1] }, { component: 'actor', gpus: [1, 3] }], 'rollout on GPU 0, actor on GPUs 1-2')
    t.equal(layout.mode, 'disaggregated')
    t.notOk('workflow' in job.spec, 'the table keeps the layout, not the config')
    await t.rejects(agent.client.submitJob({ ...liveJobSpec('wf-d.actor', { gpusPerNode: 1 }) }), { code: 'ERR_JOB_CONFLICT', message: /wf-d\.actor already names/ }, 'a group\'s id names no other job')

    const reg = (body: Record<string, unknown>) => agent.client.call('POST', '/v1/workers', { ops: ['f'], tensors: [], ...body })
    await t.rejects(reg({ job: 'wf-d', rank: 0, gpu: 0 }), { code: 'ERR_BAD_REQUEST', message: /register with their group's id/ })
    await t.rejects(reg({ job: 'wf-d.actor', rank: 0, gpu: 0 }), { code: 'ERR_BAD_REQUEST', message: /GPU 1 of this node/ }, 'actor rank 0 is GPU 1')
    await t.rejects(reg({ job: 'wf-d.actor', rank: 2, gpu: 3 }), { code: 'ERR_BAD_REQUEST', message: /ranks 0, 1 are/ })
    t.equal((await agent.client.workers()).workers.length, 0, 'nothing registered')

    await Promise.all([{ job: 'wf-d.rollout', rank: 0, gpu: 0 }, { job: 'wf-d.actor', rank: 0, gpu: 1 }, { job: 'wf-d.actor', rank: 1, gpu: 2 }].map(async w => await startTrainer(t, agent.socketPath, { ...w, seed: 1 })))
    await t.rejects(agent.client.runOp('wf-d', { name: 'sleep', args: { ms: 1 } }), { code: 'ERR_BAD_REQUEST', message: /name the operation's component/ })
    await t.rejects(agent.client.runOp('wf-d', { name: 'sleep', args: { ms: 1 }, component: 'inference' }), { code: 'ERR_BAD_REQUEST', message: /no worker group for component inference \(it has rollout, actor\)/ })

    const answers = await runWorkflow(agent.client, 'wf-d', layout, config, 3)
    const rollout = spans(answers.filter(a => a.job === 'wf-d.rollout'))
    const actor = spans(answers.filter(a => a.job === 'wf-d.actor'))
    t.equal(rollout.length, 12, 'rollout ran 12 batches on its one rank')
    t.equal(actor.length, 24, 'actor ran 12 batches on each of its two ranks')
    const overlapping = actor.filter(([s, e]) => rollout.some(([rs, re]) => s < re && rs < e)).length
    t.ok(overlapping > 0, `actor batches ran while rollout ran (${overlapping} of ${actor.length})`)
    t.notOk(answers.some(a => a.switched && a.offloadMs > 0), 'no group offloaded another: their GPUs are disjoint')

    const top = await agent.client.jobsTop()
    const w = top.workflows.find(x => x.job === 'wf-d')!
    t.match(w, { mode: 'disaggregated', groups: [{ component: 'rollout', job: 'wf-d.rollout', gpus: [0, 1] }, { component: 'actor', job: 'wf-d.actor', gpus: [1, 3] }], iterations: 3 })
    t.ok(w.measuredIterationS !== null && w.measuredIterationS > 0, `measured ${w.measuredIterationS?.toFixed(3)} s per iteration against ${w.predictedIterationS.toFixed(3)} s predicted`)
    t.same(top.nodes.map(n => [n.device, n.residentJob]), [['gpu:0', 'wf-d.rollout'], ['gpu:1', 'wf-d.actor'], ['gpu:2', 'wf-d.actor']], 'one row per GPU, each group resident on its own')
    const text = await runNode(agentctlMain, ['--socket', agent.socketPath, 'jobs', 'top'])
    t.match(text.stdout, /JOB\s+MODE\s+GROUPS \(GPUS\)\s+PREDICTED\s+MEASURED\s+DIFF\s+ITERATIONS\nwf-d\s+disaggregated\s+rollout 0-0, actor 1-2\s+1\.330 s\s+\d\.\d{3} s\s+-?\d+\.\d%\s+3/)
    // Planned again from what its groups measured (rollout on 1 GPU, actor on 2), extrapolated to the config's 3.
    const replanned = await runNode(agentctlMain, ['--socket', agent.socketPath, 'plan', 'workflow', join(dir, 'wf-d.yaml'), '--job', 'wf-d', '--json'])
    t.equal(replanned.code, 0, replanned.stderr)
    t.same(JSON.parse(replanned.stdout).profileSources.map((x: { key: string, source: string }) => [x.key, x.source]), [['profile_data.rollout_cost', 'extrapolated'], ['profile_data.actor_cost', 'extrapolated']], 'both costs from the groups\' measurements')
    const shown = await runNode(agentctlMain, ['--socket', agent.socketPath, 'jobs', 'show', 'wf-d'])
    t.match(shown.stdout, /workflow laid out disaggregated, 1\.330 s per iteration predicted; worker groups:\n {2}wf-d\.rollout {2}GPUs 0-0 \(1\)\n {2}wf-d\.actor {2}GPUs 1-2 \(2\)/)
    await agent.client.completeJob('wf-d')
  })

  t.test('collocated: both groups on GPU 0, switched through the StateManager', async t => {
    const config = reasoningConfig(1, 1)
    const { job } = await agent.client.submitJob(auto('wf-c', 1, config))
    const layout = job.spec.layout as Layout
    t.same(layout, { mode: 'collocated', iterationS: layout.iterationS, groups: [{ component: 'rollout', gpus: [0, 1] }, { component: 'actor', gpus: [0, 1] }] })
    await Promise.all(['rollout', 'actor'].map(async group => await startTrainer(t, agent.socketPath, { job: `wf-c.${group}`, rank: 0, gpu: 0, seed: 3 })))
    const answers = await runWorkflow(agent.client, 'wf-c', layout, config, 3)
    const phaseStarts = answers.filter((a, i) => i > 0 && a.job !== answers[i - 1]!.job)
    t.equal(phaseStarts.length, 5, 'rollout and actor took turns five times')
    t.ok(phaseStarts.every(a => a.switched), 'each turn switched the GPUs to the other group first')
    t.ok(phaseStarts.filter(a => a.offloadMs > 0).length >= 4, 'the other group offloaded each time (its state stored)')
    const onDevice = (await agent.client.workers()).workers.filter(w => w.job.startsWith('wf-c.') && w.onDevice).map(w => w.job)
    t.same([...new Set(onDevice)], ['wf-c.actor'], 'after the last actor batch only the actor group is on the GPUs')
    const w = (await agent.client.jobsTop()).workflows.find(x => x.job === 'wf-c')!
    t.match(w, { mode: 'collocated', iterations: 3 }, 'all three: the last counts once nothing is queued or running')
    t.ok(w.measuredIterationS !== null, `measured ${w.measuredIterationS?.toFixed(3)} s per iteration against ${w.predictedIterationS.toFixed(3)} s predicted`)
  })
})
