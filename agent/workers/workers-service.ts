/**
 * The node side of live execution (PROTOCOL.md): the registry of this node's
 * workers, the executor of the leader's dispatches, and the mesh protocol
 * those arrive on. Every `sweepIntervalMs` (and at stop) it forgets jobs that
 * no longer run here: their workers are told to stop and their stored state
 * is dropped from the StateManager.
 */
import type { Logger } from 'pino'
import type { StateManager } from '../state/state-manager.ts'
import type { JobsView } from '../../mesh/control/jobs/job-table.ts'
import type { MeshLibp2p } from '../../mesh/membership/libp2p-node.ts'
import { serveOpDispatch } from '../../mesh/control/jobs/op-dispatch.ts'
import { createNodeExecutor, type NodeExecutor } from './node-executor.ts'
import { createWorkerRegistry, type WorkerRegistry } from './worker-registry.ts'

export interface WorkersServiceOptions {
  selfPeerId: string
  /** Default 5000. */
  sweepIntervalMs?: number
  /** placement.overlapSwitches (node-executor.ts). Default true. */
  overlapSwitches?: boolean
}

export interface WorkersServiceComponents {
  logger: Logger
  stateManager: Pick<StateManager, 'offload' | 'onload' | 'drop' | 'prefetch'>
  jobs(): JobsView
  /** The mesh's libp2p node, where dispatches arrive (undefined: in-process only, tests). */
  node: MeshLibp2p | undefined
}

export interface WorkersService {
  registry: WorkerRegistry
  executor: NodeExecutor
  start(): Promise<void>
  stop(): Promise<void>
}

export function createWorkersService (options: WorkersServiceOptions, components: WorkersServiceComponents): WorkersService {
  let executor: NodeExecutor | undefined
  const registry = createWorkerRegistry({ selfPeerId: options.selfPeerId }, {
    logger: components.logger,
    stateManager: components.stateManager,
    jobs: components.jobs,
    onWorkerLost: (w, why) => executor?.workerLost(w, why),
  })
  executor = createNodeExecutor({ selfPeerId: options.selfPeerId, overlapSwitches: options.overlapSwitches }, { logger: components.logger, registry, stateManager: components.stateManager })
  let timer: NodeJS.Timeout | undefined
  const sweep = (): void => { void registry.sweep().catch(err => components.logger.warn({ err: (err as Error).message }, 'workers: sweep failed')) }
  return {
    registry,
    executor,
    async start () {
      if (components.node !== undefined) await serveOpDispatch(components.node, m => executor!.handle(m))
      timer = setInterval(sweep, options.sweepIntervalMs ?? 5000)
      timer.unref()
    },
    async stop () {
      if (timer !== undefined) clearInterval(timer)
      registry.stop()
    },
  }
}
