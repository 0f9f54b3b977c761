/**
 * Who may call what on the local API (AUTHORIZATION.md has the reasoning).
 * The socket's file mode and group decide who may connect at all; past that,
 * every route has an access class, checked against the caller's SO_PEERCRED
 * uid/gid before anything else runs (before the body is read):
 *
 * - read:     any caller (nothing changes);
 * - workload: any caller, with object-level checks in the route before any
 *             side effect (a namespace's keys only by its owner: `createNamespaceGuard`;
 *             a lock holder, a worker, a weights region only by the uid that created it;
 *             a model's versions only by the uid that first published it);
 * - admin:    root, the agent's own uid, or a member (primary or
 *             supplementary group) of `api.adminGroup`.
 *
 * A refusal is ERR_FORBIDDEN (403) naming the refused uid/gid and what is
 * needed, and changes nothing. A caller whose credentials cannot be read
 * (no addon, or fastify's inject()) passes read and plain workload checks
 * and fails admin and ownership checks, unless the app was built with
 * `trustUnidentifiedCallers` (tests that inject; never the daemon's socket).
 *
 * Every route must be listed in `routeAccess`: registering one that is not
 * throws, so a new route cannot skip authorization.
 */
import { readFile } from 'node:fs/promises'
import type { Socket } from 'node:net'
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { AgentError } from '../../core/errors.ts'
import type { PeerCredentials } from '../../native/index.ts'
import { parseKey } from '../state/keys.ts'
import type { StateManager } from '../state/state-manager.ts'
import { callerOf } from './caller.ts'
import type { Authorization, NamespaceGuard } from './routes/route-guards.ts'

export type { Authorization, NamespaceGuard }

export type RouteAccess = 'read' | 'workload' | 'admin'

/**
 * The access class of every route, by "METHOD url" as registered (HEAD
 * follows GET). AUTHORIZATION.md explains each; a test keeps the two equal.
 */
export const routeAccess: Readonly<Record<string, RouteAccess>> = {
  'GET /healthz': 'read',
  'GET /v1/status': 'read',
  'GET /v1/node': 'read',
  'GET /v1/openapi.json': 'read',

  'GET /v1/locks': 'read',
  'GET /v1/locks/gpu/:n/events': 'read',
  'POST /v1/locks/gpu/:n/acquire': 'workload', // holder: its creator's uid
  'POST /v1/locks/gpu/:n/release': 'workload', // holder: its creator's uid

  'GET /v1/state/residency': 'read',
  'GET /v1/state/owners': 'read',
  'POST /v1/state/offload': 'workload', // namespaces: write (claims the new ones)
  'POST /v1/state/onload': 'workload', // namespaces: read
  'POST /v1/state/prefetch': 'workload', // namespaces: read
  'POST /v1/state/drop': 'workload', // namespaces: write
  'POST /v1/state/hints': 'workload', // namespaces under each prefix: read
  'POST /v1/state/materialize': 'workload', // namespaces under the prefix: read

  'GET /v1/mesh': 'read',
  'GET /v1/mesh/peers': 'read',

  'GET /v1/leader': 'read',
  'GET /v1/leader/decisions': 'read',
  'POST /v1/leader/decisions': 'admin',

  'GET /v1/weights': 'read',
  'GET /v1/weights/:model/:version/manifest': 'read',
  'POST /v1/weights/regions': 'workload', // the model's owner (claims a model nobody owns)
  'DELETE /v1/weights/regions/:region': 'workload', // the region's uid
  'POST /v1/weights/publish': 'workload', // the model's owner (claims); source keys: read; a region: its uid
  'POST /v1/weights/pull': 'workload',
  'POST /v1/weights/retire': 'workload', // the model's owner

  'GET /v1/jobs': 'read',
  'GET /v1/jobs/top': 'read',
  'POST /v1/jobs': 'admin',
  'POST /v1/jobs/:id/complete': 'admin',
  'POST /v1/jobs/:id/ops': 'admin',

  'GET /v1/reward/status': 'read',
  'POST /v1/reward/batches': 'workload',
  'POST /v1/reward/requests': 'workload',
  'GET /v1/reward/requests/:id': 'workload', // marks the result fetched
  'POST /v1/reward/cancel': 'workload', // as submitting: a trainer ends its own batches
  'POST /v1/reward/workers': 'admin', // an external worker serves every trainer's requests: an admin process
  'POST /v1/reward/workers/leave': 'admin',
  'POST /v1/reward/work/fetch': 'admin', // the agent's supervised workers run as its uid
  'POST /v1/reward/work/complete': 'admin',

  'GET /v1/workers': 'read',
  'POST /v1/workers': 'workload', // namespaces of its state: write (claims)
  'GET /v1/workers/:id/events': 'workload', // the registering uid
  'POST /v1/workers/:id/replies': 'workload', // the registering uid
  'DELETE /v1/workers/:id': 'workload', // the registering uid

  'GET /v1/rollout': 'read',
  'POST /v1/rollout/instances': 'admin', // an instance receives every trainer's prompts: an admin process registers it
  'DELETE /v1/rollout/instances/:id': 'admin',
  'POST /v1/rollout/terminate': 'admin', // the node's preemption watcher
  'POST /v1/rollout/steps': 'workload',
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The calling process (SO_PEERCRED); null when unknown. */
    caller: PeerCredentials | null
    /** The caller passes admin checks (root, the agent's uid, api.adminGroup; or trusted while unidentified). */
    admin: boolean
  }
  interface FastifyContextConfig {
    /** Set from routeAccess when the route is registered. */
    access?: RouteAccess
  }
}

export interface AuthorizationOptions {
  /** gid of api.adminGroup (resolveAdminGroup); undefined: none, only root and the agent's uid are admins. */
  adminGid: number | undefined
  /** How api.adminGroup was given, for messages (a name or a gid). */
  adminGroup: string
  /** The agent's own uid (process.getuid()). */
  agentUid: number
  /**
   * A caller whose credentials cannot be read passes every check as an admin.
   * Only for an app served in-process (tests' inject()); never for the socket.
   */
  trustUnidentifiedCallers: boolean
}

/**
 * api.adminGroup as a gid: "" = none, digits = that gid, otherwise a group
 * name that must exist in /etc/group (ERR_CONFIG_INVALID when it does not).
 */
export async function resolveAdminGroup (value: string, groupFile = '/etc/group'): Promise<number | undefined> {
  if (value === '') return undefined
  if (/^[0-9]+$/.test(value)) return Number(value)
  const text = await readFile(groupFile, 'utf8').catch(() => '')
  const entry = text.split('\n').map(line => line.split(':')).find(fields => fields[0] === value)
  if (entry === undefined || entry[2] === undefined || !/^[0-9]+$/.test(entry[2])) {
    throw new AgentError('ERR_CONFIG_INVALID', `api.adminGroup: there is no group "${value}" in ${groupFile}; create it, give a numeric gid, or set api.adminGroup = "" (then only root and the agent's uid are admins)`)
  }
  return Number(entry[2])
}

/**
 * The groups of a running process and its real uid, from /proc/<pid>/status;
 * undefined when it has exited. The caller compares the uid with SO_PEERCRED's
 * so a pid reused since the connection was made is not mistaken for it.
 */
async function processGroups (pid: number): Promise<{ uid: number, groups: number[] } | undefined> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => undefined)
  if (text === undefined) return undefined
  const uid = /^Uid:\s+([0-9]+)/m.exec(text)
  const groups = /^Groups:[ \t]*([0-9 \t]*)$/m.exec(text)
  if (uid === null) return undefined
  return { uid: Number(uid[1]), groups: (groups?.[1] ?? '').split(/\s+/).filter(g => g !== '').map(Number) }
}

/** What a refused caller is called in messages. */
export function describeCaller (caller: PeerCredentials | null): string {
  return caller === null ? 'a caller whose credentials cannot be read (no SO_PEERCRED)' : `uid ${caller.uid} (gid ${caller.gid}, pid ${caller.pid})`
}

/** Who passes admin checks, for messages. */
function admins (options: AuthorizationOptions): string {
  if (options.adminGid === undefined) return `root or the agent's uid ${options.agentUid} (api.adminGroup names no group)`
  const gid = options.adminGroup === String(options.adminGid) ? '' : ` (gid ${options.adminGid})`
  return `root, the agent's uid ${options.agentUid}, or a member of group ${options.adminGroup}${gid} (api.adminGroup)`
}


const routesOf = new WeakMap<FastifyInstance, Array<{ method: string, url: string, access: RouteAccess }>>()

/** Every route registered on `app` with its class (for tests and tools). */
export function registeredRoutes (app: FastifyInstance): ReadonlyArray<{ method: string, url: string, access: RouteAccess }> {
  return routesOf.get(app) ?? []
}

/**
 * Installs the checks on `app`; call before any route is registered. Sets
 * request.caller and request.admin on every request, refuses admin routes to
 * non-admins (onRequest: before the body is read), and throws at registration
 * for a route missing from routeAccess.
 */
export function installAuthorization (app: FastifyInstance, options: AuthorizationOptions, logger: Logger): Authorization {
  const routes: Array<{ method: string, url: string, access: RouteAccess }> = []
  routesOf.set(app, routes)
  /** Group membership per connection (read once from /proc, like the credentials). */
  const groupMember = new WeakMap<Socket, Promise<boolean>>()

  const isAdmin = async (caller: PeerCredentials | null, socket: Socket): Promise<boolean> => {
    if (caller === null) return options.trustUnidentifiedCallers
    if (caller.uid === 0 || caller.uid === options.agentUid) return true
    const gid = options.adminGid
    if (gid === undefined) return false
    if (caller.gid === gid) return true
    let member = groupMember.get(socket)
    if (member === undefined) {
      member = processGroups(caller.pid).then(p => p !== undefined && p.uid === caller.uid && p.groups.includes(gid))
      groupMember.set(socket, member)
    }
    return await member
  }

  const authorization: Authorization = {
    forbidden (request, action, who, details = {}) {
      const caller = request.caller
      logger.warn({ method: request.method, url: request.routeOptions.url ?? request.url, action, callerUid: caller?.uid ?? null, callerGid: caller?.gid ?? null, callerPid: caller?.pid ?? null, ...details }, 'API call refused')
      return new AgentError('ERR_FORBIDDEN', `${describeCaller(caller)} may not ${action}: ${who}`, {
        details: { ...(caller !== null ? { uid: caller.uid, gid: caller.gid, pid: caller.pid } : { uid: null }), ...details },
      })
    },
    admins: () => admins(options),
  }

  app.decorateRequest('caller', null)
  app.decorateRequest('admin', false)
  app.addHook('onRoute', route => {
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    const classes = new Set<RouteAccess>()
    for (const method of methods) {
      const access = routeAccess[`${method === 'HEAD' ? 'GET' : method} ${route.url}`]
      if (access === undefined) throw new Error(`route ${method} ${route.url} has no access class: add it to routeAccess in agent/api/authorization.ts and to AUTHORIZATION.md`)
      classes.add(access)
      routes.push({ method, url: route.url, access })
    }
    if (classes.size !== 1) throw new Error(`route ${methods.join(',')} ${route.url} has methods of different access classes; register them separately`)
    route.config = { ...route.config, access: [...classes][0]! }
  })
  app.addHook('onRequest', async request => {
    const socket = request.raw.socket
    request.caller = callerOf(socket)
    request.admin = await isAdmin(request.caller, socket)
    logger.debug({ method: request.method, url: request.url, callerPid: request.caller?.pid, callerUid: request.caller?.uid, admin: request.admin }, 'request')
    if (request.routeOptions.config.access === 'admin' && !request.admin) {
      throw authorization.forbidden(request, `${request.method} ${request.routeOptions.url ?? request.url}`,
        `it changes state every user of this agent or the cluster shares; it needs an admin caller: ${admins(options)}`, { needed: 'admin' })
    }
  })
  return authorization
}

/** The StateManager as the namespace guard needs it; undefined when it is not running. */
export type NamespaceOwnerSource = () => Pick<StateManager, 'namespaceOwner' | 'nestedNamespaceOwners' | 'claimNamespaces' | 'storedKeys'> | undefined

export const isWeightsNamespace = (namespace: string): boolean => namespace === 'weights' || namespace.startsWith('weights/')

export function createNamespaceGuard (authorization: Authorization, state: NamespaceOwnerSource): NamespaceGuard {
  const guard: NamespaceGuard = {
    ofKeys (keys) {
      const namespaces = new Set<string>()
      for (const key of keys) {
        try { namespaces.add(parseKey(key).namespace) } catch {}
      }
      return [...namespaces]
    },
    ofPrefixes (prefixes) {
      const held = new Set((state()?.storedKeys() ?? []).map(k => k.namespace))
      return [...held].filter(namespace => prefixes.some(prefix => `${namespace}/`.startsWith(prefix) || prefix.startsWith(`${namespace}/`)))
    },
    check (request, namespaces, use, action) {
      if (request.admin) return
      const sm = state()
      for (const namespace of typeof namespaces === 'function' ? namespaces() : namespaces) {
        if (request.caller === null) {
          throw authorization.forbidden(request, `${action} in namespace ${namespace}`, `namespace ownership is checked by uid, and this caller's uid is unknown (call over the agent's unix socket with the native addon loaded), unless it is an admin: ${authorization.admins()}`, { namespace, needed: 'owner' })
        }
        if (isWeightsNamespace(namespace)) {
          if (use === 'read') continue
          throw authorization.forbidden(request, `${action} in namespace ${namespace}`, `weights/ namespaces hold published and pulled weights, which change only through /v1/weights (publish, retire), or by an admin: ${authorization.admins()}`, { namespace, needed: 'admin' })
        }
        const owner = sm?.namespaceOwner(namespace)
        if (owner === request.caller.uid) continue
        if (owner === undefined) {
          if (use === 'read') continue
          const other = sm?.nestedNamespaceOwners(namespace).find(n => n.owner !== request.caller!.uid)
          if (other === undefined) continue
          const whose = other.owner === 'agent' ? 'the agent itself' : `uid ${other.owner}`
          throw authorization.forbidden(request, `${action} in namespace ${namespace}`, `namespace ${other.namespace}, ${other.namespace.length < namespace.length ? 'above' : 'below'} it, belongs to ${whose}, and nested namespaces have one owner; only an admin (${authorization.admins()}) may`, { namespace, owner: other.owner, nested: other.namespace, needed: 'owner' })
        }
        const whose = owner === 'agent' ? 'the agent itself (keys it stored for its own services, or recovered without an owner)' : `uid ${owner}, the uid that stored its first key`
        throw authorization.forbidden(request, `${action} in namespace ${namespace}`, `the namespace belongs to ${whose}; only that owner or an admin (${authorization.admins()}) may`, { namespace, owner, needed: 'owner' })
      }
    },
    claimForStore (request, namespaces, action) {
      const list = [...namespaces]
      guard.check(request, list, 'write', action)
      return state()?.claimNamespaces(list, request.caller?.uid) ?? (() => {})
    },
  }
  return guard
}
