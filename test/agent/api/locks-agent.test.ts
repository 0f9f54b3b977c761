// The device lock end to end against a real dev agent with two faked GPUs:
// lock hand-over when a holder process is SIGKILLed, a waiter process that
// dies leaves the queue, agentctl locks, and a node without GPUs.
import t from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { agentctlMain, runNode, spawnAgent, tempDir, type AgentProcess } from '../../helpers/agent-process.ts'
import type { AcquireGpuResult } from '../../../agent/state/device-lock-schema.ts'

interface Teardown { teardown(fn: () => unknown): void }

const clientProcessMain = fileURLToPath(new URL('./locks-client-process.ts', import.meta.url))
const fakeGpus = JSON.stringify([
  { model: 'Fake GPU', memoryBytes: 85_520_809_984, uuid: 'GPU-fake-0', pciBus: '00000000:17:00.0' },
  { model: 'Fake GPU', memoryBytes: 85_520_809_984, uuid: 'GPU-fake-1', pciBus: '00000000:65:00.0' },
])

async function agentWithGpus (t: Teardown, gpus: string): Promise<AgentProcess> {
  const stateDir = tempDir(t)
  return spawnAgent(t, { stateDir, args: ['--dev', '--state-dir', stateDir, '--set', `inventory.gpus=${gpus}`, '--set', 'locks.holderCheckIntervalMs=50'] })
}

interface ClientProcess { proc: ChildProcess & { pid: number }, granted: Promise<AcquireGpuResult> }

/** Another process that acquires `gpu` through the API; `granted` resolves with the grant it printed. */
async function clientProcess (t: Teardown, agent: AgentProcess, gpu: number, holder?: string): Promise<ClientProcess> {
  const proc = spawn(process.execPath, [clientProcessMain, agent.socketPath, String(gpu), ...(holder !== undefined ? [holder] : [])], { stdio: ['ignore', 'pipe', 'inherit'] })
  await once(proc, 'spawn')
  t.teardown(() => { proc.kill('SIGKILL') })
  const granted = new Promise<AcquireGpuResult>((resolve, reject) => {
    let out = ''
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString()
      if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!) as AcquireGpuResult)
    })
    proc.once('exit', (code, signal) => reject(new Error(`client process exited (${code ?? signal}) before a grant`)))
  })
  granted.catch(() => {})
  return { proc: proc as ChildProcess & { pid: number }, granted }
}

async function until (predicate: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const began = Date.now()
  while (!(await predicate())) {
    if (Date.now() - began > timeoutMs) throw new Error('condition not met in time')
    await new Promise(resolve => setTimeout(resolve, 20))
  }
}

// One agent for the tests with GPUs (start-up dominates their time): they use different GPUs.
const agent = await agentWithGpus(t, fakeGpus)

t.test('a SIGKILLed holder process passes the lock to the next waiter; a dead waiter leaves the queue', async t => {
  t.match((await agent.client.status()).subsystems.find(s => s.id === 'device-lock'), { state: 'ok' })
  const first = await clientProcess(t, agent, 0)
  t.same(await first.granted, { gpu: 0, holder: `pid:${first.proc.pid}`, depth: 1, waiting: 0 })

  const second = await clientProcess(t, agent, 0, 'job42/rollout')
  await until(async () => (await agent.client.locks()).gpus[0]!.waiters.length === 1)
  const quitter = await clientProcess(t, agent, 0, 'quitter')
  await until(async () => (await agent.client.locks()).gpus[0]!.waiters.length === 2)
  const mine = agent.client.acquireGpu(0, { holder: 'test' })
  await until(async () => (await agent.client.locks()).gpus[0]!.waiters.length === 3)
  t.same((await agent.client.locks()).gpus[0]!.waiters.map(w => [w.holder, w.pid]),
    [['job42/rollout', second.proc.pid], ['quitter', quitter.proc.pid], ['test', process.pid]])

  quitter.proc.kill('SIGKILL')
  await until(async () => (await agent.client.locks()).gpus[0]!.waiters.length === 2)
  t.same((await agent.client.locks()).gpus[0]!.waiters.map(w => w.holder), ['job42/rollout', 'test'], 'the dead waiter left the queue')

  first.proc.kill('SIGKILL')
  t.same(await second.granted, { gpu: 0, holder: 'job42/rollout', depth: 1, waiting: 1 }, 'the next waiter got the lock of the killed holder')
  second.proc.kill('SIGKILL')
  t.same(await mine, { gpu: 0, holder: 'test', depth: 1, waiting: 0 })
  t.match(agent.output(), /device lock holder exited; releasing/)
  t.same(await agent.client.releaseGpu(0, { holder: 'test' }), { gpu: 0, holder: 'test', depth: 0 })
})

t.test('agentctl locks: a table of every GPU, and the API\'s JSON with --json', async t => {
  await agent.client.acquireGpu(1, { holder: 'trainer' })
  await agent.client.acquireGpu(1, { holder: 'trainer' })
  const waiting = agent.client.acquireGpu(1)
  await until(async () => (await agent.client.locks()).gpus[1]!.waiters.length === 1)

  const human = await runNode(agentctlMain, ['--socket', agent.socketPath, 'locks'])
  t.equal(human.code, 0, human.stderr)
  const lines = human.stdout.trimEnd().split('\n')
  t.match(lines[0], /^GPU\s+HOLDER\s+PID\s+DEPTH\s+SINCE\s+WAITERS$/)
  t.match(lines[1], /^0\s+-\s+-\s+0\s+-\s+-$/)
  t.match(lines[2], new RegExp(`^1\\s+trainer\\s+${process.pid}\\s+2\\s+\\d+(\\.\\d)?s ago\\s+pid:${process.pid}$`))

  const json = await runNode(agentctlMain, ['--socket', agent.socketPath, 'locks', '--json'])
  t.equal(json.code, 0)
  t.same(JSON.parse(json.stdout), await agent.client.locks())

  await agent.client.releaseGpu(1, { holder: 'trainer' })
  await agent.client.releaseGpu(1, { holder: 'trainer' })
  t.equal((await waiting).holder, `pid:${process.pid}`)
})

t.test('a node without GPUs: device-lock skipped with the reason, lock routes and agentctl answer ERR_UNAVAILABLE', async t => {
  const gpuless = await agentWithGpus(t, '[]')
  t.match((await gpuless.client.status()).subsystems.find(s => s.id === 'device-lock'), { state: 'skipped', reason: 'no GPUs in the inventory' })
  const expected = { code: 'ERR_UNAVAILABLE', message: 'the device lock is unavailable: no GPUs in the inventory' }
  await t.rejects(gpuless.client.acquireGpu(0), expected)
  await t.rejects(gpuless.client.locks(), expected)
  const res = await runNode(agentctlMain, ['--socket', gpuless.socketPath, 'locks'])
  t.equal(res.code, 1)
  t.equal(res.stderr, 'agentctl: ERR_UNAVAILABLE: the device lock is unavailable: no GPUs in the inventory\n')
})
