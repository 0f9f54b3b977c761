// Worker groups of a placement-auto job (mesh/control/jobs/job-groups.ts) and its iteration clock
// (iteration-clock.ts): ranges that span nodes, ranks and local GPUs, lookups, and what counts as a
// finished iteration.
import t from 'tap'
import { devicesOnNode, executionJobs, findExecutionJob, gpuCountOf, groupsOf, ranksOnNode } from '../../../../mesh/control/jobs/job-groups.ts'
import { createIterationClock, keptIterations } from '../../../../mesh/control/jobs/iteration-clock.ts'
import { normalizedSpec, parseJobSpec } from '../../../../mesh/control/jobs/job-spec.ts'
import type { JobRecord } from '../../../../mesh/control/jobs/job-table.ts'

function record (id: string, nodes: string[], gpusPerNode: number, groups?: Array<{ component: string, gpus: [number, number] }>): JobRecord {
  return {
    id, state: 'RUNNING', nodes, nodeNames: nodes.map(n => `name-${n}`), placement: null, submittedAtMs: 0, startedAtMs: 0, completedAtMs: null, completedBy: null, requeues: 0,
    spec: { id, nodes: nodes.length, gpusPerNode, periodS: 10, iterations: 10, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2, profiled: true, switchS: 0.02, live: true, ...(groups !== undefined ? { layout: { mode: 'disaggregated', iterationS: 1, groups } } : {}) },
  }
}

t.test('groups over nodes of 4 GPUs: nodes, ranks and local GPUs', async t => {
  const job = record('rl', ['A', 'B', 'C'], 4, [{ component: 'rollout', gpus: [0, 6] }, { component: 'actor', gpus: [6, 12] }])
  const [rollout, actor] = groupsOf(job)
  t.same([rollout!.id, rollout!.nodes, rollout!.nodeNames], ['rl.rollout', ['A', 'B'], ['name-A', 'name-B']])
  t.same([actor!.id, actor!.nodes], ['rl.actor', ['B', 'C']], 'the actor starts on B\'s GPU 2')
  t.same(ranksOnNode(rollout!, 0), [0, 1, 2, 3].map(k => ({ rank: k, gpu: k })))
  t.same(ranksOnNode(rollout!, 1), [{ rank: 4, gpu: 0 }, { rank: 5, gpu: 1 }])
  t.same(ranksOnNode(actor!, 0), [{ rank: 0, gpu: 2 }, { rank: 1, gpu: 3 }], 'actor ranks 0-1 on B\'s GPUs 2-3')
  t.same(ranksOnNode(actor!, 1), [0, 1, 2, 3].map(k => ({ rank: k + 2, gpu: k })))
  t.same(devicesOnNode(actor!, 0), ['gpu:2', 'gpu:3'])
  t.same([gpuCountOf(rollout!), gpuCountOf(actor!), gpuCountOf(job)], [6, 6, 12])
  t.notOk('layout' in rollout!.spec, 'a group carries no layout of its own')
  t.equal(rollout!.group!.parent, 'rl')
})

t.test('a requeued job\'s groups are requeued with it: no nodes, not RUNNING', async t => {
  const job = { ...record('rl', [], 4, [{ component: 'actor', gpus: [0, 8] }]), state: 'QUEUED' as const }
  t.same(groupsOf(job).map(g => [g.id, g.state, g.nodes]), [['rl.actor', 'QUEUED', []]])
})

t.test('plain jobs: ranks as before; lookups find jobs and groups, nothing else', async t => {
  const plain = record('p', ['A', 'B'], 2)
  const cpu = record('c', ['A'], 0)
  t.same(ranksOnNode(plain, 1), [{ rank: 2, gpu: 0 }, { rank: 3, gpu: 1 }])
  t.same(ranksOnNode(cpu, 0), [{ rank: 0, gpu: null }])
  t.same(devicesOnNode(cpu, 0), ['cpu'])
  const wf = record('p.x', ['A'], 2, [{ component: 'actor', gpus: [0, 2] }])
  const jobs = [plain, cpu, wf]
  t.same(executionJobs(jobs).map(j => j.id), ['p', 'c', 'p.x', 'p.x.actor'])
  t.equal(findExecutionJob(jobs, 'p.x.actor')?.group?.component, 'actor')
  t.equal(findExecutionJob(jobs, 'p.x')?.id, 'p.x', 'a job named like a group prefix is itself')
  t.equal(findExecutionJob(jobs, 'p.x.rollout'), undefined, 'no such group')
  t.equal(findExecutionJob(jobs, 'p.actor'), undefined, 'p has no layout')
})

t.test('the spec: placement auto plans the config on the job\'s gang; the stored spec keeps the layout', async t => {
  const workflow = {
    cluster: { num_nodes: 99, num_gpus_per_node: 8 },
    runner: { task_type: 'reasoning' },
    algorithm: { group_size: 2, n_minibatches: 1, recompute_logprobs: false },
    data: { rollout_batch_size: 4 },
    rollout: { tensor_parallel_size: 1, max_running_requests: 8 },
    actor: { model: { tensor_model_parallel_size: 1 } },
    profile_data: { rollout_cost: 1.2, actor_cost: 0.4 },
  }
  const spec = parseJobSpec({ id: 'rl', nodes: 1, gpusPerNode: 3, periodS: 10, iterations: 5, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2, live: true, placement: 'auto', workflow })
  const stored = normalizedSpec(spec)
  t.same(stored.layout?.groups, [{ component: 'rollout', gpus: [0, 1] }, { component: 'actor', gpus: [1, 3] }], 'planned on 1 × 3 GPUs, not the config\'s 99 × 8')
  t.notOk('workflow' in stored || 'placement' in stored)
  t.same(normalizedSpec(spec), stored, 'deterministic: a resubmission compares equal')
  t.throws(() => parseJobSpec({ ...spec, id: 'x'.repeat(120) }), { code: 'ERR_JOB_INVALID', message: /at most 116 characters/ })
})

t.test('the iteration clock: an iteration counts once a later one started; its span grows with late ends', async t => {
  const clock = createIterationClock()
  t.equal(clock.measured(), null)
  clock.started(0, 1000); clock.ended(0, 1500); clock.started(0, 1100); clock.ended(0, 1900)
  t.equal(clock.measured(), null, 'iteration 0 may still get operations')
  clock.started(1, 2000)
  t.same(clock.measured(), { iterations: 1, meanMs: 900 })
  clock.ended(0, 2100)
  t.same(clock.measured(), { iterations: 1, meanMs: 1100 }, 'a late operation of iteration 0 still counts')
  clock.ended(1, 2500)
  t.same(clock.measured(true), { iterations: 2, meanMs: 800 }, 'the latest counts once nothing of the job is queued or running')
  for (let i = 2; i < keptIterations + 10; i++) { clock.started(i, i * 1000); clock.ended(i, i * 1000 + 500) }
  t.equal(clock.measured()!.iterations, keptIterations - 1, 'bounded: the latest kept, the newest not finished')
})
