// A real agent restarted with many durable keys: its API listens while the NVMe tier recovers them,
// answering status ("starting", the state subsystem pending) and health (503 ERR_STARTING) until
// every subsystem started, then 200; the durable keys are back, the spilled durability "memory" ones not.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { AgentError } from '../../core/errors.ts'
import { spawnAgent, tempDir } from '../helpers/agent-process.ts'
import { makeShm } from '../native/helpers.ts'
import type { StatusBody } from '../../agent/api/wire/status.ts'

const keyBytes = 4096
const durableKeys = 10_000
const batch = 1000
const key = (ns: string, i: number): string => `${ns}/k${i}:param@[0]/[${keyBytes}]:u8#v1`

t.test('restarted with 10k durable keys, the agent answers status and health while it recovers them', async t => {
  const stateDir = tempDir(t)
  const args = ['--dev', '--state-dir', stateDir, '--set', 'state.hostPoolBytes=33554432', '--set', 'state.nvmeCapacityBytes=1073741824']
  const first = await spawnAgent(t, { stateDir, args })
  const source = makeShm(t, batch * keyBytes)
  const tensors = (ns: string, from: number) => Array.from({ length: batch }, (_, i) => ({ key: key(ns, from + i), source: { kind: 'shm', name: source, offset: i * keyBytes } }))
  for (let b = 0; b < durableKeys / batch; b++) await first.client.call('POST', '/v1/state/offload', { tensors: tensors('restart/durable', b * batch), durability: 'nvme' })
  // Twice the pool of durability "memory" keys: most of them spill to NVMe.
  for (let b = 0; b < 16; b++) await first.client.call('POST', '/v1/state/offload', { tensors: tensors('restart/memory', b * batch) })
  first.proc.kill('SIGTERM')
  t.equal((await first.exited).code, 0)

  const second = await spawnAgent(t, { stateDir, args, waitReady: false })
  const seen = { starting: 0, statePending: 0 }
  for (;;) {
    if (second.proc.exitCode !== null) throw new Error(`the agent exited:\n${second.output()}`)
    try {
      await second.client.health()
      break
    } catch (err) {
      if (!(err instanceof AgentError) || err.code !== 'ERR_STARTING') { await sleep(2); continue } // not listening yet
      if (seen.starting++ === 0) t.match(err.message, /the agent is starting \(subsystems not started yet: .*state/, 'the answer names what is still starting')
      const status: StatusBody = await second.client.status()
      if (status.state === 'starting' && status.subsystems.some(s => s.id === 'state' && s.state === 'pending')) seen.statePending++
    }
  }
  t.ok(seen.starting > 0, `health answered ERR_STARTING ${seen.starting} times during recovery`)
  t.ok(seen.statePending > 0, 'status answered "starting" with the state subsystem pending')
  t.equal((await second.client.status()).state, 'ready')
  const lines = second.output().split('\n')
  const at = (msg: string): number => lines.findIndex(l => l.includes(`"msg":"${msg}"`))
  t.ok(at('local API listening') >= 0 && at('local API listening') < at('state manager ready'), 'the API listened before the recovery ended')

  const keys: Array<{ key: string, durable: boolean }> = []
  for (let cursor: string | null = ''; cursor !== null;) {
    const page: { keys: Array<{ key: string, durable: boolean }>, nextCursor: string | null } = await second.client.call('GET', `/v1/state/residency?prefix=restart/&limit=2000${cursor !== '' ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
    keys.push(...page.keys)
    cursor = page.nextCursor
  }
  t.equal(keys.length, durableKeys, 'every durable key is back, no durability "memory" key')
  t.ok(keys.every(k => k.key.startsWith('restart/durable/') && k.durable))
})
