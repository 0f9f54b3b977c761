// Jobs on a real 3-server election cluster (agents on loopback, two fake GPUs each): submit through a
// follower, the decision applied everywhere and `agentctl jobs list` the same on every agent; invalid
// specs refused with no state change; idempotent resubmit; a job too big waits until capacity frees;
// SIGKILL of the leader: the new leader (higher epoch) has every acknowledged job and keeps scheduling.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startElectionCluster, waitForLeader } from '../../../helpers/test-election.ts'
import { agentctlMain, runNode } from '../../../helpers/agent-process.ts'
import type { MeshAgent } from '../../../helpers/test-mesh.ts'
import type { JobsView } from '../../../../mesh/control/jobs/job-table.ts'

const fakeGpus = JSON.stringify([0, 1].map(i => ({ model: 'fake', memoryBytes: 1 << 30, uuid: `GPU-${i}`, pciBus: `0000:0${i}:00.0` })))
const spec = (id: string, over: Record<string, unknown> = {}) => ({ id, nodes: 1, gpusPerNode: 2, periodS: 60, iterations: 1000, segments: [{ offsetS: 30, durationS: 10 }], maxSlowdown: 1.5, ...over })

t.test('jobs through the leader of a live cluster', async t => {
  const cluster = await startElectionCluster(t, { servers: 3, args: ['--set', `inventory.gpus=${fakeGpus}`, '--set', 'placement.rescheduleIntervalMs=200'] })
  const first = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  const leader = first.leader!
  const followers = cluster.agents.filter(a => a !== leader)
  const [f1, f2] = followers as [MeshAgent, MeshAgent]
  const file = (name: string, content: unknown): string => { const p = join(cluster.dir, name); writeFileSync(p, typeof content === 'string' ? content : JSON.stringify(content)); return p }
  const ctl = (agent: MeshAgent, ...args: string[]) => runNode(agentctlMain, ['--socket', agent.socketPath, ...args])

  // Submit through a follower: placed at once, in the decision that acknowledged it.
  const submitted = await ctl(f1, 'jobs', 'submit', file('a.json', spec('train-a')), '--json')
  t.equal(submitted.code, 0, `agentctl jobs submit exits 0 ${submitted.stderr}`)
  const answer = JSON.parse(submitted.stdout)
  t.match(answer, { created: true, job: { id: 'train-a', state: 'RUNNING' }, decision: { epoch: first.epoch } })
  t.equal(answer.job.nodes.length, 1)
  const views = await waitAllApplied(cluster.agents, answer.decision)
  const lists = await Promise.all(cluster.agents.map(a => ctl(a, 'jobs', 'list', '--json')))
  const tables = lists.map(l => { const v = JSON.parse(l.stdout) as JobsView; return JSON.stringify({ ...v, local: [] }) })
  t.equal(new Set(tables).size, 1, 'agentctl jobs list --json shows the same table on every agent')
  const host = cluster.agents.find(a => a.peerId === answer.job.nodes[0])!
  t.same(views.get(host)!.local, ['train-a'], 'the node it runs on lists it as local')
  const human = await ctl(f2, 'jobs', 'list')
  t.match(human.stdout, /train-a\s+RUNNING\s+1x2\s+node\d\d/, 'human table')

  // Invalid specs: a clear message, nothing changes.
  const before = (await f2.client.jobs()).revision
  await t.rejects(f2.client.submitJob(spec('bad', { segments: [{ offsetS: 55, durationS: 10 }] })), { code: 'ERR_JOB_INVALID', message: /segments\[0\]: ends at 65 s, after the 60 s period/ })
  await t.rejects(f2.client.submitJob({ id: 'bad' }), { code: 'ERR_JOB_INVALID', message: /nodes: Expected required property/ })
  const notJson = await ctl(f2, 'jobs', 'submit', file('bad.json', '{ nope'))
  t.equal(notJson.code, 1)
  t.match(notJson.stderr, /bad\.json is not JSON/)
  const missing = await ctl(f2, 'jobs', 'submit', join(cluster.dir, 'missing.json'), '--json')
  t.equal(missing.code, 1)
  t.match(JSON.parse(missing.stdout).error, { code: 'ERR_NOT_FOUND' })
  t.equal((await leader.client.jobs()).revision, before, 'no state change')

  // Idempotent resubmit, conflicting resubmit.
  const again = await f2.client.submitJob(spec('train-a'))
  t.match(again, { created: false, job: { id: 'train-a', nodes: answer.job.nodes } })
  await t.rejects(f2.client.submitJob(spec('train-a', { iterations: 5 })), { code: 'ERR_JOB_CONFLICT' })

  // A cold-start job needing all three nodes to itself waits until train-a completes.
  const big = await f2.client.submitJob(spec('big', { nodes: 3, profiled: false }))
  t.equal(big.job.state, 'QUEUED', 'three dedicated nodes are not free')
  const done = await f1.client.completeJob('train-a')
  t.match(done.job, { state: 'COMPLETED', completedBy: 'reported' })
  const placed = await waitJobs(cluster.agents, v => v.jobs.find(j => j.id === 'big')?.state === 'RUNNING')
  t.equal(new Set(placed.jobs.find(j => j.id === 'big')!.nodes).size, 3, 'big runs on all three nodes')

  // SIGKILL of the leader: the acknowledged jobs survive, big is requeued (its node died), scheduling goes on.
  leader.proc.kill('SIGKILL')
  await leader.exited
  const second = await waitForLeader(cluster.agents, followers, 20_000, first.epoch)
  t.ok(second.epoch > first.epoch, `new leader with epoch ${second.epoch} > ${first.epoch}`)
  const after = await waitJobs(followers, v => v.jobs.find(j => j.id === 'big')?.requeues === 1)
  t.same(after.jobs.map(j => [j.id, j.state]), [['train-a', 'COMPLETED'], ['big', 'QUEUED']], 'every acknowledged job, big back in the queue (two nodes left)')
  const next = await f1.client.submitJob(spec('train-b'))
  t.equal(next.job.state, 'RUNNING', 'the new leader places new jobs')
  t.ok(next.decision!.epoch === second.epoch, 'in its own epoch')
  t.notOk(next.job.nodes.includes(leader.peerId), 'not on the dead node')
  await waitAllApplied(followers, next.decision!)
})

/** Waits until every agent applied the decision; returns each agent's jobs view. */
async function waitAllApplied (agents: MeshAgent[], decision: { epoch: number, seq: number }): Promise<Map<MeshAgent, JobsView>> {
  const deadline = Date.now() + 15_000
  for (;;) {
    const views = await Promise.all(agents.map(a => a.client.jobs()))
    if (views.every(v => v.decision !== null && (v.decision.epoch > decision.epoch || (v.decision.epoch === decision.epoch && v.decision.seq >= decision.seq)))) {
      return new Map(agents.map((a, i) => [a, views[i]!]))
    }
    if (Date.now() > deadline) throw new Error(`jobs decision ${decision.epoch}/${decision.seq} not applied everywhere: ${JSON.stringify(views.map(v => v.decision))}`)
    await sleep(25)
  }
}

/** Waits until `check` holds for every agent's jobs view; returns the first agent's. */
async function waitJobs (agents: MeshAgent[], check: (v: JobsView) => boolean): Promise<JobsView> {
  const deadline = Date.now() + 20_000
  for (;;) {
    const views = await Promise.all(agents.map(a => a.client.jobs()))
    if (views.every(check)) return views[0]!
    if (Date.now() > deadline) throw new Error(`jobs condition not met: ${JSON.stringify(views.map(v => v.jobs.map(j => [j.id, j.state, j.requeues])))}`)
    await sleep(50)
  }
}
