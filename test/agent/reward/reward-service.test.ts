/**
 * The agent's reward service from a stub leader, with a real worker process
 * (`sleep`, a computation that never finishes): a worker still on a lease
 * after the lease's stage timeout is terminated and restarted (DistRS §3.1),
 * and a worker that completes its lease in time is left alone.
 */
import t from 'tap'
import pino from 'pino'
import { setTimeout as sleep } from 'node:timers/promises'
import { createRewardService } from '../../../agent/reward/reward-service.ts'
import { defaultRewardConfig } from '../../../mesh/control/reward/reward-config.ts'
import { rewardWorkersKind, type RewardLease } from '../../../mesh/control/reward/reward-messages.ts'

t.test('a worker past its lease\'s stage timeout is terminated and restarted', async t => {
  const lost: string[] = []
  let leaseN = 0
  const lease = (): RewardLease => ({ leaseId: `L${++leaseN}`, requestId: `r${leaseN}`, task: 't', batch: 0, stage: 'judge', attempt: 1, payload: {}, timeoutMs: 200, lastStage: true })
  const service = createRewardService({
    config: { ...defaultRewardConfig, stages: [{ name: 'judge', resource: 'cpu', command: ['sleep', '600'], coresPerWorker: 1, timeoutMs: 200 }], heartbeatIntervalMs: 100, leaseTimeoutMs: 1000, workerRestartBackoffMs: 50 },
    socketPath: '/nonexistent.sock', nodeName: 'node', detectedCpuCores: 2, gpus: 0,
  }, {
    logger: pino({ level: 'silent' }),
    selfId: 'self',
    leader: {
      async callLeader (method: string, body: any) {
        if (method === 'reward.fetch') return { lease: lease() }
        if (method === 'reward.worker-lost') lost.push(body.why)
        return { ok: true, accepted: true }
      },
      desiredState: () => ({ [rewardWorkersKind]: { workers: { self: { judge: 1 } }, wanted: { judge: 1 }, unplaced: {} } }),
      onApplied: () => () => {},
    } as any,
  })
  const controller = new AbortController()
  await service.start({ signal: controller.signal })
  const workerId = 'node/judge/0'
  const local = async () => (await service.status()).local.workers.find(w => w.workerId === workerId)
  for (const deadline = performance.now() + 5000; (await local())?.pid === 0 || (await local()) === undefined;) { if (performance.now() > deadline) break; await sleep(50) }
  const pidBefore = (await local())!.pid
  // A lease completed in time: nothing happens.
  const worker = async (): Promise<{ pid: number }> => ({ pid: (await local())!.pid })
  // Issue 27, item 6: only the worker's own process (or one it started) fetches or completes its work.
  const fetched = { n: 0 }
  for (const caller of [{ pid: process.pid }, { pid: 1 }, null]) {
    await t.rejects(service.fetchWork({ workerId, waitMs: 0 }, caller), { code: 'ERR_FORBIDDEN', message: /only the worker's own process|cannot tell which process/ }, `fetch by ${caller === null ? 'an unknown process' : `pid ${caller.pid}`} refused`)
    await t.rejects(service.completeWork({ workerId, leaseId: 'L0', reward: 0.5 }, caller), { code: 'ERR_FORBIDDEN' }, 'and its completion')
  }
  t.equal(leaseN, fetched.n, 'nothing reached the leader')
  const first = (await service.fetchWork({ workerId, waitMs: 0 }, await worker())).lease!
  await service.completeWork({ workerId, leaseId: first.leaseId, reward: 1 }, await worker())
  await sleep(1500)
  t.same(lost, [], 'a worker that completed its lease in time keeps running')
  // A lease never completed: the worker is killed once 200 ms + the 1 s grace have passed, then restarted.
  await service.fetchWork({ workerId, waitMs: 0 }, await worker())
  for (const deadline = performance.now() + 5000; lost.length === 0 && performance.now() < deadline;) await sleep(50)
  t.match(lost, [/signal SIGKILL/], 'terminated (reported lost; the leader already timed its request out)')
  for (const deadline = performance.now() + 5000; (await local())?.state !== 'running' || (await local())?.pid === pidBefore;) { if (performance.now() > deadline) break; await sleep(50) }
  t.match(await local(), { state: 'running', crashes: 0 }, 'restarted, without counting as a crash')
  t.not((await local())!.pid, pidBefore, 'a new process')

  // A worker that crashes on a lease and is restarted: the lease's timer must not kill the new process.
  await service.fetchWork({ workerId, waitMs: 0 }, await worker())
  const crashed = (await local())!.pid
  process.kill(crashed, 'SIGKILL')
  for (const deadline = performance.now() + 5000; (await local())?.state !== 'running' || (await local())?.pid === crashed;) { if (performance.now() > deadline) break; await sleep(50) }
  const restarted = (await local())!.pid
  t.not(restarted, crashed, 'the crashed worker was restarted')
  const lostBefore = lost.length
  await sleep(1500) // past the lease's 200 ms timeout + 1 s grace
  t.equal((await local())!.pid, restarted, 'the restarted process is left running')
  t.notOk(lost.slice(lostBefore).some(why => /ran past|SIGKILL/.test(why) && !why.includes(String(crashed))), 'nothing terminated it')
  controller.abort()
  await service.stop()
})

t.test('an agent without stages does not report to the leader; one with stages does', async t => {
  const calls = async (stages: typeof defaultRewardConfig.stages): Promise<string[]> => {
    const methods: string[] = []
    const service = createRewardService({
      config: { ...defaultRewardConfig, stages, heartbeatIntervalMs: 50, leaseTimeoutMs: 1000 },
      socketPath: '/nonexistent.sock', nodeName: 'node', detectedCpuCores: 2, gpus: 0,
    }, {
      logger: pino({ level: 'silent' }),
      selfId: 'self',
      leader: {
        async callLeader (method: string) { methods.push(method); return { ok: true } },
        desiredState: () => ({}),
        onApplied: () => () => {},
      } as any,
    })
    const controller = new AbortController()
    await service.start({ signal: controller.signal })
    await sleep(300)
    controller.abort()
    await service.stop()
    return methods
  }
  t.same(await calls([]), [], 'no stages: no heartbeat in 300 ms (6 periods)')
  const withStage = await calls([{ name: 'judge', resource: 'cpu', command: ['sleep', '600'], coresPerWorker: 1, timeoutMs: 200 }])
  t.ok(withStage.filter(m => m === 'reward.heartbeat').length >= 3, `a stage: heartbeats every period (${withStage.length} calls)`)
})
