// Live multiplexed execution on a real cluster: three election servers and one GPU node (two fake GPUs)
// on loopback, three live jobs with 2-rank groups colocated on that node's GPUs, six real Python workers
// (CPU torch over shared memory) and three controllers submitting through the GPU node's agent. The
// leader admits every operation (HRRS, lock-gated) and the node switches the jobs' state through its
// StateManager. Mid-run the leader is SIGKILLed: no operation is lost or run twice (a repeated
// train_step would fail: each checks the step counter) and every job's per-step results and final
// state are bit-identical to the same job run alone. Then a controller's own agent is SIGKILLed while
// its operation waits: the operation runs once, and its repeat through another agent gets the answer.
// Last, the GPU node is SIGKILLed during an
// operation a controller on another agent runs: it fails with ERR_NODE_LOST, and the leader requeues
// the three jobs once the mesh declares the node dead.
import t from 'tap'
import { startElectionCluster, waitForLeader } from '../../helpers/test-election.ts'
import { agentctlMain, runNode } from '../../helpers/agent-process.ts'
import { liveJobSpec, runAlone, startTrainer, twoFakeGpus } from '../../helpers/live-workers.ts'
import { torchSkipReason } from '../../helpers/python.ts'
import type { OpAnswer } from '../../../agent/api/wire/workers.ts'

const skip = torchSkipReason()
const jobs = ['rl-a', 'rl-b', 'rl-c'] as const
const seed = (job: string): number => 100 + jobs.indexOf(job as typeof jobs[number])
const steps = 10

t.test('three live jobs share one GPU group through a leader that dies mid-run', { skip }, async t => {
  // Client 0 is the GPU node; client 1 (no GPUs) is an agent a controller uses and that dies under it.
  const cluster = await startElectionCluster(t, { servers: 3, clients: 2, clientArgs: i => i === 0 ? ['--set', `inventory.gpus=${twoFakeGpus}`, '--set', 'state.enabled=true'] : [] })
  const first = await waitForLeader(cluster.agents, cluster.agents, 30_000)
  const gpuNode = cluster.clients[0]!
  // Placement reads the leader's view: submitted before the leader holds the GPU node's record, a job waits
  // unplaced (what a loaded CI machine showed). Every server, since any may lead by the time the jobs go in.
  await cluster.waitFor(cluster.servers, peers => peers.some(p => p.peerId === gpuNode.peerId && p.state === 'alive' && (p.record?.gpus.length ?? 0) === 2), 30_000, 'every server to hold the GPU node\'s record with its two GPUs')
  for (const id of jobs) {
    const submitted = await gpuNode.client.submitJob(liveJobSpec(id))
    t.same(submitted.job.nodes, [gpuNode.peerId], `${id} placed on the GPU node`)
  }
  // The node must have applied the table before its workers register.
  for (const deadline = Date.now() + 15_000; (await gpuNode.client.jobs()).local.length < jobs.length;) {
    if (Date.now() > deadline) throw new Error('the GPU node never applied the three placements')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  for (const job of jobs) for (const rank of [0, 1]) await startTrainer(t, gpuNode.socketPath, { job, rank, gpu: rank, seed: seed(job) })
  // rl-a runs one step more at the end (through an agent that dies): its run alone has steps + 1.
  const alone = new Map(await Promise.all(jobs.flatMap(job => [0, 1].map(async rank => [`${job}/${rank}`, await runAlone({ job, rank, seed: seed(job), steps: job === 'rl-a' ? steps + 1 : steps })] as const))))

  const answers = new Map<string, OpAnswer[]>(jobs.map(j => [j, []]))
  let opsDone = 0
  let killed: Promise<void> | undefined
  const controller = async (job: string): Promise<void> => {
    for (let k = 0; k < steps; k++) {
      const a = await gpuNode.client.runOp(job, { name: 'train_step', args: { step: k }, opId: `step-${k}` })
      answers.get(job)!.push(a)
      // A third of the way through, the leader dies (while the other controllers' operations are in flight).
      if (++opsDone === steps && killed === undefined) {
        killed = (async () => { first.leader!.proc.kill('SIGKILL'); await first.leader!.exited })()
      }
    }
  }
  await Promise.all(jobs.map(controller))
  await killed
  t.ok(killed !== undefined, 'the leader was killed mid-run')
  const second = await waitForLeader(cluster.agents.filter(a => a !== first.leader), cluster.servers.filter(a => a !== first.leader), 30_000, first.epoch)
  t.ok(second.epoch > first.epoch, `a new leader took over (epoch ${second.epoch} > ${first.epoch})`)

  for (const job of jobs) {
    for (const rank of [0, 1]) {
      const live = answers.get(job)!.map(a => a.ranks.find(r => r.rank === rank)!.result)
      t.same(live, alone.get(`${job}/${rank}`)!.steps.slice(0, steps), `${job} rank ${rank}: all ${steps} steps bit-identical to the job alone (none lost, none run twice)`)
    }
    if (job === 'rl-a') continue // one more step below
    const hashes = await gpuNode.client.runOp(job, { name: 'state_hash' })
    t.same(hashes.ranks.map(r => (r.result as { hash: string }).hash), [0, 1].map(r => alone.get(`${job}/${r}`)!.final), `${job}: final state equals the run alone`)
  }

  // The controller's own agent dies while its operation waits behind another job's: the leader still
  // runs it, once; the controller repeats it (same opId) through another agent and gets its answer.
  const doomed = cluster.clients[1]!
  const blocker = gpuNode.client.runOp('rl-b', { name: 'sleep', args: { ms: 3000 }, opId: 'blocker' })
  await new Promise(resolve => setTimeout(resolve, 300))
  const orphan = doomed.client.runOp('rl-a', { name: 'train_step', args: { step: steps }, opId: `step-${steps}` })
  await new Promise(resolve => setTimeout(resolve, 500))
  doomed.proc.kill('SIGKILL')
  await t.rejects(orphan, { code: 'ERR_CONNECTION_LOST' }, 'the controller sees its agent go away')
  await blocker
  const stepOf = async (): Promise<unknown> => (await gpuNode.client.runOp('rl-a', { name: 'status' })).ranks.map(r => r.result)
  t.same(await stepOf(), [{ step: steps + 1 }, { step: steps + 1 }], 'the leader ran the orphaned step although its controller\'s agent died')
  const repeated = await gpuNode.client.runOp('rl-a', { name: 'train_step', args: { step: steps }, opId: `step-${steps}` })
  t.same(repeated.ranks.map(r => r.result), [0, 1].map(r => alone.get(`rl-a/${r}`)!.steps[steps]), 'the repeat through another agent answers the step, bit-identical to the job alone')
  t.same(await stepOf(), [{ step: steps + 1 }, { step: steps + 1 }], 'and did not run it again')
  const hashesA = await gpuNode.client.runOp('rl-a', { name: 'state_hash' })
  t.same(hashesA.ranks.map(r => (r.result as { hash: string }).hash), [0, 1].map(r => alone.get(`rl-a/${r}`)!.final), 'rl-a: final state equals the run alone')
  const switched = [...answers.values()].flat().filter(a => a.switched).length
  t.ok(switched >= steps, `many switches: ${switched} of ${jobs.length * steps} operations moved state first`)

  // Visibility: agentctl jobs top (from the new leader), jobs show, inspect residency.
  const ctl = (...args: string[]) => runNode(agentctlMain, ['--socket', gpuNode.socketPath, ...args])
  const top = await ctl('jobs', 'top', '--json')
  t.equal(top.code, 0, `agentctl jobs top exits 0 ${top.stderr}`)
  const view = JSON.parse(top.stdout) as { epoch: number, nodes: Array<{ node: string, residentJob: string | null }>, jobs: Array<{ job: string, ops: number }> }
  t.equal(view.epoch, second.epoch, 'answered by the new leader')
  t.ok(view.jobs.every(j => j.ops >= 1), 'every job ran operations under it')
  const residency = await ctl('inspect', 'residency')
  t.match(residency.stdout, /rl-a\s+0\s+0\s+\d+\s+(on device|offloaded)/, 'inspect residency lists the workers and where their state is')
  const shown = await ctl('jobs', 'show', 'rl-a')
  t.match(shown.stdout, /live job; placement uses the (submitted|measured) profile/, 'jobs show says which profile placement uses')

  // The GPU node dies mid-operation: a clear error for the operation in flight, the jobs requeued.
  const survivors = cluster.servers.filter(a => a !== first.leader)
  const controllerAgent = survivors.find(a => a !== second.leader) ?? survivors[0]!
  const inFlight = controllerAgent.client.runOp('rl-a', { name: 'sleep', args: { ms: 5000 }, opId: 'long-sleep' })
  await new Promise(resolve => setTimeout(resolve, 1000))
  gpuNode.proc.kill('SIGKILL')
  await t.rejects(inFlight, { code: 'ERR_NODE_LOST' }, 'the operation in flight fails with ERR_NODE_LOST')
  for (const deadline = Date.now() + 30_000; ;) {
    const view = await controllerAgent.client.jobs()
    if (view.jobs.filter(j => jobs.includes(j.id as typeof jobs[number])).every(j => j.state === 'QUEUED' && j.requeues === 1)) break
    if (Date.now() > deadline) throw new Error(`jobs not requeued: ${JSON.stringify(view.jobs.map(j => [j.id, j.state, j.requeues]))}`)
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  t.pass('the leader requeued the three jobs of the dead node')
  await t.rejects(controllerAgent.client.runOp('rl-b', { name: 'noop' }), { code: 'ERR_JOB_NOT_RUNNING' }, 'a requeued job takes no operation')
})
