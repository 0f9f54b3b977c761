// Live execution through CUDA IPC: two live jobs share one real GPU; each worker's state is CUDA
// tensors that the agent copies out (offload, then the worker frees the device memory) and back in
// (the worker allocates afresh, the agent copies into the new allocation) at every switch. Every
// step's result must be bit-identical to the same job run alone on that GPU. Needs a GPU, torch with
// CUDA and an addon built with CUDA; skipped otherwise, with the reason.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { liveJobSpec, runAlone, startTrainer } from '../../helpers/live-workers.ts'
import { python, torchSkipReason } from '../../helpers/python.ts'
import { capabilities } from '../../../native/index.ts'
import type { OpAnswer } from '../../../agent/api/wire/workers.ts'

function cudaSkipReason (): string | false {
  const torch = torchSkipReason()
  if (torch !== false) return torch
  if (capabilities.cuda?.available !== true) return `the native addon has no usable CUDA: ${capabilities.cuda?.reason ?? 'not built with CUDA'}`
  const probe = spawnSync(python, ['-c', 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)'], { stdio: 'ignore' })
  return probe.status === 0 ? false : `${python}'s torch sees no CUDA device`
}
const skip = cudaSkipReason()
if (skip !== false) t.comment(`skipped: ${skip}`)

t.test('two live jobs switched on one GPU through CUDA IPC: bit-identical to running alone', { skip }, async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir] })
  const seeds: Record<string, number> = { ca: 5, cb: 6 }
  for (const id of ['ca', 'cb']) {
    await agent.client.submitJob(liveJobSpec(id, { gpusPerNode: 1 }))
    await startTrainer(t, agent.socketPath, { job: id, rank: 0, gpu: 0, seed: seeds[id]!, hidden: 512, device: 'cuda' })
  }
  const steps = 6
  const results = new Map<string, OpAnswer[]>([['ca', []], ['cb', []]])
  for (let k = 0; k < steps; k++) {
    for (const job of ['ca', 'cb']) results.get(job)!.push(await agent.client.runOp(job, { name: 'train_step', args: { step: k }, opId: `s${k}` }))
  }
  t.ok([...results.values()].flat().filter(a => a.switched).length >= 2 * steps - 1, 'every operation after the first switched the GPU to its job')
  for (const job of ['ca', 'cb']) {
    const alone = await runAlone({ job, rank: 0, seed: seeds[job]!, hidden: 512, device: 'cuda', gpu: 0, steps })
    t.same(results.get(job)!.map(a => a.ranks[0]!.result), alone.steps, `${job}: every step bit-identical to the job alone on the GPU`)
    const switches = results.get(job)!.filter(a => a.switched)
    t.comment(`${job}: switch median ${switches.map(a => a.switchMs).sort((a, b) => a - b)[switches.length >> 1]?.toFixed(2)} ms`)
  }
})
