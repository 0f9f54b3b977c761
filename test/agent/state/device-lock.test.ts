// The device lock as a service (no HTTP): ordering, re-entrancy, waiter
// notification, holder and waiter exit (real child processes), cancellation,
// timeouts and every error.
import t from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import { createDeviceLock, type DeviceLockEvent, type DeviceLockService } from '../../../agent/state/device-lock.ts'
import { createProcfsProcessTable, parseProcStat } from '../../../core/process-table.ts'
import { tempDir } from '../../helpers/agent-process.ts'

const logger = pino({ level: 'silent' })
const self = process.pid

interface Teardown { teardown(fn: () => unknown): void }

async function started (t: Teardown, gpuCount = 2): Promise<{ lock: DeviceLockService, events: DeviceLockEvent[] }> {
  const lock = createDeviceLock({ gpuCount, holderCheckIntervalMs: 20 }, { logger, processes: createProcfsProcessTable() })
  const events: DeviceLockEvent[] = []
  lock.subscribe(e => events.push(e))
  await lock.start()
  t.teardown(() => lock.stop())
  return { lock, events }
}

/** A real process that runs until killed (killed at teardown at the latest). */
async function sleeper (t: Teardown): Promise<ChildProcess & { pid: number }> {
  const child = spawn('sleep', ['60'], { stdio: 'ignore' })
  await once(child, 'spawn')
  t.teardown(() => { child.kill('SIGKILL') })
  return child as ChildProcess & { pid: number }
}

async function until (predicate: () => boolean, timeoutMs = 3000): Promise<void> {
  const began = Date.now()
  while (!predicate()) {
    if (Date.now() - began > timeoutMs) throw new Error('condition not met in time')
    await new Promise(resolve => setTimeout(resolve, 5))
  }
}

t.test('waiters are granted in arrival order (FIFO), one holder at a time', async t => {
  const { lock } = await started(t)
  const granted: string[] = []
  t.same(await lock.acquire({ gpu: 0, pid: self, holder: 'first' }), { gpu: 0, holder: 'first', depth: 1, waiting: 0 })
  const queued = ['b', 'c', 'd', 'e'].map(holder => lock.acquire({ gpu: 0, pid: self, holder }).then(r => { granted.push(holder); return r }))
  t.same(lock.locks()[0]!.waiters.map(w => w.holder), ['b', 'c', 'd', 'e'])
  t.same(lock.release({ gpu: 0, pid: self, holder: 'first' }), { gpu: 0, holder: 'first', depth: 0 })
  t.same(await queued[0], { gpu: 0, holder: 'b', depth: 1, waiting: 3 })
  for (const [i, holder] of ['b', 'c', 'd'].entries()) {
    t.equal(lock.locks()[0]!.holder, holder)
    lock.release({ gpu: 0, pid: self, holder })
    await queued[i + 1]
  }
  t.same(granted, ['b', 'c', 'd', 'e'])
  t.equal(lock.locks()[1]!.holder, null, 'GPUs are independent')
  t.same(await lock.acquire({ gpu: 1, pid: self, holder: 'b' }), { gpu: 1, holder: 'b', depth: 1, waiting: 0 }, 'another GPU is free while GPU 0 is held')
})

t.test('re-entrant for its holder: depth counts acquires, the last release hands over', async t => {
  const { lock } = await started(t)
  t.equal((await lock.acquire({ gpu: 0, pid: self })).holder, `pid:${self}`, 'default holder is the calling process')
  const other = lock.acquire({ gpu: 0, pid: self, holder: 'other' })
  t.same(await lock.acquire({ gpu: 0, pid: self }), { gpu: 0, holder: `pid:${self}`, depth: 2, waiting: 1 }, 're-entry is granted at once even with a waiter')
  t.same(lock.release({ gpu: 0, pid: self }), { gpu: 0, holder: `pid:${self}`, depth: 1 })
  t.equal(lock.locks()[0]!.holder, `pid:${self}`, 'still held at depth 1')
  t.equal(lock.locks()[0]!.waiters.length, 1)
  t.same(lock.release({ gpu: 0, pid: self }), { gpu: 0, holder: `pid:${self}`, depth: 0 })
  t.same(await other, { gpu: 0, holder: 'other', depth: 1, waiting: 0 })
})

t.test('queued requests of one holder are granted together when the first reaches the head', async t => {
  const { lock } = await started(t)
  await lock.acquire({ gpu: 0, pid: self, holder: 'a' })
  const group1 = lock.acquire({ gpu: 0, pid: self, holder: 'group' })
  const b = lock.acquire({ gpu: 0, pid: self, holder: 'b' })
  const group2 = lock.acquire({ gpu: 0, pid: self, holder: 'group' })
  lock.release({ gpu: 0, pid: self, holder: 'a' })
  t.same(await group1, { gpu: 0, holder: 'group', depth: 1, waiting: 1 })
  t.same(await group2, { gpu: 0, holder: 'group', depth: 2, waiting: 1 })
  lock.release({ gpu: 0, pid: self, holder: 'group' })
  t.equal(lock.locks()[0]!.holder, 'group')
  lock.release({ gpu: 0, pid: self, holder: 'group' })
  t.equal((await b).holder, 'b')
})

t.test('the holder is told when someone waits (and a new holder that others wait behind)', async t => {
  const { lock, events } = await started(t)
  await lock.acquire({ gpu: 1, pid: self, holder: 'trainer' })
  t.same(events, [{ type: 'granted', gpu: 1, holder: 'trainer', depth: 1, waiting: 0 }])
  const rollout = lock.acquire({ gpu: 1, pid: self, holder: 'rollout' })
  const reward = lock.acquire({ gpu: 1, pid: self, holder: 'reward' })
  t.same(events.slice(1), [
    { type: 'waiter', gpu: 1, holder: 'trainer', waiter: 'rollout', waiting: 1 },
    { type: 'waiter', gpu: 1, holder: 'trainer', waiter: 'reward', waiting: 2 },
  ], 'the event arrives synchronously with the queued request')
  lock.release({ gpu: 1, pid: self, holder: 'trainer' })
  await rollout
  t.same(events.slice(3), [
    { type: 'released', gpu: 1, holder: 'trainer', reason: 'released' },
    { type: 'granted', gpu: 1, holder: 'rollout', depth: 1, waiting: 1 },
    { type: 'waiter', gpu: 1, holder: 'rollout', waiter: 'reward', waiting: 1 },
  ])
  lock.release({ gpu: 1, pid: self, holder: 'rollout' })
  await reward
})

t.test('a holder that dies (SIGKILL) releases the lock to the next waiter', async t => {
  const { lock, events } = await started(t)
  const worker = await sleeper(t)
  await lock.acquire({ gpu: 0, pid: worker.pid })
  await lock.acquire({ gpu: 0, pid: worker.pid })
  const next = lock.acquire({ gpu: 0, pid: self, holder: 'next' })
  t.same(lock.locks()[0]!.pids, [worker.pid])
  worker.kill('SIGKILL')
  t.same(await next, { gpu: 0, holder: 'next', depth: 1, waiting: 0 }, 'granted although the dead holder was at depth 2')
  t.ok(events.some(e => e.type === 'released' && e.holder === `pid:${worker.pid}` && e.reason === 'holder-exited'))
})

t.test('a named holder shared by processes lasts while any of them runs', async t => {
  const { lock } = await started(t)
  const rank0 = await sleeper(t)
  const rank1 = await sleeper(t)
  await lock.acquire({ gpu: 0, pid: rank0.pid, holder: 'job42/actor' })
  await lock.acquire({ gpu: 0, pid: rank1.pid, holder: 'job42/actor' })
  t.same(lock.locks()[0]!.pids.sort(), [rank0.pid, rank1.pid].sort())
  const next = lock.acquire({ gpu: 0, pid: self, holder: 'next' })
  rank0.kill('SIGKILL')
  await once(rank0, 'exit')
  await until(() => lock.locks()[0]!.pids.length === 1)
  t.equal(lock.locks()[0]!.holder, 'job42/actor', 'still held by the surviving rank')
  rank1.kill('SIGKILL')
  t.equal((await next).holder, 'next')
})

t.test('a waiter whose process exits leaves the queue', async t => {
  const { lock } = await started(t)
  const waiterProcess = await sleeper(t)
  await lock.acquire({ gpu: 0, pid: self, holder: 'a' })
  const gone = lock.acquire({ gpu: 0, pid: waiterProcess.pid, holder: 'gone' })
  const after = lock.acquire({ gpu: 0, pid: self, holder: 'after' })
  waiterProcess.kill('SIGKILL')
  await t.rejects(gone, { code: 'ERR_UNAVAILABLE', message: new RegExp(`process ${waiterProcess.pid} exited while waiting for GPU 0`) })
  t.same(lock.locks()[0]!.waiters.map(w => w.holder), ['after'])
  lock.release({ gpu: 0, pid: self, holder: 'a' })
  t.equal((await after).holder, 'after')
})

t.test('a cancelled waiter (closed connection) leaves the queue; a grant is not affected by a late abort', async t => {
  const { lock } = await started(t)
  await lock.acquire({ gpu: 0, pid: self, holder: 'a' })
  const controller = new AbortController()
  const cancelled = lock.acquire({ gpu: 0, pid: self, holder: 'cancelled', signal: controller.signal })
  const kept = new AbortController()
  const next = lock.acquire({ gpu: 0, pid: self, holder: 'next', signal: kept.signal })
  controller.abort()
  await t.rejects(cancelled, { code: 'ERR_UNAVAILABLE', message: 'acquire of GPU 0 cancelled' })
  t.same(lock.locks()[0]!.waiters.map(w => w.holder), ['next'])
  lock.release({ gpu: 0, pid: self, holder: 'a' })
  t.equal((await next).holder, 'next')
  kept.abort()
  t.equal(lock.locks()[0]!.holder, 'next', 'aborting after the grant changes nothing')
  await t.rejects(lock.acquire({ gpu: 1, pid: self, signal: controller.signal }), { code: 'ERR_UNAVAILABLE' }, 'an already aborted signal is refused')
  t.equal(lock.locks()[1]!.holder, null)
})

t.test('timeoutMs: ERR_LOCK_TIMEOUT and out of the queue; 0 only takes a free lock', async t => {
  const { lock } = await started(t)
  await lock.acquire({ gpu: 0, pid: self, holder: 'a' })
  const began = Date.now()
  await t.rejects(lock.acquire({ gpu: 0, pid: self, holder: 'b', timeoutMs: 60 }), {
    code: 'ERR_LOCK_TIMEOUT', message: 'GPU 0 not granted to b within 60 ms: held by a (depth 1), 0 queued', details: { gpu: 0, holder: 'a', waiting: 0 },
  })
  t.ok(Date.now() - began >= 55, 'waited about the timeout')
  t.same(lock.locks()[0]!.waiters, [], 'no trace left in the queue')
  await t.rejects(lock.acquire({ gpu: 0, pid: self, holder: 'b', timeoutMs: 0 }), { code: 'ERR_LOCK_TIMEOUT' })
  t.equal((await lock.acquire({ gpu: 1, pid: self, holder: 'b', timeoutMs: 0 })).depth, 1, 'a free GPU is granted with timeoutMs 0')
  const inTime = lock.acquire({ gpu: 0, pid: self, holder: 'c', timeoutMs: 5000 })
  lock.release({ gpu: 0, pid: self, holder: 'a' })
  t.equal((await inTime).holder, 'c', 'granted before the timeout')
})

t.test('errors: release by a non-holder, unknown GPU, bad holder names and timeouts, dead caller', async t => {
  const { lock } = await started(t)
  t.throws(() => lock.release({ gpu: 0, pid: self }), { code: 'ERR_LOCK_NOT_HELD', message: `GPU 0 is not held by pid:${self} (it is free)` })
  await lock.acquire({ gpu: 0, pid: self, holder: 'owner' })
  t.throws(() => lock.release({ gpu: 0, pid: self, holder: 'intruder' }), { code: 'ERR_LOCK_NOT_HELD', message: 'GPU 0 is not held by intruder (held by owner)' })
  t.equal(lock.locks()[0]!.depth, 1, 'a refused release changes nothing')
  for (const gpu of [2, -1, 0.5, Number.NaN]) {
    await t.rejects(lock.acquire({ gpu, pid: self }), { code: 'ERR_NOT_FOUND', message: `no GPU ${gpu} on this node (GPUs 0-1)` })
    t.throws(() => lock.release({ gpu, pid: self }), { code: 'ERR_NOT_FOUND' })
  }
  for (const holder of ['', 'pid:1', '-x', 'a b', 'x'.repeat(129)]) {
    await t.rejects(lock.acquire({ gpu: 1, pid: self, holder }), { code: 'ERR_BAD_REQUEST', message: /invalid holder/ }, JSON.stringify(holder))
  }
  for (const timeoutMs of [-1, 1.5, 2 ** 31]) {
    await t.rejects(lock.acquire({ gpu: 1, pid: self, timeoutMs }), { code: 'ERR_BAD_REQUEST', message: /timeoutMs must be an integer/ })
  }
  const dead = spawn('true')
  await once(dead, 'exit')
  await t.rejects(lock.acquire({ gpu: 1, pid: dead.pid! }), { code: 'ERR_UNAVAILABLE', message: `process ${dead.pid} is not running` })
  t.same(lock.locks()[1], { gpu: 1, holder: null, pids: [], depth: 0, heldSinceMs: null, waiters: [] }, 'failed requests leave no state')
  t.throws(() => createDeviceLock({ gpuCount: 0 }, { logger, processes: createProcfsProcessTable() }), { code: 'ERR_ARG_INVALID' })
})

t.test('lifecycle: unavailable before start; stop rejects waiters, ends holds, is idempotent', async t => {
  const lock = createDeviceLock({ gpuCount: 1 }, { logger, processes: createProcfsProcessTable() })
  await t.rejects(lock.acquire({ gpu: 0, pid: self }), { code: 'ERR_UNAVAILABLE', message: 'the device lock is not started' })
  const events: DeviceLockEvent[] = []
  lock.subscribe(e => events.push(e))
  await lock.start()
  await lock.acquire({ gpu: 0, pid: self, holder: 'a' })
  const waiting = lock.acquire({ gpu: 0, pid: self, holder: 'b' })
  await lock.stop()
  await t.rejects(waiting, { code: 'ERR_UNAVAILABLE', message: 'the device lock is stopping' })
  t.same(events.at(-1), { type: 'released', gpu: 0, holder: 'a', reason: 'stopped' })
  await lock.stop()
  await t.rejects(lock.acquire({ gpu: 0, pid: self }), { code: 'ERR_UNAVAILABLE', message: 'the device lock is stopping' })
})

t.test('the start signal stops the exit checks', async t => {
  const controller = new AbortController()
  const lock = createDeviceLock({ gpuCount: 1, holderCheckIntervalMs: 10 }, { logger, processes: createProcfsProcessTable() })
  t.teardown(() => lock.stop())
  await lock.start({ signal: controller.signal })
  const worker = await sleeper(t)
  await lock.acquire({ gpu: 0, pid: worker.pid })
  controller.abort()
  worker.kill('SIGKILL')
  await once(worker, 'exit')
  await new Promise(resolve => setTimeout(resolve, 60))
  t.equal(lock.locks()[0]!.holder, `pid:${worker.pid}`, 'no checks after the signal fired')
})

t.test('a reused pid is not taken for the exited holder it replaces, even before the next check', async t => {
  const root = tempDir(t, 'agentd-proc-')
  const stat = (start: number): string => `123 (worker) S 1 123 123 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 ${start} 1 1\n`
  mkdirSync(join(root, '123'))
  writeFileSync(join(root, '123/stat'), stat(5000))
  // A check interval far beyond the test: only the request itself can notice the reuse.
  const lock = createDeviceLock({ gpuCount: 1, holderCheckIntervalMs: 60_000 }, { logger, processes: createProcfsProcessTable(root) })
  const events: DeviceLockEvent[] = []
  lock.subscribe(e => events.push(e))
  await lock.start()
  t.teardown(() => lock.stop())
  t.equal((await lock.acquire({ gpu: 0, pid: 123 })).depth, 1)
  writeFileSync(join(root, '123/stat'), stat(9000))
  t.throws(() => lock.release({ gpu: 0, pid: 123 }), { code: 'ERR_LOCK_NOT_HELD', message: 'GPU 0 is not held by pid:123 (it is free)' }, 'the newcomer cannot release the old hold')
  t.same(events.at(-1), { type: 'released', gpu: 0, holder: 'pid:123', reason: 'holder-exited' })
  t.same(await lock.acquire({ gpu: 0, pid: 123 }), { gpu: 0, holder: 'pid:123', depth: 1, waiting: 0 }, 'a fresh hold, not re-entry at depth 2')
})

t.test('process identity: pid plus start time; reused pids and zombies are not the holder', async t => {
  t.same(parseProcStat('42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 777 1000 10'), { state: 'S', parent: 1, startTicks: '777' }, 'parentheses in the command name')
  t.equal(parseProcStat('garbage'), null)
  const root = tempDir(t, 'agentd-proc-')
  const stat = (state: string, start: number): string => `123 (worker) ${state} 1 123 123 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 ${start} 1 1\n`
  mkdirSync(join(root, '123'))
  writeFileSync(join(root, '123/stat'), stat('R', 5000))
  const table = createProcfsProcessTable(root)
  const identity = table.identify(123)
  t.same(identity, { pid: 123, startTicks: '5000' })
  t.equal(await table.isRunning(identity!), true)
  writeFileSync(join(root, '123/stat'), stat('S', 9000))
  t.equal(await table.isRunning(identity!), false, 'same pid, later start time: another process')
  writeFileSync(join(root, '123/stat'), stat('Z', 5000))
  t.equal(await table.isRunning(identity!), false, 'a zombie has exited')
  t.equal(table.identify(123), null)
  t.equal(table.identify(999), null, 'no such pid')
  t.equal(table.identify(-1), null)
  const real = createProcfsProcessTable()
  t.equal(await real.isRunning(real.identify(self)!), true, 'this process runs')
})

t.test('descendsFrom: a process, its child and grandchild descend from it; not the other way round', async t => {
  const table = createProcfsProcessTable()
  const shell = spawn('sh', ['-c', 'sleep 30 & wait'], { stdio: 'ignore' })
  t.teardown(() => { shell.kill('SIGKILL') })
  let grandchild: number | undefined
  for (const deadline = performance.now() + 5000; grandchild === undefined && performance.now() < deadline; await sleep(20)) {
    // A process listed by readdir may be gone before its stat is read (other tests run beside this one).
    const statOf = (d: string): string => { try { return readFileSync(`/proc/${d}/stat`, 'utf8') } catch { return '' } }
    grandchild = Number(readdirSync('/proc').find(d => /^\d+$/.test(d) && statOf(d).includes(`) S ${shell.pid} `)) ?? NaN) || undefined
  }
  t.ok(grandchild !== undefined, 'the shell started sleep')
  t.ok(table.descendsFrom(shell.pid!, self), 'the child descends from this process')
  t.ok(table.descendsFrom(grandchild!, self), 'and the grandchild')
  t.ok(table.descendsFrom(self, self), 'a process counts as its own')
  t.notOk(table.descendsFrom(self, shell.pid!), 'a parent does not descend from its child')
  t.notOk(table.descendsFrom(999_999_999, self), 'nor does a process that does not exist')
  process.kill(grandchild!, 'SIGKILL')
})
