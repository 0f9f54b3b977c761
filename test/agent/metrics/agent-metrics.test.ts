// The collectors (agent/metrics/agent-metrics.ts) over stub components and a real device lock: what each
// subsystem's view becomes, that a subsystem not running adds nothing, and that every scrape parses strictly.
import t from 'tap'
import pino from 'pino'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAgentMetrics, type AgentMetricsComponents } from '../../../agent/metrics/agent-metrics.ts'
import { renderExposition } from '../../../agent/metrics/exposition.ts'
import { createDeviceLock } from '../../../agent/state/device-lock.ts'
import { createProcfsProcessTable } from '../../../core/process-table.ts'
import type { ResidencySummary } from '../../../agent/state/state-manager.ts'
import type { WeightsCounters } from '../../../agent/weights/weights-service.ts'
import type { MeshInfo } from '../../../mesh/membership/mesh-views.ts'
import type { LeaderViewBody } from '../../../mesh/election/leader-views.ts'
import type { JobsView } from '../../../mesh/control/jobs/job-table.ts'
import type { RewardStatus } from '../../../mesh/control/reward/reward-messages.ts'
import { parsePrometheusText, sampleValue, type ParsedFamily } from './prometheus-text.ts'

const logger = pino({ level: 'silent' })
const MiB = 2 ** 20

const none: AgentMetricsComponents = {
  logger,
  subsystems: () => [{ id: 'identity', state: 'ok' }, { id: 'state', state: 'skipped' }],
  inventory: () => undefined,
  deviceLock: () => undefined,
  stateManager: () => undefined,
  weights: () => undefined,
  mesh: () => undefined,
  leader: () => undefined,
  jobs: () => undefined,
  reward: () => undefined,
  rollout: () => undefined,
}

async function scrape (components: Partial<AgentMetricsComponents>): Promise<Map<string, ParsedFamily>> {
  const metrics = createAgentMetrics({ version: '9.9.9', startedAtMs: performance.now() - 5000 }, { ...none, ...components })
  metrics.start()
  try {
    return parsePrometheusText(renderExposition(await metrics.collect()))
  } finally {
    metrics.stop()
  }
}

const residency: ResidencySummary = {
  tiers: { device: { capacityBytes: 0, usedBytes: 0 }, host: { capacityBytes: 64 * MiB, usedBytes: 4 * MiB }, nvme: { capacityBytes: 4096 * MiB, usedBytes: MiB } },
  logicalBytes: 16 * MiB,
  storedBytes: 5 * MiB,
  dedupRatio: 16 / 5,
  namespaces: [{ namespace: 'job1/actor', keys: 4, logicalBytes: 16 * MiB, storedBytes: 4 * MiB, quotaBytes: 8 * MiB }, { namespace: 'job2/"x"', keys: 1, logicalBytes: MiB, storedBytes: MiB, quotaBytes: null }],
  hostPool: { freeBytes: 60 * MiB, largestFreeBytes: 60 * MiB, fragmentation: 0 },
  shm: { regions: 1, bytes: 2 * MiB },
  counters: { offloadCopies: 4, deduplicated: 12, spilled: 1, promoted: 2, onloadCopies: 3, shmAdopted: 5, rangeReadBytes: 6 },
  keyCounts: { host: 4, nvme: 1 },
}

const leaderView: LeaderViewBody = {
  leaderId: 'peerA', epoch: 7, backend: 'embedded', voters: ['peerA', 'peerB', 'peerC'], self: 'leader', selfId: 'peerA', voterSetId: 'vs',
  acting: true, applied: { epoch: 7, seq: 42 }, commitSeq: 42, log: { epoch: 7, seq: 42 }, leaseRemainingMs: 1500, otherVoterSets: [],
  leaderHeardMsAgo: 0, decisions: { applied: 40, rejected: 1, snapshots: 2, violations: 0 },
}

t.test('with every subsystem off: process, build and subsystem series only, no zeros for the others', async t => {
  const m = await scrape({})
  t.same([...m.keys()].filter(n => !n.startsWith('agentd_process_')).sort(), [
    'agentd_build_info', 'agentd_event_loop_delay_seconds', 'agentd_subsystem_state', 'agentd_uptime_seconds',
  ])
  t.equal(sampleValue(m, 'agentd_build_info', { version: '9.9.9' }), 1)
  t.ok(sampleValue(m, 'agentd_uptime_seconds')! >= 5)
  t.ok(sampleValue(m, 'agentd_process_resident_memory_bytes')! > 0)
  t.ok(sampleValue(m, 'agentd_process_cpu_seconds_total')! > 0)
  t.equal(m.get('agentd_process_cpu_seconds_total')!.type, 'counter')
  t.equal(sampleValue(m, 'agentd_subsystem_state', { subsystem: 'state', state: 'skipped' }), 1)
  t.equal(sampleValue(m, 'agentd_subsystem_state', { subsystem: 'state', state: 'ok' }), 0)
  t.equal(m.get('agentd_subsystem_state')!.samples.length, 10, 'every state of every subsystem')
  t.equal(m.get('agentd_event_loop_delay_seconds')!.type, 'summary')
})

t.test('the event-loop delay: quantiles of the last window, sum and count growing', async t => {
  const metrics = createAgentMetrics({ version: 'v', startedAtMs: 0, eventLoopResolutionMs: 10 }, none)
  metrics.start()
  t.teardown(() => metrics.stop())
  await sleep(120)
  const busyUntil = performance.now() + 200
  while (performance.now() < busyUntil) { /* block the loop */ }
  await sleep(30)
  const first = parsePrometheusText(renderExposition(await metrics.collect()))
  const max = sampleValue(first, 'agentd_event_loop_delay_seconds', { quantile: '1' })!
  t.ok(max >= 0.15 && max < 2, `a 200 ms block shows as the window's max (${max} s)`)
  const count = sampleValue(first, 'agentd_event_loop_delay_seconds_count')!
  t.ok(count > 0)
  await sleep(60)
  const second = parsePrometheusText(renderExposition(await metrics.collect()))
  t.ok(sampleValue(second, 'agentd_event_loop_delay_seconds', { quantile: '1' })! < max, 'the next window no longer holds the block')
  t.ok(sampleValue(second, 'agentd_event_loop_delay_seconds_count')! > count, 'count accumulates')
})

t.test('StateManager: tiers, keys, namespaces and counters; the device tier comes from the GPUs', async t => {
  const m = await scrape({
    stateManager: () => ({ residencySummary: () => residency }),
    inventory: () => ({
      inventory: { gpus: { devices: [{ memoryBytes: 80 * 2 ** 30 }, { memoryBytes: 80 * 2 ** 30 }] } } as never,
      gpuSampler: { samples: () => [{ memoryFreeBytes: 10 * 2 ** 30, health: 'ok', inUse: true }, { memoryFreeBytes: null, health: 'unknown', inUse: null }] as never },
    }),
  })
  t.equal(sampleValue(m, 'agentd_state_tier_capacity_bytes', { tier: 'host' }), 64 * MiB)
  t.equal(sampleValue(m, 'agentd_state_tier_used_bytes', { tier: 'host' }), 4 * MiB)
  t.equal(sampleValue(m, 'agentd_state_tier_used_bytes', { tier: 'nvme' }), MiB)
  t.equal(sampleValue(m, 'agentd_state_tier_capacity_bytes', { tier: 'device' }), undefined, 'no fake device tier')
  t.equal(sampleValue(m, 'agentd_state_keys', { tier: 'nvme' }), 1)
  t.equal(sampleValue(m, 'agentd_state_logical_bytes'), 16 * MiB)
  t.equal(sampleValue(m, 'agentd_state_namespace_stored_bytes', { namespace: 'job2/"x"' }), MiB, 'a quote in a label value survives')
  t.equal(sampleValue(m, 'agentd_state_namespace_quota_bytes', { namespace: 'job1/actor' }), 8 * MiB)
  t.equal(sampleValue(m, 'agentd_state_namespace_quota_bytes', { namespace: 'job2/"x"' }), undefined, 'unlimited: no quota series')
  t.equal(sampleValue(m, 'agentd_state_copies_total', { direction: 'offload' }), 4)
  t.equal(sampleValue(m, 'agentd_state_copies_total', { direction: 'onload' }), 3)
  t.equal(sampleValue(m, 'agentd_state_deduplicated_total'), 12)
  t.equal(sampleValue(m, 'agentd_state_spilled_total'), 1)
  t.equal(sampleValue(m, 'agentd_state_promoted_total'), 2)
  t.equal(sampleValue(m, 'agentd_state_shm_adopted_total'), 5)
  t.equal(sampleValue(m, 'agentd_state_nvme_range_read_bytes_total'), 6)
  t.equal(sampleValue(m, 'agentd_gpu_memory_capacity_bytes', { gpu: '1' }), 80 * 2 ** 30)
  t.equal(sampleValue(m, 'agentd_gpu_memory_free_bytes', { gpu: '0' }), 10 * 2 ** 30)
  t.equal(sampleValue(m, 'agentd_gpu_memory_free_bytes', { gpu: '1' }), undefined, 'unknown free memory is absent, not 0')
  t.equal(sampleValue(m, 'agentd_gpu_in_use', { gpu: '0' }), 1)
})

t.test('device lock: holds, waiters, grants, waits, wait time, timeouts and releases by reason', async t => {
  const lock = createDeviceLock({ gpuCount: 2, holderCheckIntervalMs: 20 }, { logger, processes: createProcfsProcessTable() })
  await lock.start()
  t.teardown(() => lock.stop())
  const self = process.pid
  await lock.acquire({ gpu: 0, pid: self, holder: 'a' })
  await lock.acquire({ gpu: 0, pid: self, holder: 'a' }) // re-entrant: not a grant
  const waiter = lock.acquire({ gpu: 0, pid: self, holder: 'b' })
  await t.rejects(lock.acquire({ gpu: 0, pid: self, holder: 'c', timeoutMs: 30 }), { code: 'ERR_LOCK_TIMEOUT' })
  await t.rejects(lock.acquire({ gpu: 0, pid: self, holder: 'd', timeoutMs: 0 }), { code: 'ERR_LOCK_TIMEOUT' })
  const during = await scrape({ deviceLock: () => lock })
  t.equal(sampleValue(during, 'agentd_device_lock_held', { gpu: '0' }), 1)
  t.equal(sampleValue(during, 'agentd_device_lock_held', { gpu: '1' }), 0)
  t.equal(sampleValue(during, 'agentd_device_lock_waiters', { gpu: '0' }), 1)
  t.equal(sampleValue(during, 'agentd_device_lock_grants_total', { gpu: '0' }), 1)
  t.equal(sampleValue(during, 'agentd_device_lock_waits_total', { gpu: '0' }), 2, 'b and c queued; d was refused at once')
  t.equal(sampleValue(during, 'agentd_device_lock_timeouts_total', { gpu: '0' }), 2)
  await sleep(20)
  lock.release({ gpu: 0, pid: self, holder: 'a' })
  lock.release({ gpu: 0, pid: self, holder: 'a' })
  await waiter
  lock.release({ gpu: 0, pid: self, holder: 'b' })
  const after = await scrape({ deviceLock: () => lock })
  t.equal(sampleValue(after, 'agentd_device_lock_grants_total', { gpu: '0' }), 2)
  t.equal(sampleValue(after, 'agentd_device_lock_releases_total', { gpu: '0', reason: 'released' }), 2)
  t.equal(sampleValue(after, 'agentd_device_lock_releases_total', { gpu: '0', reason: 'holder-exited' }), 0)
  t.ok(sampleValue(after, 'agentd_device_lock_wait_seconds_total', { gpu: '0' })! >= 0.04, 'b waited about 50 ms')
  t.equal(sampleValue(after, 'agentd_device_lock_held', { gpu: '0' }), 0)
})

t.test('weights, mesh, leader, jobs, reward: their views as series', async t => {
  const weights: WeightsCounters = { server: { servedBytes: 1000, accepted: 3, refused: 1, pending: 0, authenticated: 2, sharedReads: 7, windowBytes: 4096 }, pulledBytes: 500, pulls: { completed: 2, failed: 1 }, pulling: 1, serving: 2, versions: 3 }
  const info = {
    peerId: 'p', node: 'n', incarnation: 3, addresses: [], announce: { ip: '127.0.0.1', source: 'dev loopback' }, listen: [], clusterKeyFile: '', connections: 4, topicPeers: 3, meshPeers: 2,
    seeds: [], neighbors: { maxPeers: 12, outbound: 4, inbound: 2, outboundTarget: 4, inboundLimit: 8, idleClosed: 5, rejected: 1, priorityRefused: 0 }, members: { alive: 3, suspect: 1, dead: 2 },
    messages: { published: { total: 10, perSecond: 1 }, received: { total: 20, perSecond: 2 }, stale: 1, invalid: { oversized: 0, malformed: 1, schema: 0, signature: 2 } },
    dissemination: { samples: 0, p50Ms: null, p99Ms: null, maxMs: null }, sync: { syncs: 5, failed: 1, recordsApplied: 7 }, probes: { sent: 100, failed: 3, discarded: 1 }, health: { score: 0, healthy: true },
  } satisfies MeshInfo
  const jobs = { decision: null, leaderId: 'peerA', slotS: 1, revision: 3, contextSwitches: 0, local: ['j2'], jobs: [{ state: 'QUEUED' }, { state: 'RUNNING' }, { state: 'RUNNING' }] } as unknown as JobsView
  const cluster = { leaderId: 'peerA', stages: [{ name: 'verify', resource: 'cpu', queued: 4, running: 2, workers: 3 }], tasks: [], batches: [], nodes: [], requests: { held: 9, queued: 4, running: 2, done: 3 }, plan: null } satisfies RewardStatus
  let statusCalls = 0
  const reward = {
    local: () => ({ node: 'n', pending: 2, done: 1, workers: [{ workerId: 'w1', stage: 'verify', pid: 1, state: 'running' as const, crashes: 0 }, { workerId: 'w2', stage: 'verify', pid: 2, state: 'running' as const, crashes: 1 }] }),
    status: async (options?: { timeoutMs?: number }) => { statusCalls++; t.equal(options?.timeoutMs, 1000); return { ...cluster, local: { node: 'n', pending: 2, done: 1, workers: [] } } },
  }
  const m = await scrape({ weights: () => ({ counters: () => weights }), mesh: () => ({ info: () => info }), leader: () => ({ view: () => leaderView }), jobs: () => ({ list: () => jobs }), reward: () => reward })
  t.equal(sampleValue(m, 'agentd_weights_served_bytes_total'), 1000)
  t.equal(sampleValue(m, 'agentd_weights_pulled_bytes_total'), 500)
  t.equal(sampleValue(m, 'agentd_weights_served_shared_reads_total'), 7)
  t.equal(sampleValue(m, 'agentd_weights_serve_window_bytes'), 4096)
  t.equal(sampleValue(m, 'agentd_weights_pulls_total', { outcome: 'failed' }), 1)
  t.equal(sampleValue(m, 'agentd_weights_active_pulls', { direction: 'serving' }), 2)
  t.equal(sampleValue(m, 'agentd_weights_connections', { state: 'authenticated' }), 2)
  t.equal(sampleValue(m, 'agentd_mesh_peers', { state: 'suspect' }), 1)
  t.equal(sampleValue(m, 'agentd_mesh_neighbors', { direction: 'inbound' }), 2)
  t.equal(sampleValue(m, 'agentd_mesh_idle_connections_closed_total'), 5)
  t.equal(sampleValue(m, 'agentd_mesh_messages_received_total'), 20)
  t.equal(sampleValue(m, 'agentd_mesh_messages_invalid_total', { reason: 'signature' }), 2)
  t.equal(sampleValue(m, 'agentd_mesh_probes_total', { outcome: 'failed' }), 3)
  t.equal(sampleValue(m, 'agentd_leader_epoch'), 7)
  t.equal(sampleValue(m, 'agentd_leader_is_leader'), 1)
  t.equal(sampleValue(m, 'agentd_leader_role', { role: 'leader' }), 1)
  t.equal(sampleValue(m, 'agentd_leader_role', { role: 'follower' }), 0)
  t.equal(sampleValue(m, 'agentd_leader_lease_remaining_seconds'), 1.5)
  t.equal(sampleValue(m, 'agentd_leader_decisions_total', { outcome: 'rejected' }), 1)
  t.equal(sampleValue(m, 'agentd_jobs', { state: 'running' }), 2)
  t.equal(sampleValue(m, 'agentd_jobs', { state: 'completed' }), 0)
  t.equal(sampleValue(m, 'agentd_jobs_local'), 1)
  t.equal(sampleValue(m, 'agentd_reward_requests', { state: 'pending' }), 2)
  t.equal(sampleValue(m, 'agentd_reward_workers', { stage: 'verify', state: 'running' }), 2)
  t.equal(sampleValue(m, 'agentd_reward_cluster_requests', { state: 'held' }), 9)
  t.equal(sampleValue(m, 'agentd_reward_stage_requests', { stage: 'verify', state: 'queued' }), 4)
  t.equal(sampleValue(m, 'agentd_reward_stage_workers', { stage: 'verify' }), 3)
  t.equal(statusCalls, 1)

  // A follower does not ask the leader over the mesh at every scrape: no cluster series.
  const follower = await scrape({ leader: () => ({ view: () => ({ ...leaderView, acting: false, self: 'follower', commitSeq: null, leaseRemainingMs: null }) }), reward: () => reward })
  t.equal(statusCalls, 1)
  t.equal(sampleValue(follower, 'agentd_reward_cluster_requests', { state: 'held' }), undefined)
  t.equal(sampleValue(follower, 'agentd_reward_requests', { state: 'done' }), 1)
  t.equal(sampleValue(follower, 'agentd_leader_is_leader'), 0)
  t.notOk(follower.has('agentd_leader_commit_seq'), 'null views are absent')
  t.notOk(follower.has('agentd_leader_lease_remaining_seconds'))
})

t.test('rollout: engines by state, steps, moved requests and tokens', async t => {
  const local = (id: string, state: 'up' | 'down' | 'terminating') => ({ id, url: 'http://x:1', model: 'm', state, registeredAtMs: 0, lastProbeMs: 0 })
  const m = await scrape({
    rollout: () => ({
      status: () => ({
        node: 'n', local: [local('a', 'up'), local('b', 'up'), local('c', 'down')], steps: [{ stepId: 'step-3', model: 'm', requests: 8, startedAtMs: 0, instances: 2 }],
        cluster: [{ id: 'n/a', node: 'n', url: 'http://x:1', model: 'm', reserved: false, terminating: false }, { id: 'p/a', node: 'p', url: 'http://y:1', model: 'm', reserved: false, terminating: true }],
      }),
      counters: () => ({ steps: { done: 2, failed: 1 }, moves: { lost: 5, pending: 3, executing: 1 }, removed: 4, tokens: { kept: 900, wasted: 40 } }),
    }),
  })
  t.equal(sampleValue(m, 'agentd_rollout_instances', { state: 'up' }), 2)
  t.equal(sampleValue(m, 'agentd_rollout_instances', { state: 'down' }), 1)
  t.equal(sampleValue(m, 'agentd_rollout_instances', { state: 'terminating' }), 0)
  t.equal(sampleValue(m, 'agentd_rollout_cluster_instances', { terminating: 'true' }), 1)
  t.equal(sampleValue(m, 'agentd_rollout_steps_running'), 1)
  t.equal(sampleValue(m, 'agentd_rollout_steps_total', { outcome: 'failed' }), 1)
  t.equal(sampleValue(m, 'agentd_rollout_requests_moved_total', { reason: 'lost' }), 5)
  t.equal(sampleValue(m, 'agentd_rollout_instances_removed_total'), 4)
  t.equal(sampleValue(m, 'agentd_rollout_tokens_total', { kind: 'wasted' }), 40)
})

t.test('a source that throws is left out and counted; the rest of the scrape stands', async t => {
  const metrics = createAgentMetrics({ version: 'v', startedAtMs: 0 }, {
    ...none,
    stateManager: () => ({ residencySummary: () => { throw new Error('the state manager is not started') } }),
    mesh: () => ({ info: () => { throw new Error('stopping') } }),
    leader: () => ({ view: () => leaderView }),
    reward: () => ({ local: () => ({ node: 'n', pending: 0, done: 0, workers: [] }), status: async () => { throw new Error('no leader') } }),
  })
  const first = parsePrometheusText(renderExposition(await metrics.collect()))
  t.notOk([...first.keys()].some(n => n.startsWith('agentd_state_') || n.startsWith('agentd_mesh_')))
  t.equal(sampleValue(first, 'agentd_leader_epoch'), 7)
  t.equal(sampleValue(first, 'agentd_reward_requests', { state: 'pending' }), 0, 'the local reward view without the leader\'s')
  t.equal(sampleValue(first, 'agentd_metrics_collect_errors_total', { section: 'state' }), 1)
  t.equal(sampleValue(first, 'agentd_metrics_collect_errors_total', { section: 'reward' }), 1)
  const second = parsePrometheusText(renderExposition(await metrics.collect()))
  t.equal(sampleValue(second, 'agentd_metrics_collect_errors_total', { section: 'mesh' }), 2)
})
