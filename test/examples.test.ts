// The files in examples/ work as the examples README shows them: the workflow and the RLinf config plan, the reward trace
// replays, and the live job runs on a dev agent with examples/worker.py as its worker (real agent,
// real Python process; skipped with the reason where no Python has torch).
import t from 'tap'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { agentctlMain, repoRoot, runNode, spawnAgent, tempDir } from './helpers/agent-process.ts'
import { python, torchSkipReason } from './helpers/python.ts'

const example = (name: string): string => join(repoRoot, 'examples', name)

t.test('plan workflow examples/workflow.json', async t => {
  const r = await runNode(agentctlMain, ['plan', 'workflow', example('workflow.json')])
  t.equal(r.code, 0, r.stderr)
  t.match(r.stdout, /COMPONENT\s+GPUS\s+MODE\nrollout\s+/)
})

t.test('plan workflow examples/rlinf-grpo.yaml', async t => {
  const r = await runNode(agentctlMain, ['plan', 'workflow', example('rlinf-grpo.yaml')])
  t.equal(r.code, 0, r.stderr)
  t.match(r.stdout, /paste into the config:\ncluster:\n {2}component_placement:\n/)
})

t.test('sim reward --trace examples/reward-trace.json', async t => {
  const r = await runNode(agentctlMain, ['sim', 'reward', '--trace', example('reward-trace.json'), '--policy', 'distrs', '--json'])
  t.equal(r.code, 0, r.stderr)
  t.equal(JSON.parse(r.stdout).policy, 'distrs')
})

const skip = torchSkipReason()
t.test('examples/live-job.json with examples/worker.py on a dev agent', { skip }, async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir })
  const ctl = async (...args: string[]) => await runNode(agentctlMain, ['--socket', agent.socketPath, ...args])
  const submitted = await ctl('jobs', 'submit', example('live-job.json'))
  t.equal(submitted.code, 0, submitted.stderr)
  t.match(submitted.stdout, /job demo submitted/)

  const worker = spawn(python, [example('worker.py'), '--socket', agent.socketPath, '--job', 'demo', '--rank', '0'], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { if (worker.exitCode === null) worker.kill('SIGKILL') })
  let stderr = ''
  worker.stderr!.on('data', (c: Buffer) => { stderr += c.toString() })
  const registered = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the example worker did not register within 60 s:\n${stderr}`)), 60_000)
    createInterface({ input: worker.stdout! }).on('line', line => { if (/registered/.test(line)) { clearTimeout(timer); resolve(line) } })
    worker.once('exit', code => { clearTimeout(timer); reject(new Error(`the example worker exited with ${code}:\n${stderr}`)) })
  })
  t.match(registered, /rank 0 of job demo registered with node /)

  const losses: number[] = []
  for (const step of [0, 1, 2]) {
    const r = await ctl('jobs', 'op', 'demo', 'train_step', '--args', JSON.stringify({ step }), '--json')
    t.equal(r.code, 0, r.stderr)
    const answer = JSON.parse(r.stdout) as { ranks: Array<{ result: { step: number, loss: number } }> }
    t.equal(answer.ranks[0]!.result.step, step, `step ${step} ran`)
    losses.push(answer.ranks[0]!.result.loss)
  }
  t.ok(losses.every(l => Number.isFinite(l) && l > 0), `losses are numbers: ${losses.join(', ')}`)
  const wrong = await ctl('jobs', 'op', 'demo', 'train_step', '--args', JSON.stringify({ step: 0 }), '--json')
  t.equal(wrong.code, 1, 'a step out of order fails')
  t.match(JSON.parse(wrong.stdout).error, { code: 'ERR_OPERATION_FAILED', message: /expected step 3/ })
  const evaluated = await ctl('jobs', 'op', 'demo', 'evaluate', '--json')
  t.equal(evaluated.code, 0, evaluated.stderr)
  t.ok(Number.isFinite((JSON.parse(evaluated.stdout) as { ranks: Array<{ result: { loss: number } }> }).ranks[0]!.result.loss), 'evaluate answers a loss')
  const top = await ctl('jobs', 'top')
  t.equal(top.code, 0, top.stderr)
  t.match(top.stdout, /demo/)
})

t.test('examples/reward_trainer.py against a dev agent whose stage runs the example reward worker (README "Reward service")', async t => {
  const stages = [{ name: 'verify', resource: 'cpu', command: [python, join(repoRoot, 'agent/reward/examples/reward-worker.py')], coresPerWorker: 1, timeoutMs: 30_000 }]
  const agent = await spawnAgent(t, { env: { AGENTD_REWARD_STAGES: JSON.stringify(stages), AGENTD_REWARD_CPU_CORES: '2' } })
  const run = spawn(python, [example('reward_trainer.py'), '--socket', agent.socketPath, '--batches', '2', '--size', '8', '--stage-ms', '300', '--cancel-last'], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { if (run.exitCode === null) run.kill('SIGKILL') })
  let out = ''; let err = ''
  run.stdout!.on('data', (c: Buffer) => { out += c.toString() })
  run.stderr!.on('data', (c: Buffer) => { err += c.toString() })
  const code = await new Promise<number | null>(resolve => run.once('exit', resolve))
  t.equal(code, 0, err)
  t.match(out, /^batch 0: 8 results \(ok 8\), mean reward of the ok ones 0\.41, in [\d.]+ s$/m, 'a batch: every result, the rewards the payloads asked for')
  const cancelled = /^batch 1: cancelled after \d+ results: (\d+) requests cancelled, (\d+) had finished$/m.exec(out)
  t.ok(cancelled !== null && Number(cancelled[1]) >= 1 && Number(cancelled[1]) + Number(cancelled[2]) === 8, `the last batch given up: ${cancelled?.[0]}`)
  t.match(out, /^batch 1: 8 results \(cancelled \d+, ok \d+\)/m, 'each of its requests ended, cancelled or ok')
  const status = await agent.client.rewardStatus()
  t.match(status.tasks, [{ task: 'math', activeBatches: 0, completedBatches: 2, historyRequests: 8 }], 'both batches ended; the cancelled one is not the planner\'s history')
})
