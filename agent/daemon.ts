/**
 * The composition root. It only wires: the ordered list of subsystems
 * `{ id, requires, create }`, started in order and stopped in reverse by the
 * runner, and the status every client sees. No subsystem starts itself.
 */
import type { Logger } from 'pino'
import type { AgentConfig } from './config/schema.ts'
import { createSubsystemRunner, type SubsystemRecord, type SubsystemSpec } from './subsystems.ts'
import { loadOrCreateNodeId } from './node-identity.ts'
import { probeInventory, type NodeInventory } from './inventory/inventory.ts'
import { createGpuSampler, type GpuSampler } from './inventory/gpu-sampler.ts'
import { createApiServer, type ApiServer } from './api/server.ts'
import { claimSocketPath } from './api/socket-path.ts'
import { lockStateDir, type StateDirLock } from './state-dir-lock.ts'
import { createDeviceLock, type DeviceLockService } from './state/device-lock.ts'
import { createProcfsProcessTable } from './state/device-lock-process.ts'
import { createStateManager, type StateManager } from './state/state-manager.ts'
import { createMesh, type Mesh } from '../mesh/mesh-service.ts'
import { gpusFromInventory, stateSections } from '../mesh/availability-publisher.ts'
import { createLeaderService, type LeaderService, type LeaderTask } from '../mesh/election/leader-service.ts'
import { loadClusterKey, loadOrCreateDevClusterKey } from '../mesh/cluster-key.ts'
import { createJobsLeaderTask } from '../mesh/jobs/jobs-leader-task.ts'
import { createJobsService, type JobsService } from '../mesh/jobs/jobs-service.ts'
import { createWeightsService, manifestDirOf, type WeightsService } from './weights/weights-service.ts'
import { createRewardLeaderTask } from './reward/reward-leader-task.ts'
import { createRewardService, type RewardService } from './reward/reward-service.ts'
import type { StatusBody } from './api/schemas.ts'
import { agentVersion } from './version.ts'
import { AgentError } from '../core/errors.ts'
import { capabilities } from '../native/index.ts'

export interface DaemonOptions {
  config: AgentConfig
  dev: boolean
}

export interface DaemonComponents {
  logger: Logger
}

export interface Daemon {
  /** Starts every subsystem; rejects when a critical one fails (after stopping the rest). */
  start(): Promise<void>
  /** Stops in reverse order; idempotent. */
  stop(): Promise<void>
  status(): StatusBody
  subsystems(): SubsystemRecord[]
}

/** The agent process's own memory and CPU (GET /v1/status). */
function processFootprint (): NonNullable<StatusBody['process']> {
  const memory = process.memoryUsage()
  const cpu = process.cpuUsage()
  return {
    pid: process.pid,
    rssBytes: memory.rss,
    heapUsedBytes: memory.heapUsed,
    heapTotalBytes: memory.heapTotal,
    externalBytes: memory.external,
    cpuSeconds: Math.round((cpu.user + cpu.system) / 1e4) / 100,
  }
}

export function createDaemon (options: DaemonOptions, components: DaemonComponents): Daemon {
  const { config, dev } = options
  const startedAt = performance.now()
  let nodeId = ''
  let inventory: NodeInventory | undefined
  let gpuSampler: GpuSampler | undefined
  let deviceLock: DeviceLockService | undefined
  let stateManager: StateManager | undefined
  let mesh: Mesh | undefined
  let leader: LeaderService | undefined
  /**
   * Leader-only subsystems (the cluster policies of mesh/policies/): started in
   * this order when this agent gains leadership and may act, stopped (their
   * signal aborted) when it loses it.
   */
  const leaderTasks: LeaderTask[] = []
  // DistRS reward proxy and worker scaling (agent/reward/), while this agent leads.
  if (config.reward.enabled) leaderTasks.push(createRewardLeaderTask({ config: config.reward }, { logger: components.logger.child({ component: 'reward-proxy' }), selfId: () => mesh?.status().peerId ?? '' }))
  let weights: WeightsService | undefined
  let jobs: JobsService | undefined
  let reward: RewardService | undefined
  const subsystemReason = (id: string): string => {
    const record = runner.records().find(r => r.id === id)
    return record?.reason ?? `subsystem ${id} is ${record?.state ?? 'not configured'}`
  }

  const status = (): StatusBody => ({
    node: { id: nodeId, name: config.node.name },
    version: agentVersion,
    uptimeS: Math.round((performance.now() - startedAt) / 100) / 10,
    dev,
    process: processFootprint(),
    subsystems: runner.records(),
    native: capabilities,
    ...(mesh !== undefined ? { mesh: mesh.status() } : {}),
    ...(leader !== undefined ? { leader: leader.view() } : {}),
    ...(weights !== undefined ? { weights: { address: weights.address() } } : {}),
  })

  /**
   * The API's routes and schemas are compiled before any subsystem starts
   * (~0.3 s of CPU on the event loop, several times that on a loaded host):
   * compiled after the mesh started, they held up its first connections and
   * the join sync. The api subsystem, last, only listens. Built once (start).
   */
  let builtApi: Promise<ApiServer> | undefined
  const api = (): Promise<ApiServer> => builtApi ??= createApiServer({ ...config.api, version: agentVersion }, {
    logger: components.logger.child({ component: 'api' }),
    status: { status },
    inventory: { inventory: () => inventory },
    locks: { deviceLock: () => deviceLock ?? { unavailable: subsystemReason('device-lock') } },
    state: { stateManager: () => stateManager ?? { unavailable: subsystemReason('state') } },
    mesh: { mesh: () => mesh ?? { unavailable: subsystemReason('mesh') } },
    leader: { leader: () => leader ?? { unavailable: subsystemReason('leader') } },
    ...(config.election.faultInjection ? { fault: { mesh: () => mesh, leader: () => leader } } : {}),
    weights: { weights: () => weights ?? { unavailable: subsystemReason('weights') } },
    jobs: { jobs: () => jobs ?? { unavailable: subsystemReason('jobs') } },
    reward: { reward: () => reward ?? { unavailable: subsystemReason('reward') } },
  })

  const specs: SubsystemSpec[] = [
    {
      id: 'identity',
      requires: [],
      critical: true,
      async create () {
        nodeId = await loadOrCreateNodeId(config.node.stateDir)
        return { stop: async () => {} }
      },
    },
    {
      // The addon moves bulk data for the StateManager and weights; without it they cannot run.
      id: 'native',
      requires: [],
      async create () {
        if (!capabilities.addon.loaded) throw new AgentError('ERR_NATIVE_UNAVAILABLE', capabilities.addon.error ?? 'native addon not loaded')
        return { stop: async () => {} }
      },
    },
    {
      id: 'inventory',
      requires: [],
      async create (context) {
        const probe = { hostname: config.node.name, ...(config.inventory.gpus !== undefined ? { gpuOverride: config.inventory.gpus } : {}) }
        inventory = await probeInventory(probe)
        const devices = inventory.gpus.devices
        if (config.inventory.gpuSampleIntervalMs === 0 || devices.length === 0) return { stop: async () => {} }
        const sampler = createGpuSampler({ command: config.inventory.nvidiaSmiCommand, intervalMs: config.inventory.gpuSampleIntervalMs, timeoutMs: 10_000 },
          { devices, logger: context.logger, onChange: () => mesh?.availabilityChanged() })
        gpuSampler = sampler
        return {
          start: async options => sampler.start(options),
          stop: async () => { gpuSampler = undefined; sampler.stop() },
        }
      },
    },
    {
      // RLinf §3.3 context switching: one FIFO lock per GPU of the inventory. Holders are
      // processes identified by SO_PEERCRED, which needs the native addon.
      id: 'device-lock',
      requires: ['native', 'inventory'],
      async create (context) {
        const gpuCount = inventory?.gpus.devices.length ?? 0
        if (gpuCount === 0) return { skip: 'no GPUs in the inventory' }
        const lock = createDeviceLock({ gpuCount, holderCheckIntervalMs: config.locks.holderCheckIntervalMs },
          { logger: context.logger, processes: createProcfsProcessTable() })
        deviceLock = lock
        return {
          start: options => lock.start(options),
          stop: async () => { deviceLock = undefined; await lock.stop() },
        }
      },
    },
    {
      id: 'state',
      requires: ['native'],
      async create (context) {
        if (!config.state.enabled) return { skip: 'disabled by config (state.enabled = false)' }
        const sm = createStateManager(config.state, { logger: context.logger })
        return {
          async start () { await sm.start(); stateManager = sm },
          async stop () { stateManager = undefined; await sm.stop() },
        }
      },
    },
    {
      // RLBoost §4.3 pull-based weight transfer: versions in the StateManager, served over TCP
      // authenticated with the cluster key (the mesh's key file; --dev generates one like the mesh does).
      id: 'weights',
      requires: ['state'],
      async create (context) {
        if (!config.weights.enabled) return { skip: 'disabled by config (weights.enabled = false)' }
        const sm = stateManager!
        const clusterKey = config.mesh.clusterKeyFile === '' && dev
          ? (await loadOrCreateDevClusterKey(config.node.stateDir)).key
          : await loadClusterKey(config.mesh.clusterKeyFile)
        // The mesh starts later: its peers and change notifications are read through `mesh` when used.
        const service = createWeightsService({ ...config.weights, manifestDir: manifestDirOf(config.node.stateDir) },
          { stateManager: sm, clusterKey, logger: context.logger, meshPeers: () => mesh?.peers(), availabilityChanged: () => mesh?.availabilityChanged() })
        return {
          async start () { await service.start(); weights = service },
          async stop () { weights = undefined; await service.stop() },
        }
      },
    },
    {
      // Membership and availability gossip with the other agents (libp2p + gossipsub, SWIM).
      id: 'mesh',
      requires: ['identity'],
      async create (context) {
        if (!config.mesh.enabled) return { skip: 'disabled by config (mesh.enabled = false)' }
        const created = await createMesh({ config: config.mesh, dev, stateDir: config.node.stateDir, nodeName: config.node.name, version: agentVersion },
          { logger: context.logger, inventory: () => inventory })
        created.addAvailabilityContributor({ name: 'weights', collect: () => weights?.advert() ?? {} })
        return {
          async start (options) {
            // The StateManager starts earlier; its sections are read at every publication (heartbeat).
            created.addAvailabilityContributor({ name: 'state', collect: () => stateManager !== undefined ? stateSections(stateManager.availability()) : {} })
            created.addAvailabilityContributor({ name: 'gpus', collect: () => gpuSampler !== undefined ? { gpus: gpusFromInventory(inventory, gpuSampler.samples()) } : {} })
            await created.start(options)
            mesh = created
          },
          async stop () { mesh = undefined; await created.stop() },
        }
      },
    },
    {
      // Leader election among the servers and fenced decisions over the mesh (mesh/election/).
      id: 'leader',
      requires: ['mesh'],
      async create (context) {
        const m = mesh!
        // The job table travels in one mesh message: half of the record limit leaves room for the batch around it.
        leaderTasks.push(createJobsLeaderTask({ config: config.placement, maxTableBytes: Math.floor(config.mesh.maxRecordBytes / 2) }, {
          logger: context.logger.child({ task: 'jobs' }),
          mesh: m,
          self: () => ({ peerId: m.status().peerId, name: config.node.name, gpus: inventory?.gpus.devices.length ?? 0 }),
        }))
        const created = await createLeaderService({ config: config.election, stateDir: config.node.stateDir, maxBatchBytes: config.mesh.maxRecordBytes },
          { logger: context.logger, mesh: mesh!, leaderTasks })
        return {
          async start (options) { await created.start(options); leader = created },
          async stop () { leader = undefined; await created.stop() },
        }
      },
    },
    {
      // Every agent's view of the leader's job table; submissions forwarded to the acting leader (mesh/jobs/).
      id: 'jobs',
      requires: ['leader'],
      async create (context) {
        const service = createJobsService({ slotS: config.placement.slotS }, { logger: context.logger, leader: leader!, selfPeerId: mesh!.status().peerId })
        return {
          async start () { service.start(); jobs = service },
          async stop () { jobs = undefined; service.stop() },
        }
      },
    },
    {
      // The reward service on this agent: trainers' submissions and results, and the supervised reward workers.
      id: 'reward',
      requires: ['leader', 'inventory'],
      async create (context) {
        if (!config.reward.enabled) return { skip: 'disabled by config (reward.enabled = false)' }
        const created = createRewardService({
          config: config.reward,
          socketPath: config.api.socketPath,
          nodeName: config.node.name,
          detectedCpuCores: inventory?.cpu.cores ?? 0,
          gpus: inventory?.gpus.devices.length ?? 0,
        }, { logger: context.logger, selfId: mesh!.status().peerId, leader: leader! })
        return {
          async start (options) { await created.start(options); reward = created },
          async stop () { reward = undefined; await created.stop() },
        }
      },
    },
    {
      id: 'api',
      requires: ['identity'],
      critical: true,
      create: api,
    },
  ]
  const runner = createSubsystemRunner(specs, { logger: components.logger })

  let stateDirLock: StateDirLock | undefined

  return {
    async start () {
      // One agent per state directory and socket, settled before any subsystem touches disk:
      // a second agent leaves here with ERR_STATE_DIR_LOCKED or ERR_SOCKET_IN_USE, having
      // changed nothing. The lock is held until stop() (or the process dies).
      stateDirLock = await lockStateDir({ stateDir: config.node.stateDir }, { logger: components.logger })
      try {
        await claimSocketPath(config.api.socketPath)
        // A failure to build is the api subsystem's, reported when it is created.
        await api().catch(() => {})
        await runner.startAll()
      } catch (err) {
        await stateDirLock.release()
        throw err
      }
    },
    async stop () {
      await runner.stopAll()
      // Built but never started by the runner (stopped during start-up): close it here.
      if (runner.get('api') === undefined) await (await builtApi?.catch(() => undefined))?.stop()
      await stateDirLock?.release()
    },
    status,
    subsystems: () => runner.records(),
  }
}
