/**
 * The local API: HTTP/1.1 + JSON on a unix socket (Docker-socket style, so
 * `curl --unix-socket` and any HTTP client work). Routes are thin adapters
 * over the services; schemas declared once give validation and the OpenAPI
 * document at /v1/openapi.json. Who may call which route, and use which
 * namespace, lock holder or worker: authorization.ts (AUTHORIZATION.md).
 */
import { lstat, unlink } from 'node:fs/promises'
import Fastify, { type FastifyInstance } from 'fastify'
import swagger from '@fastify/swagger'
import type { Logger } from 'pino'
import { ErrorBodySchema } from './wire/errors.ts'
import { createClientErrorHandler, createErrorHandler, notFoundHandler } from './error-mapping.ts'
import { capConnections, defaultConnectionLimits, receptionTimeoutOptions } from './connection-limits.ts'
import { requestValidatorBuilder, schemaErrorFormatter } from './request-validation.ts'
import { lazySchemaCompilers } from './lazy-schema-compilers.ts'
import { claimSocketPath, setSocketPermissions } from './socket-path.ts'
import { createNamespaceGuard, installAuthorization, resolveAdminGroup } from './authorization.ts'
import { registerStatusRoutes, type StatusSource } from './routes/status.ts'
import { registerNodeRoutes, type InventorySource } from './routes/node.ts'
import { registerLockRoutes, type DeviceLockSource } from './routes/locks.ts'
import { registerStateRoutes, type StateSource } from './routes/state.ts'
import { registerMeshRoutes, type MeshSource } from './routes/mesh.ts'
import { registerLeaderRoutes, type LeaderSource } from './routes/leader.ts'
import { registerWeightsRoutes, type WeightsSource } from './routes/weights.ts'
import { registerJobsRoutes, type JobsSource } from './routes/jobs.ts'
import { registerRewardRoutes, type RewardSource } from './routes/reward.ts'
import { registerWorkersRoutes, type WorkersSource } from './routes/workers.ts'
import { registerRolloutRoutes, type RolloutSource } from './routes/rollout.ts'

export interface ApiServerOptions {
  /** Unix socket path (at most 107 bytes). */
  socketPath: string
  /** Octal mode of the socket file, e.g. "0660". */
  socketMode: string
  /** Group owning the socket; "" keeps the process group. */
  socketGroup: string
  /** Largest accepted request body, bytes. */
  bodyLimitBytes: number
  /**
   * Most connections open at once on the socket; one over it is closed as soon
   * as accepted, with a warning at most every 10 s (connection-limits.ts). Default: 512.
   */
  maxConnections?: number
  /**
   * Longest time to receive one whole request (headers and body), ms; a request
   * not received by then is answered ERR_BAD_REQUEST and its connection closed.
   * Responses are not bounded (event streams, long polls). Default: 30000.
   */
  requestTimeoutMs?: number
  /** Directories file paths given through the API must lie in (path-roots.ts). Default: none (every such path refused). */
  pathRoots?: readonly string[]
  /**
   * Group whose members pass admin checks besides root and the agent's uid
   * (authorization.ts): a name in /etc/group or a numeric gid; "" = none.
   * An unknown name fails the build with ERR_CONFIG_INVALID. Default: "".
   */
  adminGroup?: string
  /**
   * Treat a caller whose SO_PEERCRED cannot be read as an admin (authorization.ts).
   * Only for an app served in-process, e.g. tests' inject(); never set it for
   * an API on a socket. Default: false (such callers fail admin and ownership checks).
   */
  trustUnidentifiedCallers?: boolean
  /**
   * Compile every route's schemas while building the app, so that a schema
   * that does not compile fails the build (the tests set it). Default false:
   * each route compiles at its first request (lazy-schema-compilers.ts).
   */
  compileSchemasNow?: boolean
  version: string
}

export interface ApiServerComponents {
  logger: Logger
  status: StatusSource
  inventory: InventorySource
  /** The device lock; without it the lock routes answer ERR_UNAVAILABLE. */
  locks?: DeviceLockSource
  /** The StateManager; without it the state routes answer ERR_UNAVAILABLE. */
  state?: StateSource
  /** The mesh; without it the mesh routes answer ERR_MESH_UNAVAILABLE. */
  mesh?: MeshSource
  /** The leader election; without it the leader routes answer ERR_LEADER_UNAVAILABLE. */
  leader?: LeaderSource
  /** The weight-transfer agent; without it the weights routes answer ERR_UNAVAILABLE. */
  weights?: WeightsSource
  /** Jobs (mesh/control/jobs/); without it the jobs routes answer ERR_UNAVAILABLE. */
  jobs?: JobsSource
  /** The reward service; without it the reward routes answer ERR_UNAVAILABLE. */
  reward?: RewardSource
  /** Default: live workers unavailable. */
  workers?: WorkersSource
  rollout?: RolloutSource
}

export interface ApiServer {
  /** Listens on the socket; a second call returns the first one's promise. */
  start(): Promise<void>
  stop(): Promise<void>
  /** The fastify instance, for `inject()` in tests and for later route modules. */
  readonly app: FastifyInstance
}

export async function createApiServer (options: ApiServerOptions, components: ApiServerComponents): Promise<ApiServer> {
  const app = await buildApiApp(options, components)
  capConnections(app.server, { maxConnections: options.maxConnections ?? defaultConnectionLimits.maxConnections }, components.logger)
  let started: Promise<void> | undefined
  let stopped: Promise<void> | undefined
  let listening = false
  let socketIno: number | undefined

  return {
    app,
    start () {
      started ??= (async () => {
        await claimSocketPath(options.socketPath)
        await app.listen({ path: options.socketPath })
        listening = true
        socketIno = (await lstat(options.socketPath)).ino
        await setSocketPermissions(options.socketPath, options.socketMode, options.socketGroup)
        components.logger.info({ socket: options.socketPath }, 'local API listening')
      })()
      return started
    },
    stop () {
      stopped ??= (async () => {
        await app.close()
        // Remove the socket only if it is still ours (not one a newer agent created).
        if (listening) {
          const current = await lstat(options.socketPath).catch(() => undefined)
          if (current !== undefined && current.ino === socketIno) await unlink(options.socketPath).catch(() => {})
        }
      })()
      return stopped
    },
  }
}

/** The fastify app with every route, not yet listening (tests use `inject`). */
export async function buildApiApp (
  options: Pick<ApiServerOptions, 'bodyLimitBytes' | 'version' | 'pathRoots' | 'requestTimeoutMs' | 'adminGroup' | 'trustUnidentifiedCallers' | 'compileSchemasNow'>,
  components: ApiServerComponents,
): Promise<FastifyInstance> {
  const requestTimeoutMs = options.requestTimeoutMs ?? defaultConnectionLimits.requestTimeoutMs
  const adminGroup = options.adminGroup ?? ''
  const adminGid = await resolveAdminGroup(adminGroup)
  const compilers = lazySchemaCompilers(requestValidatorBuilder())
  const app = Fastify({
    logger: false,
    bodyLimit: options.bodyLimitBytes,
    forceCloseConnections: true,
    return503OnClosing: true,
    // fastify sets the server's requestTimeout from its own option (default 0: none) after creating it.
    requestTimeout: requestTimeoutMs,
    http: receptionTimeoutOptions(requestTimeoutMs),
    clientErrorHandler: createClientErrorHandler(components.logger, requestTimeoutMs),
    schemaController: { compilersFactory: { buildValidator: compilers.buildValidator, buildSerializer: compilers.buildSerializer } },
    schemaErrorFormatter,
  })
  app.addSchema(ErrorBodySchema)
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'agentd local API', version: options.version, description: 'HTTP/JSON on the agent\'s unix socket' },
    },
  })
  const authorization = installAuthorization(app, {
    adminGid,
    adminGroup,
    agentUid: process.getuid?.() ?? 0,
    trustUnidentifiedCallers: options.trustUnidentifiedCallers ?? false,
  }, components.logger)
  const stateSource = components.state ?? { stateManager: () => ({ unavailable: 'the API was started without one' }) }
  const namespaces = createNamespaceGuard(authorization, () => {
    const sm = stateSource.stateManager()
    return 'unavailable' in sm ? undefined : sm
  })
  app.setErrorHandler(createErrorHandler(components.logger))
  app.setNotFoundHandler(notFoundHandler)

  registerStatusRoutes(app, components.status)
  registerNodeRoutes(app, components.inventory)
  registerLockRoutes(app, components.locks ?? { deviceLock: () => ({ unavailable: 'the API was started without one' }) }, authorization)
  const pathRoots = options.pathRoots ?? []
  registerStateRoutes(app, stateSource, pathRoots, namespaces)
  registerMeshRoutes(app, components.mesh ?? { mesh: () => ({ unavailable: 'the API was started without one' }) })
  registerLeaderRoutes(app, components.leader ?? { leader: () => ({ unavailable: 'the API was started without one' }) })
  registerWeightsRoutes(app, components.weights ?? { weights: () => ({ unavailable: 'the API was started without one' }) }, pathRoots, authorization, namespaces)
  registerJobsRoutes(app, components.jobs ?? { jobs: () => ({ unavailable: 'the API was started without one' }) })
  registerRewardRoutes(app, components.reward ?? { reward: () => ({ unavailable: 'the API was started without one' }) })
  registerWorkersRoutes(app, components.workers ?? { workers: () => ({ unavailable: 'the API was started without one' }) }, authorization, namespaces)
  registerRolloutRoutes(app, components.rollout ?? { rollout: () => ({ unavailable: 'the API was started without one' }) })
  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger())
  await app.ready()
  if (options.compileSchemasNow === true) compilers.compileAll()
  return app
}
