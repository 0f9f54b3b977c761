/**
 * What GET /metrics shows: the running subsystems' own counters and views,
 * read at scrape time and mapped to Prometheus families. Nothing here keeps
 * a second count of what a service already counts; the only state of its
 * own is the event-loop delay histogram.
 *
 * Contracts:
 * - Each source is looked up at every scrape and is undefined unless its
 *   subsystem is ok: a subsystem that is disabled, skipped, failed or
 *   stopping contributes no series (never zeros standing in for "unknown").
 * - Reads are local and synchronous (no disk, no network), except the
 *   cluster-wide reward queues, which only the acting leader reports and
 *   which are asked of the reward service with `rewardStatusTimeoutMs`.
 * - A source that throws (e.g. stopping during the scrape) is left out of
 *   that scrape, logged, and counted in agentd_metrics_collect_errors_total.
 * - Names: `agentd_` prefix, base units (bytes, seconds), `_total` on
 *   counters, states and tiers as labels.
 */
import { monitorEventLoopDelay, type ELDHistogram } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { MetricFamily, MetricType, Sample } from './exposition.ts'
import type { DeviceLockService } from '../state/device-lock.ts'
import type { ResidencySummary, StateManager } from '../state/state-manager.ts'
import type { WeightsCounters, WeightsService } from '../weights/weights-service.ts'
import type { RewardLocalView, RewardService } from '../reward/reward-service.ts'
import type { RolloutCounters, RolloutService } from '../rollout/rollout-service.ts'
import type { RolloutStatus } from '../api/wire/rollout.ts'
import type { NodeInventory } from '../inventory/inventory.ts'
import type { GpuSample, GpuSampler } from '../inventory/gpu-sampler.ts'
import type { Mesh } from '../../mesh/membership/mesh-service.ts'
import type { MeshInfo } from '../../mesh/membership/mesh-views.ts'
import type { LeaderService } from '../../mesh/election/leader-service.ts'
import type { LeaderViewBody } from '../../mesh/election/leader-views.ts'
import { jobStates, type JobsView } from '../../mesh/control/jobs/job-table.ts'
import type { JobsService } from '../../mesh/control/jobs/jobs-service.ts'
import type { RewardStatus } from '../../mesh/control/reward/reward-messages.ts'
import { processMemory } from '../../core/process-memory.ts'

export interface AgentMetricsOptions {
  /** The agent's version (agentd_build_info). */
  version: string
  /** performance.now() when the agent started (agentd_uptime_seconds). */
  startedAtMs: number
  /** Sampling interval of the event-loop delay histogram, ms. Default 20. */
  eventLoopResolutionMs?: number
  /** Longest wait for the leader's reward view at a scrape, ms. Default 1000. */
  rewardStatusTimeoutMs?: number
}

/** The subsystems' handles, each looked up when read: undefined unless the subsystem is ok. */
export interface AgentMetricsComponents {
  logger: Logger
  /** The runner's records (GET /v1/status `subsystems`). */
  subsystems(): ReadonlyArray<{ id: string, state: SubsystemState }>
  inventory(): { inventory: Pick<NodeInventory, 'gpus'>, gpuSampler?: Pick<GpuSampler, 'samples'> } | undefined
  deviceLock(): Pick<DeviceLockService, 'locks' | 'counters'> | undefined
  stateManager(): Pick<StateManager, 'residencySummary'> | undefined
  weights(): Pick<WeightsService, 'counters'> | undefined
  mesh(): Pick<Mesh, 'info'> | undefined
  leader(): Pick<LeaderService, 'view'> | undefined
  jobs(): Pick<JobsService, 'list'> | undefined
  reward(): Pick<RewardService, 'local' | 'status'> | undefined
  rollout(): Pick<RolloutService, 'status' | 'counters'> | undefined
}

/** The runner's states (agent/subsystems.ts SubsystemState), restated: importing it would make agent/ and agent/metrics/ a folder cycle. */
export type SubsystemState = 'pending' | 'ok' | 'skipped' | 'failed' | 'stopped'
const subsystemStates: readonly SubsystemState[] = ['pending', 'ok', 'skipped', 'failed', 'stopped']

/** What the metrics server renders: started and stopped with it. */
export interface AgentMetrics {
  start(): void
  stop(): void
  collect(): Promise<MetricFamily[]>
}

export function createAgentMetrics (options: AgentMetricsOptions, components: AgentMetricsComponents): AgentMetrics {
  const { logger } = components
  const rewardTimeoutMs = options.rewardStatusTimeoutMs ?? 1000
  const loop = eventLoopDelay(options.eventLoopResolutionMs ?? 20)
  const collectErrors = new Map<string, number>()

  /** One section's families, or none when its source throws. */
  const section = (name: string, read: () => MetricFamily[]): MetricFamily[] => {
    try {
      return read()
    } catch (err) {
      collectErrors.set(name, (collectErrors.get(name) ?? 0) + 1)
      logger.warn({ section: name, err }, 'metrics: a source failed; its series are left out of this scrape')
      return []
    }
  }

  return {
    start: () => loop.start(),
    stop: () => loop.stop(),
    async collect () {
      const leader = components.leader()
      const reward = components.reward()
      // Only the acting leader holds the cluster's reward queues; a follower would ask over the mesh.
      let rewardCluster: RewardStatus | undefined
      if (reward !== undefined && leader?.view().acting === true) {
        try {
          rewardCluster = await reward.status({ timeoutMs: rewardTimeoutMs })
        } catch (err) {
          collectErrors.set('reward', (collectErrors.get('reward') ?? 0) + 1)
          logger.warn({ section: 'reward', err }, 'metrics: the leader\'s reward view did not answer; left out of this scrape')
        }
      }
      const families = [
        ...processFamilies(options, loop.read()),
        ...subsystemFamilies(components.subsystems()),
        ...section('inventory', () => { const i = components.inventory(); return i !== undefined ? gpuFamilies(i.inventory, i.gpuSampler?.samples()) : [] }),
        ...section('device-lock', () => { const l = components.deviceLock(); return l !== undefined ? deviceLockFamilies(l) : [] }),
        ...section('state', () => { const sm = components.stateManager(); return sm !== undefined ? stateFamilies(sm.residencySummary()) : [] }),
        ...section('weights', () => { const w = components.weights(); return w !== undefined ? weightsFamilies(w.counters()) : [] }),
        ...section('mesh', () => { const m = components.mesh(); return m !== undefined ? meshFamilies(m.info()) : [] }),
        ...section('leader', () => leader !== undefined ? leaderFamilies(leader.view()) : []),
        ...section('jobs', () => { const j = components.jobs(); return j !== undefined ? jobsFamilies(j.list()) : [] }),
        ...section('reward', () => reward !== undefined ? rewardFamilies(reward.local(), rewardCluster) : []),
        ...section('rollout', () => { const r = components.rollout(); return r !== undefined ? rolloutFamilies(r.status(), r.counters()) : [] }),
      ]
      families.push(counter('agentd_metrics_collect_errors_total', 'Scrapes in which a subsystem\'s source failed and its series were left out, by section.',
        [...collectErrors].map(([name, n]) => ({ labels: { section: name }, value: n }))))
      return families
    },
  }
}

const gauge = (name: string, help: string, samples: Sample[]): MetricFamily => family(name, help, 'gauge', samples)
const counter = (name: string, help: string, samples: Sample[]): MetricFamily => family(name, help, 'counter', samples)
const family = (name: string, help: string, type: MetricType, samples: Sample[]): MetricFamily => ({ name, help, type, samples })
const one = (value: number): Sample[] => [{ value }]
const seconds = (ms: number): number => ms / 1000

interface LoopDelay { p50: number, p99: number, max: number, sumSeconds: number, count: number }

/**
 * The event loop's delay, sampled by a libuv timer every `resolutionMs` (no
 * JavaScript runs for it). The histogram records each interval between two
 * firings, so the delay is that minus the interval. Quantiles cover the time
 * since the previous scrape; sum and count accumulate from start (Prometheus
 * summary semantics).
 */
function eventLoopDelay (resolutionMs: number): { start(): void, stop(): void, read(): LoopDelay | undefined } {
  let histogram: ELDHistogram | undefined
  let sumSeconds = 0
  let count = 0
  const intervalNs = resolutionMs * 1e6
  const delaySeconds = (ns: number): number => Math.max(0, ns - intervalNs) / 1e9
  return {
    start () {
      histogram ??= monitorEventLoopDelay({ resolution: resolutionMs })
      histogram.enable()
    },
    stop () { histogram?.disable() },
    read () {
      if (histogram === undefined) return undefined
      const h = histogram
      const window = h.count
      const read = window > 0
        ? { p50: delaySeconds(h.percentile(50)), p99: delaySeconds(h.percentile(99)), max: delaySeconds(h.max) }
        : { p50: NaN, p99: NaN, max: NaN }
      if (window > 0) { sumSeconds += delaySeconds(h.mean) * window; count += window }
      h.reset()
      return { ...read, sumSeconds, count }
    },
  }
}

export function processFamilies (options: Pick<AgentMetricsOptions, 'version' | 'startedAtMs'>, loop: LoopDelay | undefined): MetricFamily[] {
  const memory = processMemory()
  const cpu = process.cpuUsage()
  const families = [
    gauge('agentd_build_info', 'Always 1; the agent\'s version as a label.', [{ labels: { version: options.version }, value: 1 }]),
    gauge('agentd_uptime_seconds', 'Seconds since the agent started.', one(Math.round(performance.now() - options.startedAtMs) / 1000)),
    gauge('agentd_process_start_time_seconds', 'Start time of the agent process, seconds since the Unix epoch.', one(Math.round(Date.now() / 1000 - process.uptime()))),
    gauge('agentd_process_resident_memory_bytes', 'Resident memory of the agent process: its own, mapped files and the shared memory it maps (clients\' objects included).', one(memory.rssBytes)),
    ...memory.split !== undefined
      ? [
          gauge('agentd_process_own_memory_bytes', 'The agent\'s own resident memory (RssAnon: heap, native allocations, the host pool\'s touched pages).', one(memory.split.ownBytes)),
          gauge('agentd_process_shared_memory_bytes', 'Resident shared memory the agent maps (RssShmem: clients\' objects, weight regions), counted by their creators too.', one(memory.split.sharedMemoryBytes)),
        ]
      : [],
    gauge('agentd_process_heap_used_bytes', 'V8 heap in use, objects not yet collected included.', one(memory.heapUsedBytes)),
    gauge('agentd_process_heap_total_bytes', 'V8 heap reserved.', one(memory.heapTotalBytes)),
    gauge('agentd_process_external_memory_bytes', 'Memory of Buffers and other objects outside the V8 heap (not the host pool).', one(memory.externalBytes)),
    counter('agentd_process_cpu_seconds_total', 'User and system CPU time of the agent process.', one((cpu.user + cpu.system) / 1e6)),
  ]
  if (loop !== undefined) {
    families.push(family('agentd_event_loop_delay_seconds',
      'Event-loop delay: quantiles since the previous scrape (NaN when none was sampled), sum and count since start.', 'summary', [
        { labels: { quantile: '0.5' }, value: loop.p50 },
        { labels: { quantile: '0.99' }, value: loop.p99 },
        { labels: { quantile: '1' }, value: loop.max },
        { suffix: '_sum', value: loop.sumSeconds },
        { suffix: '_count', value: loop.count },
      ]))
  }
  return families
}

export function subsystemFamilies (records: ReadonlyArray<{ id: string, state: SubsystemState }>): MetricFamily[] {
  return [gauge('agentd_subsystem_state', 'Each subsystem\'s state (GET /v1/status): 1 for the state it is in, 0 for the others.',
    records.flatMap(r => subsystemStates.map(state => ({ labels: { subsystem: r.id, state }, value: r.state === state ? 1 : 0 }))))]
}

/** The device tier as the node has it: each GPU's memory (inventory) and, when sampled, what is free and whether a process holds it. */
export function gpuFamilies (inventory: Pick<NodeInventory, 'gpus'>, samples: GpuSample[] | undefined): MetricFamily[] {
  const devices = inventory.gpus.devices
  const sampled = (pick: (s: GpuSample) => number | null): Sample[] => (samples ?? []).flatMap((s, gpu) => {
    const value = pick(s)
    return value === null ? [] : [{ labels: { gpu: String(gpu) }, value }]
  })
  return [
    gauge('agentd_gpu_memory_capacity_bytes', 'Memory of each GPU of the inventory (the device tier\'s capacity).', devices.map((d, gpu) => ({ labels: { gpu: String(gpu) }, value: d.memoryBytes }))),
    gauge('agentd_gpu_memory_free_bytes', 'Free memory of each GPU at its latest sample (nvidia-smi); absent while unknown.', sampled(s => s.memoryFreeBytes)),
    gauge('agentd_gpu_in_use', '1 when a compute process holds the GPU at its latest sample, else 0; absent while unknown.', sampled(s => s.inUse === null ? null : s.inUse ? 1 : 0)),
  ]
}

export function deviceLockFamilies (lock: Pick<DeviceLockService, 'locks' | 'counters'>): MetricFamily[] {
  const locks = lock.locks()
  const counters = lock.counters()
  const byGpu = (value: (c: typeof counters[number]) => number): Sample[] => counters.map(c => ({ labels: { gpu: String(c.gpu) }, value: value(c) }))
  return [
    gauge('agentd_device_lock_held', '1 while a holder holds the GPU\'s lock, else 0.', locks.map(l => ({ labels: { gpu: String(l.gpu) }, value: l.holder === null ? 0 : 1 }))),
    gauge('agentd_device_lock_waiters', 'Requests queued for the GPU\'s lock now.', locks.map(l => ({ labels: { gpu: String(l.gpu) }, value: l.waiters.length }))),
    counter('agentd_device_lock_grants_total', 'Holds granted (re-entrant acquires by the holder not counted).', byGpu(c => c.grants)),
    counter('agentd_device_lock_waits_total', 'Acquire requests that queued behind another holder.', byGpu(c => c.waits)),
    counter('agentd_device_lock_wait_seconds_total', 'Time requests granted after queueing spent in the queue.', byGpu(c => seconds(c.waitedMs))),
    counter('agentd_device_lock_timeouts_total', 'Acquire requests that ended with ERR_LOCK_TIMEOUT.', byGpu(c => c.timeouts)),
    counter('agentd_device_lock_releases_total', 'Holds that ended, by reason: released, holder-exited, stopped.',
      counters.flatMap(c => Object.entries(c.releases).map(([reason, n]) => ({ labels: { gpu: String(c.gpu), reason }, value: n })))),
  ]
}

export function stateFamilies (r: ResidencySummary): MetricFamily[] {
  const tiers = (['host', 'nvme'] as const)
  return [
    gauge('agentd_state_tier_capacity_bytes', 'Configured capacity of the StateManager\'s tiers: host (the pinned pool), nvme. The device tier is per GPU (agentd_gpu_memory_capacity_bytes).',
      tiers.map(tier => ({ labels: { tier }, value: r.tiers[tier].capacityBytes }))),
    gauge('agentd_state_tier_used_bytes', 'Bytes in use in each tier (host: pool extents allocated, alignment included; nvme: object files).',
      tiers.map(tier => ({ labels: { tier }, value: r.tiers[tier].usedBytes }))),
    gauge('agentd_state_keys', 'Stored keys by the tier that holds them (host: a pool or adopted shared-memory copy).', tiers.map(tier => ({ labels: { tier }, value: r.keyCounts[tier] }))),
    gauge('agentd_state_stored_bytes', 'Bytes of the stored keys, each key once.', one(r.storedBytes)),
    gauge('agentd_state_logical_bytes', 'Bytes the clients offloaded, each key once per replica (logical / stored = the dedup ratio).', one(r.logicalBytes)),
    gauge('agentd_state_host_pool_largest_free_bytes', 'Largest free extent of the host pool.', one(r.hostPool.largestFreeBytes)),
    gauge('agentd_state_host_pool_fragmentation_ratio', 'What fragmentation costs host pool allocation: the share of free bytes in holes too small for the largest recent request, 0 to 1.', one(r.hostPool.fragmentation)),
    gauge('agentd_state_shm_regions', 'Adopted shared-memory objects mapped (zero-copy host copies outside the pool).', one(r.shm.regions)),
    gauge('agentd_state_shm_bytes', 'Bytes of the adopted shared-memory objects.', one(r.shm.bytes)),
    gauge('agentd_state_namespace_stored_bytes', 'Stored bytes per namespace (job/model).', r.namespaces.map(n => ({ labels: { namespace: n.namespace }, value: n.storedBytes }))),
    gauge('agentd_state_namespace_quota_bytes', 'Configured quota of a namespace holding keys (state.namespaceQuotaBytes); absent when unlimited.',
      r.namespaces.flatMap(n => n.quotaBytes === null ? [] : [{ labels: { namespace: n.namespace }, value: n.quotaBytes }])),
    counter('agentd_state_copies_total', 'Copies between client memory and the host pool: offload (client to pool, first writers only), onload (pool to client).', [
      { labels: { direction: 'offload' }, value: r.counters.offloadCopies },
      { labels: { direction: 'onload' }, value: r.counters.onloadCopies },
    ]),
    counter('agentd_state_deduplicated_total', 'Offloads answered by a stored or in-flight copy of the same key (no copy made).', one(r.counters.deduplicated)),
    counter('agentd_state_shm_adopted_total', 'Keys stored in place in an adopted shared-memory object (no copy).', one(r.counters.shmAdopted)),
    counter('agentd_state_spilled_total', 'Keys moved from the host pool to NVMe by spilling.', one(r.counters.spilled)),
    counter('agentd_state_promoted_total', 'Keys read from NVMe back into the host pool (onload, prefetch).', one(r.counters.promoted)),
    counter('agentd_state_nvme_range_read_bytes_total', 'Bytes read from NVMe by range, the key staying there (weights served from NVMe through the read window).', one(r.counters.rangeReadBytes)),
  ]
}

export function weightsFamilies (c: WeightsCounters): MetricFamily[] {
  return [
    counter('agentd_weights_served_bytes_total', 'Tensor bytes this agent\'s data server sent to pulling agents.', one(c.server.servedBytes)),
    counter('agentd_weights_served_shared_reads_total', 'READs of tensor chunks on NVMe answered by a read another puller\'s READ (or read-ahead) had made: one disk read served several.', one(c.server.sharedReads)),
    gauge('agentd_weights_serve_window_bytes', 'Host-pool bytes the data server holds for chunks read from NVMe (kept for other pullers, or being read).', one(c.server.windowBytes)),
    counter('agentd_weights_pulled_bytes_total', 'Tensor bytes that arrived in this agent\'s pulls (refetched pieces included).', one(c.pulledBytes)),
    counter('agentd_weights_pulls_total', 'Pulls this agent finished, by outcome.', [
      { labels: { outcome: 'completed' }, value: c.pulls.completed },
      { labels: { outcome: 'failed' }, value: c.pulls.failed },
    ]),
    gauge('agentd_weights_active_pulls', 'Pulls in progress: serving (connections reading from this agent), pulling (pulls this agent makes).', [
      { labels: { direction: 'serving' }, value: c.serving },
      { labels: { direction: 'pulling' }, value: c.pulling },
    ]),
    gauge('agentd_weights_connections', 'Data-server connections now, by state: handshake, authenticated.', [
      { labels: { state: 'handshake' }, value: c.server.pending },
      { labels: { state: 'authenticated' }, value: c.server.authenticated },
    ]),
    counter('agentd_weights_connections_accepted_total', 'Connections the data server accepted.', one(c.server.accepted)),
    counter('agentd_weights_connections_refused_total', 'Data-server connections closed before authentication (timeout, wrong key, limits).', one(c.server.refused)),
    gauge('agentd_weights_versions', 'Weight versions held (complete or partial).', one(c.versions)),
  ]
}

export function meshFamilies (info: MeshInfo): MetricFamily[] {
  return [
    gauge('agentd_mesh_peers', 'Other agents known to this one, by membership state: alive, suspect, dead.',
      (['alive', 'suspect', 'dead'] as const).map(state => ({ labels: { state }, value: info.members[state] }))),
    gauge('agentd_mesh_connections', 'Open libp2p connections.', one(info.connections)),
    gauge('agentd_mesh_neighbors', 'Neighbors (the bounded partial view gossip and probes run over), by direction: outbound (chosen by this agent), inbound (chose this agent).',
      (['outbound', 'inbound'] as const).map(direction => ({ labels: { direction }, value: info.neighbors[direction] }))),
    counter('agentd_mesh_idle_connections_closed_total', 'Connections to non-neighbors closed after mesh.idleConnectionMs without a request.', one(info.neighbors.idleClosed)),
    gauge('agentd_mesh_topic_peers', 'Connected peers subscribed to the mesh topic.', one(info.topicPeers)),
    gauge('agentd_mesh_gossip_peers', 'Gossipsub mesh peers of the topic (eager push).', one(info.meshPeers)),
    gauge('agentd_mesh_incarnation', 'This agent\'s incarnation number (raised to refute a suspicion).', one(info.incarnation)),
    gauge('agentd_mesh_health_score', 'Lifeguard local health: 0 is healthy, higher means this agent is slow to answer probes.', one(info.health.score)),
    counter('agentd_mesh_messages_published_total', 'Mesh messages this agent published.', one(info.messages.published.total)),
    counter('agentd_mesh_messages_received_total', 'Valid mesh messages received.', one(info.messages.received.total)),
    counter('agentd_mesh_messages_stale_total', 'Valid messages older than what this agent holds (ignored).', one(info.messages.stale)),
    counter('agentd_mesh_messages_invalid_total', 'Dropped messages by reason: oversized, malformed, schema, signature.',
      Object.entries(info.messages.invalid).map(([reason, n]) => ({ labels: { reason }, value: n }))),
    counter('agentd_mesh_syncs_total', 'Push-pull state syncs this agent started, by outcome.', [
      { labels: { outcome: 'completed' }, value: info.sync.syncs },
      { labels: { outcome: 'failed' }, value: info.sync.failed },
    ]),
    counter('agentd_mesh_sync_records_applied_total', 'Records that were news when they arrived by state sync.', one(info.sync.recordsApplied)),
    counter('agentd_mesh_probes_total', 'Failure-detector probes: sent, failed, discarded (failed while this agent stalled).', [
      { labels: { outcome: 'sent' }, value: info.probes.sent },
      { labels: { outcome: 'failed' }, value: info.probes.failed },
      { labels: { outcome: 'discarded' }, value: info.probes.discarded },
    ]),
  ]
}

export function leaderFamilies (view: LeaderViewBody): MetricFamily[] {
  const roles = ['leader', 'follower', 'candidate', 'client'] as const
  return [
    gauge('agentd_leader_epoch', 'Epoch of the leader this agent follows (election term, or etcd create revision).', one(view.epoch)),
    gauge('agentd_leader_is_leader', '1 while this agent is the leader, holds the lease and decides; else 0.', one(view.acting ? 1 : 0)),
    gauge('agentd_leader_known', '1 while this agent knows a leader, else 0.', one(view.leaderId === null ? 0 : 1)),
    gauge('agentd_leader_role', 'This agent\'s role in the election: 1 for its role, 0 for the others.', roles.map(role => ({ labels: { role }, value: view.self === role ? 1 : 0 }))),
    gauge('agentd_leader_voters', 'Voters in the voter set (embedded) or servers campaigning (etcd).', one(view.voters.length)),
    gauge('agentd_leader_other_voter_sets', 'Other voter sets advertised by live agents of this mesh (degraded when above 0).', one(view.otherVoterSets.length)),
    gauge('agentd_leader_applied_seq', 'Last decision log index applied here.', one(view.applied.seq)),
    gauge('agentd_leader_commit_seq', 'Acting leader: highest log index a quorum holds.', view.commitSeq === null ? [] : one(view.commitSeq)),
    gauge('agentd_leader_lease_remaining_seconds', 'Leader: time its lease still lets it act.', view.leaseRemainingMs === null ? [] : one(seconds(view.leaseRemainingMs))),
    gauge('agentd_leader_last_heard_seconds', 'Time since this agent last heard from the leader; absent when none is known.', view.leaderHeardMsAgo === null ? [] : one(seconds(view.leaderHeardMsAgo))),
    counter('agentd_leader_decisions_total', 'Decisions by outcome here: applied, rejected (stale epoch or sequence), snapshot, violation.', [
      { labels: { outcome: 'applied' }, value: view.decisions.applied },
      { labels: { outcome: 'rejected' }, value: view.decisions.rejected },
      { labels: { outcome: 'snapshot' }, value: view.decisions.snapshots },
      { labels: { outcome: 'violation' }, value: view.decisions.violations },
    ]),
  ]
}

export function jobsFamilies (view: JobsView): MetricFamily[] {
  const counts = new Map(jobStates.map(state => [state, 0]))
  for (const job of view.jobs) counts.set(job.state, (counts.get(job.state) ?? 0) + 1)
  return [
    gauge('agentd_jobs', 'Jobs in the leader\'s job table as this agent holds it, by state.', [...counts].map(([state, n]) => ({ labels: { state: state.toLowerCase() }, value: n }))),
    gauge('agentd_jobs_local', 'Running jobs placed on this node.', one(view.local.length)),
  ]
}

export function rewardFamilies (local: RewardLocalView, cluster: RewardStatus | undefined): MetricFamily[] {
  const workers = new Map<string, number>()
  for (const w of local.workers) {
    const key = `${w.stage}\u0000${w.state}`
    workers.set(key, (workers.get(key) ?? 0) + 1)
  }
  const families = [
    gauge('agentd_reward_requests', 'Reward requests submitted through this agent: pending (no result yet), done (result held until fetched).', [
      { labels: { state: 'pending' }, value: local.pending },
      { labels: { state: 'done' }, value: local.done },
    ]),
    gauge('agentd_reward_workers', 'Reward workers this agent supervises, by stage and state (running, stopping, restarting).',
      [...workers].map(([key, n]) => { const [stage, state] = key.split('\u0000') as [string, string]; return { labels: { stage, state }, value: n } })),
  ]
  if (cluster !== undefined) {
    families.push(
      gauge('agentd_reward_cluster_requests', 'Acting leader only: the cluster\'s reward requests by state (held, queued, running, done).',
        (['held', 'queued', 'running', 'done'] as const).map(state => ({ labels: { state }, value: cluster.requests[state] }))),
      gauge('agentd_reward_stage_requests', 'Acting leader only: requests per stage, queued or running.',
        cluster.stages.flatMap(s => [{ labels: { stage: s.name, state: 'queued' }, value: s.queued }, { labels: { stage: s.name, state: 'running' }, value: s.running }])),
      gauge('agentd_reward_stage_workers', 'Acting leader only: workers per stage in the cluster.', cluster.stages.map(s => ({ labels: { stage: s.name }, value: s.workers }))),
    )
  }
  return families
}

export function rolloutFamilies (status: RolloutStatus, c: RolloutCounters): MetricFamily[] {
  const states = new Map<string, number>([['up', 0], ['down', 0], ['terminating', 0]])
  for (const i of status.local) states.set(i.state, (states.get(i.state) ?? 0) + 1)
  return [
    gauge('agentd_rollout_instances', 'Rollout engines registered with this agent, by state (up: advertised; down: not answering its probe; terminating).',
      [...states].map(([state, n]) => ({ labels: { state }, value: n }))),
    gauge('agentd_rollout_cluster_instances', 'Rollout engines this agent sees in the cluster (its own in rotation and its peers\' advertised), by whether they are terminating.', [
      { labels: { terminating: 'false' }, value: status.cluster.filter(i => !i.terminating).length },
      { labels: { terminating: 'true' }, value: status.cluster.filter(i => i.terminating).length },
    ]),
    gauge('agentd_rollout_steps_running', 'Rollout steps running through this agent.', one(status.steps.length)),
    counter('agentd_rollout_steps_total', 'Rollout steps run through this agent, by outcome.', [{ labels: { outcome: 'done' }, value: c.steps.done }, { labels: { outcome: 'failed' }, value: c.steps.failed }]),
    counter('agentd_rollout_requests_moved_total', 'Requests moved during steps: off a lost engine, or by balancing (queued or generating).',
      (['lost', 'pending', 'executing'] as const).map(reason => ({ labels: { reason }, value: c.moves[reason] }))),
    counter('agentd_rollout_instances_removed_total', 'Engines steps took out of rotation (broken, stalled or garbage streams, notices, seeding windows).', one(c.removed)),
    counter('agentd_rollout_tokens_total', 'Tokens generated for steps run here: kept in responses, or wasted (thrown away by a recompute).',
      [{ labels: { kind: 'kept' }, value: c.tokens.kept }, { labels: { kind: 'wasted' }, value: c.tokens.wasted }]),
  ]
}
