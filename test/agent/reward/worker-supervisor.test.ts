/**
 * The reward worker supervisor (issue 27, item 4) with real child processes
 * (`sleep`, which never fetches work, so each counts as up only when its start
 * grace runs out) and decisions applied as the leader's would be:
 * - start-up is paced: at most workerStartConcurrency workers starting at once;
 * - workers the plan no longer wants stay warm and are reused by the next
 *   plan (the same processes), until workerKeepWarmMs runs out;
 * - a warm worker gives its cores to a wanted worker of another stage;
 * - workers run workerNice nicer than the agent.
 */
import t from 'tap'
import pino from 'pino'
import { setTimeout as sleep } from 'node:timers/promises'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { getPriority, tmpdir } from 'node:os'
import { join } from 'node:path'
import { createWorkerSupervisor, type WorkerSupervisor } from '../../../agent/reward/worker-supervisor.ts'
import { rewardWorkersKind } from '../../../mesh/control/reward/reward-messages.ts'
import type { AppliedDecision } from '../../../mesh/election/decision-log.ts'
import type { RewardStageSpec } from '../../../mesh/control/reward/reward-config.ts'
import type { Teardown } from '../../helpers/agent-process.ts'

const stage = (name: string): RewardStageSpec => ({ name, resource: 'cpu', command: ['sleep', '30'], coresPerWorker: 1, timeoutMs: 10_000 })

function supervisor (t: Teardown, o: { cpuCores: number, keepWarmMs: number, startGraceMs?: number, nice?: number, stages?: RewardStageSpec[], gpus?: number }): { s: WorkerSupervisor, plan(workers: Record<string, number>): void } {
  let listener: ((d: AppliedDecision) => void) | undefined
  let seq = 0
  const s = createWorkerSupervisor({
    stages: o.stages ?? [stage('parse'), stage('verify')], socketPath: '/nonexistent', nodeName: 'n', cpuCores: o.cpuCores, gpus: o.gpus ?? 0,
    heartbeatIntervalMs: 100, workerRestartBackoffMs: 100, workerStopGraceMs: 500, workerStartConcurrency: 3, workerKeepWarmMs: o.keepWarmMs, startGraceMs: o.startGraceMs ?? 600, ...(o.nice !== undefined ? { workerNice: o.nice } : {}),
  }, {
    logger: pino({ level: 'silent' }), selfId: 'me', callLeader: async () => ({ ok: true }), desiredState: () => ({}),
    onApplied: l => { listener = l; return () => { listener = undefined } },
  })
  const controller = new AbortController()
  s.start({ signal: controller.signal })
  t.teardown(async () => { controller.abort(); await s.stop() })
  return { s, plan: workers => listener!({ epoch: 1, leader: 'l', seq: ++seq, kind: rewardWorkersKind, payload: { workers: { me: workers }, wanted: workers, unplaced: {} } }) }
}

const live = (s: WorkerSupervisor, state?: string): Array<{ workerId: string, pid: number }> =>
  s.workers().filter(w => w.pid > 0 && (state === undefined || w.state === state)).map(w => ({ workerId: w.workerId, pid: w.pid }))

t.test('a cold start of 10 workers is paced: 3 starting at once, the next when one fetched work', async t => {
  const { s, plan } = supervisor(t, { cpuCores: 16, keepWarmMs: 0, startGraceMs: 60_000 })
  plan({ verify: 10 })
  // One spawn per event-loop turn: under load the third may take a while; then no fourth follows.
  for (const deadline = performance.now() + 5000; live(s).length < 3 && performance.now() < deadline;) await sleep(20)
  await sleep(300)
  t.equal(live(s).length, 3, 'the first 3 started')
  t.equal(s.workers().filter(w => w.state === 'queued').length, 7, 'the rest wait their turn')
  s.workerUp('n/verify/0') // it fetched work: the next may start
  await sleep(200)
  t.equal(live(s).length, 4, 'one more once a worker is up')
  for (let i = 1; i < 10; i++) {
    s.workerUp(`n/verify/${i}`)
    for (const deadline = performance.now() + 5000; live(s).length < Math.min(10, i + 4) && performance.now() < deadline;) await sleep(20)
  }
  t.equal(live(s).length, 10, 'all started, each when an earlier one was up')
})

t.test('a worker that never fetches counts as up after its start grace', async t => {
  const { s, plan } = supervisor(t, { cpuCores: 16, keepWarmMs: 0, startGraceMs: 800 })
  const t0 = performance.now()
  plan({ verify: 4 })
  for (const deadline = t0 + 10_000; live(s).length < 4 && performance.now() < deadline;) await sleep(20)
  t.equal(live(s).length, 4, 'the fourth started')
  t.ok(performance.now() - t0 >= 750, `after the first ones' grace (${Math.round(performance.now() - t0)} ms)`)
})

t.test('workers no longer wanted stay warm and serve the next plan; they stop when their time runs out', async t => {
  const { s, plan } = supervisor(t, { cpuCores: 8, keepWarmMs: 1500 })
  plan({ verify: 4 })
  for (const deadline = performance.now() + 10_000; live(s).length < 4 && performance.now() < deadline;) await sleep(50)
  const first = live(s)
  plan({}) // the batch completed: no worker wanted
  await sleep(200)
  t.same(live(s, 'warm'), first, 'all four warm, still running')
  plan({ verify: 3 }) // the next batch
  await sleep(200)
  t.same(live(s, 'running'), first.slice(0, 3), 'three served again: the same processes, none started')
  t.same(live(s, 'warm'), first.slice(3), 'the fourth stays warm')
  await sleep(2000)
  t.same(live(s).map(w => w.workerId), ['n/verify/0', 'n/verify/1', 'n/verify/2'], 'the warm one stopped after workerKeepWarmMs')
})

t.test('a warm worker gives its core to a wanted worker of another stage', async t => {
  const { s, plan } = supervisor(t, { cpuCores: 4, keepWarmMs: 60_000 })
  plan({ parse: 4 })
  for (const deadline = performance.now() + 10_000; live(s).length < 4 && performance.now() < deadline;) await sleep(50)
  plan({ parse: 1, verify: 2 }) // stages take turns: 2 of parse's cores are wanted by verify
  for (const deadline = performance.now() + 10_000; live(s, 'running').length < 3 && performance.now() < deadline;) await sleep(50)
  const states = s.workers().filter(w => w.state !== 'stopping').map(w => `${w.workerId} ${w.state}`).sort()
  t.same(states, ['n/parse/0 running', 'n/parse/1 warm', 'n/verify/0 running', 'n/verify/1 running'], '4 cores: the wanted 3 and one warm; the other warm one stopped')
})

t.test('workers run workerNice nicer than the agent, at most 19; 0 leaves them at the agent\'s', async t => {
  const own = getPriority()
  for (const [nice, expected] of [[5, Math.min(19, own + 5)], [19, 19], [0, own]] as const) {
    const { s, plan } = supervisor(t, { cpuCores: 16, keepWarmMs: 0, nice })
    plan({ verify: 2 })
    for (const deadline = performance.now() + 5000; live(s).length < 2 && performance.now() < deadline;) await sleep(20)
    t.same(live(s).map(w => getPriority(w.pid)), [expected, expected], `workerNice ${nice}: both workers at niceness ${expected} (the agent's is ${own})`)
    await s.stop()
  }
})

t.test('a gpu-stage worker sees only its GPU, numbered as the inventory numbers it; a cpu-stage worker sees none', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-env-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const reporting = (name: string, resource: 'cpu' | 'gpu'): RewardStageSpec =>
    ({ ...stage(name), resource, command: ['sh', '-c', `echo "$CUDA_VISIBLE_DEVICES|$CUDA_DEVICE_ORDER" > "${dir}/$(echo "$AGENTD_REWARD_WORKER_ID" | tr / -)"; exec sleep 30`] })
  const { plan } = supervisor(t, { cpuCores: 4, keepWarmMs: 0, stages: [reporting('judge', 'gpu'), reporting('parse', 'cpu')], gpus: 2 })
  plan({ judge: 2, parse: 1 })
  const read = (): string[] => readdirSync(dir).sort().map(f => `${f}: ${readFileSync(join(dir, f), 'utf8').trim()}`)
  for (const deadline = performance.now() + 5000; read().length < 3 && performance.now() < deadline;) await sleep(20)
  const seen = read()
  t.equal(seen.length, 3, `every worker reported: ${seen.join('; ')}`)
  t.same(seen.filter(l => l.includes('-judge-')).map(l => l.split(': ')[1]).sort(), ['0|PCI_BUS_ID', '1|PCI_BUS_ID'], 'the two judges hold GPU 0 and GPU 1, in PCI bus order')
  t.same(seen.filter(l => l.includes('-parse-')).map(l => l.split(': ')[1]), ['|PCI_BUS_ID'], 'the parser sees no GPU')
})
