// Live execution when the state does not fit: each job's state (2 ranks x 3.4 MB at --hidden 512)
// is larger than the whole host pool (4 MiB), so every switch spills the outgoing job to NVMe and
// brings the incoming one back from it (prefetched when its operation is dispatched, read in the
// onload otherwise). Real agent, real Python workers, real files; every step must still be
// bit-identical to the job run alone, and nothing of either job may be lost.
import t from 'tap'
import { spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { liveJobSpec, runAlone, startTrainer, twoFakeGpus } from '../../helpers/live-workers.ts'
import { torchSkipReason } from '../../helpers/python.ts'
import type { OpAnswer } from '../../../agent/api/wire/workers.ts'

const skip = torchSkipReason()
const seeds: Record<string, number> = { sa: 31, sb: 32 }
const hidden = 512
const poolBytes = 4 * 2 ** 20

t.test('two live jobs, each larger than the host pool, switched through NVMe: bit-identical to running alone', { skip }, async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `inventory.gpus=${twoFakeGpus}`, '--set', `state.hostPoolBytes=${poolBytes}`] })
  for (const id of ['sa', 'sb']) {
    await agent.client.submitJob(liveJobSpec(id))
    await Promise.all([0, 1].map(rank => startTrainer(t, agent.socketPath, { job: id, rank, gpu: rank, seed: seeds[id]!, hidden })))
  }
  const jobBytes = (await agent.client.workers()).workers.filter(w => w.job === 'sa').reduce((n, w) => n + w.stateBytes, 0)
  t.ok(jobBytes > poolBytes, `one job's state (${jobBytes} bytes) is larger than the host pool (${poolBytes})`)

  const steps = 5
  const results = new Map<string, OpAnswer[]>([['sa', []], ['sb', []]])
  for (let k = 0; k < steps; k++) {
    for (const job of ['sa', 'sb']) results.get(job)!.push(await agent.client.runOp(job, { name: 'train_step', args: { step: k }, opId: `s${k}` }))
  }
  t.ok([...results.values()].flat().filter(a => a.switched).length >= 2 * steps - 1, 'every operation after the first switched the devices to its job')
  for (const job of ['sa', 'sb']) {
    for (const rank of [0, 1]) {
      const alone = await runAlone({ job, rank, seed: seeds[job]!, hidden, steps })
      t.same(results.get(job)!.map(a => a.ranks.find(r => r.rank === rank)!.result), alone.steps, `${job} rank ${rank}: every step bit-identical to the job alone`)
    }
  }
  const residency = await agent.client.call<{ counters: { spilled: number, promoted: number }, tiers: { nvme: { usedBytes: number }, host: { capacityBytes: number } } }>('GET', '/v1/state/residency')
  t.ok(residency.counters.spilled > 0, `keys spilled to NVMe (${residency.counters.spilled})`)
  t.ok(residency.counters.promoted > 0, `stored state came back from NVMe for onloads (${residency.counters.promoted} keys)`)
  t.ok(residency.tiers.nvme.usedBytes > 0, 'the offloaded job lives on NVMe')
  t.equal(residency.tiers.host.capacityBytes, poolBytes, 'the pool is the size configured')
})
