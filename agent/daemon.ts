/**
 * The composition root. It only wires: the ordered list of subsystems
 * `{ id, requires, create }`, started in order and stopped in reverse by the
 * runner, and the status every client sees. No subsystem starts itself.
 */
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import type { AgentConfig } from './config/schema.ts'
import { constantSubsystem, createSubsystemRunner, serviceSubsystem, subsystemSpecOf, type SubsystemRecord, type SubsystemSpec } from './subsystems.ts'
import { loadOrCreateNodeId } from './node-identity.ts'
import { probeInventory, type NodeInventory } from './inventory/inventory.ts'
import { createGpuSampler, type GpuSampler } from './inventory/gpu-sampler.ts'
import { createApiServer, type ApiServer } from './api/server.ts'
import { claimSocketPath } from './api/socket-path.ts'
import { lockStateDir, type StateDirLock } from './state-dir-lock.ts'
import { createDeviceLock, type DeviceLockService } from './state/device-lock.ts'
import { createProcfsProcessTable } from '../core/process-table.ts'
import { createStateManager, type StateManager } from './state/state-manager.ts'
import { createMesh, type Mesh } from '../mesh/membership/mesh-service.ts'
import { gpusFromInventory, stateSections } from '../mesh/membership/availability-publisher.ts'
import { createLeaderService, type LeaderService, type LeaderTask } from '../mesh/election/leader-service.ts'
import { loadClusterKey, loadOrCreateDevClusterKey } from '../mesh/membership/cluster-key.ts'
import { createJobsLeaderTask } from '../mesh/control/jobs/jobs-leader-task.ts'
import { createJobsService, type JobsService } from '../mesh/control/jobs/jobs-service.ts'
import { createWeightsService, manifestDirOf, type WeightsService } from './weights/weights-service.ts'
import { createRewardLeaderTask } from '../mesh/control/reward/reward-leader-task.ts'
import { createRewardService, type RewardService } from './reward/reward-service.ts'
import { createWorkersService, type WorkersService } from './workers/workers-service.ts'
import { createRolloutService, type RolloutService } from './rollout/rollout-service.ts'
import { createOpDispatch } from '../mesh/control/jobs/op-dispatch.ts'
import { createMetricsServer, type MetricsServer } from './metrics/metrics-server.ts'
import { createAgentMetrics } from './metrics/agent-metrics.ts'
import type { AgentLifecycle, StatusBody } from './api/wire/status.ts'
import { agentVersion } from './version.ts'
import { AgentError } from '../core/errors.ts'
import { processMemory } from '../core/process-memory.ts'
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

/** What each subsystem hands out while it is ok, by id: the runner's typed lookup. */
interface DaemonHandles {
  /** This node's id. */
  identity: string
  metrics: MetricsServer
  native: undefined
  /** The probed inventory and, when GPUs are sampled, their sampler. */
  inventory: { inventory: NodeInventory, gpuSampler?: GpuSampler }
  'device-lock': DeviceLockService
  state: StateManager
  weights: WeightsService
  mesh: Mesh
  leader: LeaderService
  jobs: JobsService
  reward: RewardService
  workers: WorkersService
  rollout: RolloutService
  api: ApiServer
}

const subsystem = subsystemSpecOf<DaemonHandles>()

/** The agent process's own memory and CPU (GET /v1/status). */
function processFootprint (): NonNullable<StatusBody['process']> {
  const { split, ...memory } = processMemory()
  const cpu = process.cpuUsage()
  return { pid: process.pid, ...memory, ...split, cpuSeconds: Math.round((cpu.user + cpu.system) / 1e4) / 100 }
}

export function createDaemon (options: DaemonOptions, components: DaemonComponents): Daemon {
  const { config, dev } = options
  const startedAt = performance.now()
  let lifecycle: AgentLifecycle = 'starting'
  const subsystemReason = (id: string): string => {
    const record = runner.records().find(r => r.id === id)
    return record?.reason ?? `subsystem ${id} is ${record?.state ?? 'not configured'}`
  }
  const handle = <K extends keyof DaemonHandles>(id: K): DaemonHandles[K] | undefined => runner.handle(id)

  const status = (): StatusBody => {
    const mesh = handle('mesh')
    const leader = handle('leader')
    const weights = handle('weights')
    const metrics = handle('metrics')
    // `metrics` is one of the sections later subsystems add (StatusSchema admits them).
    const body: StatusBody & { metrics?: { address: string } } = {
      node: { id: handle('identity') ?? '', name: config.node.name },
      state: lifecycle,
      version: agentVersion,
      uptimeS: Math.round((performance.now() - startedAt) / 100) / 10,
      dev,
      process: processFootprint(),
      subsystems: runner.records(),
      native: capabilities,
      ...(mesh !== undefined ? { mesh: mesh.status() } : {}),
      ...(leader !== undefined ? { leader: leader.view() } : {}),
      ...(weights !== undefined ? { weights: { address: weights.address(), ...weights.served() } } : {}),
      ...(metrics !== undefined ? { metrics: { address: metrics.address() } } : {}),
    }
    return body
  }

  /**
   * The API's routes and schemas are compiled before any subsystem starts
   * (~0.3 s of CPU on the event loop, several times that on a loaded host):
   * compiled after the mesh started, they held up its first connections and
   * the join sync. The api subsystem, last, only listens. Built once (start).
   */
  let builtApi: Promise<ApiServer> | undefined
  // File paths given through the API stay inside these (agent/api/routes/path-roots.ts); default: <stateDir>/files.
  const pathRoots = config.api.pathRoots.length > 0 ? config.api.pathRoots : [join(config.node.stateDir, 'files')]
  const api = (): Promise<ApiServer> => builtApi ??= createApiServer({ ...config.api, pathRoots, version: agentVersion }, {
    logger: components.logger.child({ component: 'api' }),
    status: { status, lifecycle: () => lifecycle },
    inventory: { inventory: () => handle('inventory')?.inventory },
    locks: { deviceLock: () => handle('device-lock') ?? { unavailable: subsystemReason('device-lock') } },
    state: { stateManager: () => handle('state') ?? { unavailable: subsystemReason('state') } },
    mesh: { mesh: () => handle('mesh') ?? { unavailable: subsystemReason('mesh') } },
    leader: { leader: () => handle('leader') ?? { unavailable: subsystemReason('leader') } },
    weights: { weights: () => handle('weights') ?? { unavailable: subsystemReason('weights') } },
    jobs: { jobs: () => handle('jobs') ?? { unavailable: subsystemReason('jobs') } },
    reward: { reward: () => handle('reward') ?? { unavailable: subsystemReason('reward') } },
    workers: { workers: () => handle('workers') ?? { unavailable: subsystemReason('workers') } },
    rollout: { rollout: () => handle('rollout') ?? { unavailable: subsystemReason('rollout') } },
  })

  /**
   * Leader-only subsystems (the cluster policies of mesh/policies/), the one
   * place they are registered: started in this order when this agent gains
   * leadership and may act, stopped (their signal aborted) when it loses it.
   */
  const leaderTasks = (mesh: Mesh, leaderLogger: Logger, inventory: () => NodeInventory | undefined): LeaderTask[] => [
    // DistRS reward proxy and worker scaling (agent/reward/). The planner's history travels in the desired state,
    // in a quarter of the mesh record limit (the job table takes half).
    ...(config.reward.enabled ? [createRewardLeaderTask({ config: config.reward, maxHistoryBytes: Math.floor(config.mesh.maxRecordBytes / 4) }, { logger: components.logger.child({ component: 'reward-proxy' }), selfId: () => mesh.status().peerId })] : []),
    // Placement of the job table (mesh/control/jobs/). The table travels in one mesh message: half of
    // the record limit leaves room for the batch around it.
    createJobsLeaderTask({ config: config.placement, maxTableBytes: Math.floor(config.mesh.maxRecordBytes / 2) }, {
      logger: leaderLogger.child({ task: 'jobs' }),
      mesh,
      self: () => ({ peerId: mesh.status().peerId, name: config.node.name, gpus: inventory()?.gpus.devices.length ?? 0 }),
      // Live operations go to the nodes' executors (agent/workers/); this agent's own runs in process.
      dispatch: createOpDispatch({
        node: mesh.node,
        self: mesh.status().peerId,
        local: async m => {
          const workers = handle('workers')
          if (workers === undefined) throw new AgentError('ERR_UNAVAILABLE', `live workers are not available on the leader's node: ${subsystemReason('workers')}`)
          return await workers.executor.handle(m)
        },
      }),
    }),
  ]

  const specs: Array<SubsystemSpec<DaemonHandles>> = [
    subsystem({
      id: 'identity',
      requires: [],
      critical: true,
      create: async () => constantSubsystem(await loadOrCreateNodeId(config.node.stateDir)),
    }),
    subsystem({
      // Prometheus endpoint on its own TCP address (agent/metrics/): reads the other subsystems'
      // counters at each scrape, so it starts first and finds them as they come up. Critical: an
      // endpoint the operator configured that cannot listen (port in use) stops the start-up
      // before anything heavy started, rather than leaving the node unmonitored.
      id: 'metrics',
      requires: [],
      critical: true,
      async create (context) {
        if (config.metrics.listen === '') return { skip: 'disabled by config (metrics.listen = "")' }
        const source = createAgentMetrics({ version: agentVersion, startedAtMs: startedAt }, {
          logger: context.logger,
          subsystems: () => runner.records(),
          inventory: () => context.find('inventory'),
          deviceLock: () => context.find('device-lock'),
          stateManager: () => context.find('state'),
          weights: () => context.find('weights'),
          mesh: () => context.find('mesh'),
          leader: () => context.find('leader'),
          jobs: () => context.find('jobs'),
          reward: () => context.find('reward'),
          rollout: () => context.find('rollout'),
        })
        return serviceSubsystem(createMetricsServer(config.metrics, { logger: context.logger, source }))
      },
    }),
    subsystem({
      // The addon moves bulk data for the StateManager and weights; without it they cannot run.
      id: 'native',
      requires: [],
      async create () {
        if (!capabilities.addon.loaded) throw new AgentError('ERR_NATIVE_UNAVAILABLE', capabilities.addon.error ?? 'native addon not loaded')
        return constantSubsystem(undefined)
      },
    }),
    subsystem({
      id: 'inventory',
      requires: [],
      async create (context) {
        const probe = { hostname: config.node.name, nvidiaSmiCommand: config.inventory.nvidiaSmiCommand, ...(config.inventory.gpus !== undefined ? { gpuOverride: config.inventory.gpus } : {}) }
        const inventory = await probeInventory(probe)
        const devices = inventory.gpus.devices
        if (config.inventory.gpuSampleIntervalMs === 0 || devices.length === 0) return constantSubsystem({ inventory })
        const gpuSampler = createGpuSampler({ command: config.inventory.nvidiaSmiCommand, intervalMs: config.inventory.gpuSampleIntervalMs, timeoutMs: 10_000 },
          { devices, logger: context.logger, onChange: () => context.find('mesh')?.availabilityChanged() })
        return { ...serviceSubsystem(gpuSampler), handle: { inventory, gpuSampler } }
      },
    }),
    subsystem({
      // RLinf §3.3 context switching: one FIFO lock per GPU of the inventory. Holders are
      // processes identified by SO_PEERCRED, which needs the native addon.
      id: 'device-lock',
      requires: ['native', 'inventory'],
      async create (context) {
        const gpuCount = context.get('inventory').inventory.gpus.devices.length
        if (gpuCount === 0) return { skip: 'no GPUs in the inventory' }
        return serviceSubsystem(createDeviceLock({ gpuCount, holderCheckIntervalMs: config.locks.holderCheckIntervalMs },
          { logger: context.logger, processes: createProcfsProcessTable() }))
      },
    }),
    subsystem({
      id: 'state',
      requires: ['native'],
      async create (context) {
        if (!config.state.enabled) return { skip: 'disabled by config (state.enabled = false)' }
        return serviceSubsystem(createStateManager(config.state, { logger: context.logger }))
      },
    }),
    subsystem({
      // RLBoost §4.3 pull-based weight transfer: versions in the StateManager, served over TCP
      // authenticated with the cluster key (the mesh's key file; --dev generates one like the mesh does).
      id: 'weights',
      requires: ['state'],
      async create (context) {
        if (!config.weights.enabled) return { skip: 'disabled by config (weights.enabled = false)' }
        const clusterKey = config.mesh.clusterKeyFile === '' && dev
          ? (await loadOrCreateDevClusterKey(config.node.stateDir)).key
          : await loadClusterKey(config.mesh.clusterKeyFile)
        // The mesh starts later: its peers and change notifications are looked up when used.
        return serviceSubsystem(createWeightsService({ ...config.weights, manifestDir: manifestDirOf(config.node.stateDir) }, {
          stateManager: context.get('state'),
          clusterKey,
          logger: context.logger,
          meshPeers: () => context.find('mesh')?.peers(),
          availabilityChanged: () => context.find('mesh')?.availabilityChanged(),
        }))
      },
    }),
    subsystem({
      // RLBoost §4.1–4.2 rollout: engines registered on this node (advertised in the record) and the
      // steps trainers run through this agent over every instance of the cluster (agent/rollout/).
      // The mesh starts later: its peers and change notifications are looked up when used.
      id: 'rollout',
      requires: [],
      async create (context) {
        return serviceSubsystem(createRolloutService({ stateDir: config.node.stateDir, nodeName: config.node.name }, {
          logger: context.logger,
          members: () => context.find('mesh')?.peers(),
          availabilityChanged: () => context.find('mesh')?.availabilityChanged(),
        }))
      },
    }),
    subsystem({
      // Membership and availability gossip with the other agents (libp2p + gossipsub, SWIM).
      id: 'mesh',
      requires: ['identity'],
      async create (context) {
        if (!config.mesh.enabled) return { skip: 'disabled by config (mesh.enabled = false)' }
        const inventory = (): NodeInventory | undefined => context.find('inventory')?.inventory
        const mesh = await createMesh({ config: config.mesh, dev, stateDir: config.node.stateDir, nodeName: config.node.name, version: agentVersion },
          { logger: context.logger, inventory })
        // Read at every publication (heartbeat): whatever of these is ok then is advertised.
        mesh.addAvailabilityContributor({ name: 'weights', collect: () => context.find('weights')?.advert() ?? {} })
        mesh.addAvailabilityContributor({ name: 'rollout', collect: () => context.find('rollout')?.advert() ?? {} })
        mesh.addAvailabilityContributor({
          name: 'state',
          collect: () => {
            const stateManager = context.find('state')
            return stateManager !== undefined ? stateSections(stateManager.availability()) : {}
          },
        })
        mesh.addAvailabilityContributor({
          name: 'gpus',
          collect: () => {
            const gpuSampler = context.find('inventory')?.gpuSampler
            return gpuSampler !== undefined ? { gpus: gpusFromInventory(inventory(), gpuSampler.samples()) } : {}
          },
        })
        return serviceSubsystem(mesh)
      },
    }),
    subsystem({
      // Leader election among the servers and fenced decisions over the mesh (mesh/election/).
      id: 'leader',
      requires: ['mesh'],
      async create (context) {
        const mesh = context.get('mesh')
        return serviceSubsystem(await createLeaderService({ config: config.election, stateDir: config.node.stateDir, maxBatchBytes: config.mesh.maxRecordBytes }, {
          logger: context.logger,
          mesh,
          leaderTasks: leaderTasks(mesh, context.logger, () => context.find('inventory')?.inventory),
        }))
      },
    }),
    subsystem({
      // Every agent's view of the leader's job table; submissions forwarded to the acting leader (mesh/control/jobs/).
      // (mesh is ok whenever leader is: listing it second keeps the skip reason "requires leader".)
      id: 'jobs',
      requires: ['leader', 'mesh'],
      async create (context) {
        return serviceSubsystem(createJobsService({ slotS: config.placement.slotS },
          { logger: context.logger, leader: context.get('leader'), selfPeerId: context.get('mesh').status().peerId }))
      },
    }),
    subsystem({
      // The reward service on this agent: trainers' submissions and results, and the supervised reward workers.
      // Workers are known by SO_PEERCRED (the addon): without it every fetch would be refused and the
      // queued requests would wait for ever behind workers that look alive.
      id: 'reward',
      requires: ['leader', 'inventory', 'mesh', 'native'],
      async create (context) {
        if (!config.reward.enabled) return { skip: 'disabled by config (reward.enabled = false)' }
        const { inventory } = context.get('inventory')
        return serviceSubsystem(createRewardService({
          config: config.reward,
          socketPath: config.api.socketPath,
          nodeName: config.node.name,
          detectedCpuCores: inventory.cpu.cores,
          gpus: inventory.gpus.devices.length,
        }, { logger: context.logger, selfId: context.get('mesh').status().peerId, leader: context.get('leader') }))
      },
    }),
    subsystem({
      // Live execution on this node (agent/workers/): workers of live jobs register here, and the
      // leader's dispatches of their operations (with the context switches before them) run here.
      id: 'workers',
      requires: ['jobs', 'state', 'mesh'],
      async create (context) {
        const jobs = context.get('jobs')
        const mesh = context.get('mesh')
        return serviceSubsystem(createWorkersService({ selfPeerId: mesh.status().peerId, overlapSwitches: config.placement.overlapSwitches },
          { logger: context.logger, stateManager: context.get('state'), jobs: () => jobs.list(), node: mesh.node }))
      },
    }),
    subsystem({
      id: 'api',
      requires: ['identity'],
      critical: true,
      create: async () => serviceSubsystem(await api()),
    }),
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
        // The default root of API file paths (api.pathRoots), made once nothing can refuse this agent any more.
        await mkdir(join(config.node.stateDir, 'files'), { recursive: true, mode: 0o750 })
        // Listening before the subsystems start: while they do (NVMe recovery of many keys takes
        // seconds) the API answers status and health ("starting", ERR_STARTING: routes/status.ts).
        // A failure to build is the api subsystem's, reported when it is created; its start then is a no-op.
        await (await api().catch(() => undefined))?.start()
        await runner.startAll()
        if (lifecycle === 'starting') lifecycle = 'ready'
      } catch (err) {
        // The API listened before the subsystems: a start-up that fails closes it too (nothing else keeps the process).
        await (await builtApi?.catch(() => undefined))?.stop()
        await stateDirLock.release()
        throw err
      }
    },
    async stop () {
      lifecycle = 'stopping'
      await runner.stopAll()
      // Built but maybe never started by the runner (stopped during start-up): close it here
      // too. ApiServer.stop() is idempotent, so a second stop after the runner's is a no-op.
      await (await builtApi?.catch(() => undefined))?.stop()
      await stateDirLock?.release()
    },
    status,
    subsystems: () => runner.records(),
  }
}
