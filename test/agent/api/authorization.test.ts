// Authorization of the local API in process: every route has an access class (the code's list, the
// routes the app registers and AUTHORIZATION.md agree), unidentified callers fail admin and ownership
// checks unless the app trusts them, api.adminGroup resolution, and the namespace rules.
import t from 'tap'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Fastify, { type FastifyRequest } from 'fastify'
import { pino } from 'pino'
import { buildApiApp, type ApiServerComponents } from '../../../agent/api/server.ts'
import { createNamespaceGuard, installAuthorization, registeredRoutes, resolveAdminGroup, routeAccess, type Authorization } from '../../../agent/api/authorization.ts'
import { createNamespaceOwners } from '../../../agent/state/namespace-owners.ts'
import { parseKey, type StateKey } from '../../../agent/state/keys.ts'
import type { PeerCredentials } from '../../../native/index.ts'
import { repoRoot, tempDir } from '../../helpers/agent-process.ts'

const logger = pino({ level: 'silent' })
const base: ApiServerComponents = { logger, status: { status: () => ({}) as never }, inventory: { inventory: () => undefined } }

/** Every route of `app` as "METHOD url", read from the router's own listing (not from our hook). */
function routerRoutes (tree: string): string[] {
  const routes: string[] = []
  const stack: string[] = []
  for (const line of tree.split('\n')) {
    const m = /^([│ ]*)[├└]── (\S+) \(([A-Z, ]+)\)$/.exec(line.replace(/\u00a0/g, ' '))
    if (m === null) continue
    const depth = m[1]!.length / 4
    stack.length = depth
    stack.push(m[2]!)
    for (const method of m[3]!.split(', ')) if (method !== 'HEAD') routes.push(`${method} ${stack.join('')}`)
  }
  return routes.sort()
}

t.test('every route the app registers has an access class, and the list has no other entry', async t => {
  const app = await buildApiApp({ bodyLimitBytes: 1024, version: 't' }, base)
  t.teardown(() => app.close())
  const listed = routerRoutes(app.printRoutes({ commonPrefix: false }))
  t.ok(listed.length >= 40, `the router lists the routes (${listed.length})`)
  t.same(listed, Object.keys(routeAccess).sort(), 'the routes registered are exactly those of routeAccess')
  for (const { method, url, access } of registeredRoutes(app)) {
    t.equal(access, routeAccess[`${method === 'HEAD' ? 'GET' : method} ${url}`], `${method} ${url} is ${access}`)
  }
  t.equal(new Set(registeredRoutes(app).map(r => `${r.method} ${r.url}`)).size, registeredRoutes(app).length)
})

t.test('a route missing from routeAccess cannot be registered', async t => {
  const app = Fastify()
  installAuthorization(app, { adminGid: undefined, adminGroup: '', agentUid: 0, trustUnidentifiedCallers: false }, logger)
  t.throws(() => app.get('/v1/something-new', async () => ({})), /GET \/v1\/something-new has no access class/)
  t.throws(() => app.route({ method: ['GET', 'POST'], url: '/v1/leader/decisions', handler: async () => ({}) }), /different access classes/)
  t.doesNotThrow(() => app.get('/v1/status', async () => ({})))
  await app.close()
})

t.test('AUTHORIZATION.md lists every route with the class the code gives it', async t => {
  const text = readFileSync(join(repoRoot, 'agent/api/AUTHORIZATION.md'), 'utf8')
  const rows = [...text.matchAll(/^\| ((?:GET|POST|PUT|DELETE) \S+) \| (read|workload|admin) \|/gm)].map(m => [m[1]!, m[2]!])
  t.same(Object.fromEntries(rows), routeAccess)
  t.equal(rows.length, Object.keys(routeAccess).length, 'each route once')
})

t.test('an unidentified caller (inject: no SO_PEERCRED) fails admin and ownership checks unless the app trusts it', async t => {
  const decided: string[] = []
  const offloaded: unknown[] = []
  const stateManager = {
    namespaceOwner: () => undefined,
    nestedNamespaceOwners: () => [],
    claimNamespaces: () => () => {},
    storedKeys: () => [],
    offload: async (items: unknown[]) => { offloaded.push(...items); return [] },
  }
  const components: ApiServerComponents = {
    ...base,
    leader: { leader: () => ({ view: () => ({}) as never, decisions: () => [], decide: async (kind: string) => { decided.push(kind); return { epoch: 1, seq: decided.length } } }) },
    state: { stateManager: () => stateManager as never },
  }
  const offload = { method: 'POST' as const, url: '/v1/state/offload', payload: { tensors: [{ key: 'j/a/w:param@[0]/[4]:u8#v0', source: { kind: 'shm', name: 'x', offset: 0 } }] } }

  const strict = await buildApiApp({ bodyLimitBytes: 1 << 20, version: 't' }, components)
  t.teardown(() => strict.close())
  const refused = await strict.inject({ method: 'POST', url: '/v1/leader/decisions', payload: { kind: 'notes', payload: {} } })
  t.equal(refused.statusCode, 403)
  t.match(refused.json(), { error: { code: 'ERR_FORBIDDEN', message: /credentials cannot be read .* may not POST \/v1\/leader\/decisions: .*admin caller: root or the agent's uid \d+ \(api.adminGroup names no group\)/, details: { uid: null, needed: 'admin' } } })
  const owned = await strict.inject(offload)
  t.equal(owned.statusCode, 403)
  t.match(owned.json(), { error: { code: 'ERR_FORBIDDEN', details: { namespace: 'j/a', needed: 'owner' } } })
  t.same([decided, offloaded], [[], []], 'nothing reached the services')
  t.equal((await strict.inject({ url: '/healthz' })).statusCode, 200, 'read routes answer')

  const trusting = await buildApiApp({ bodyLimitBytes: 1 << 20, version: 't', trustUnidentifiedCallers: true }, components)
  t.teardown(() => trusting.close())
  t.equal((await trusting.inject({ method: 'POST', url: '/v1/leader/decisions', payload: { kind: 'notes', payload: {} } })).statusCode, 200)
  t.equal((await trusting.inject(offload)).statusCode, 200)
  t.same([decided, offloaded.length], [['notes'], 1])
})

t.test('api.adminGroup: "" is none, digits a gid, a name must be in the group file', async t => {
  const groups = join(tempDir(t), 'group')
  writeFileSync(groups, 'root:x:0:\ntrainers:x:4242:alice,bob\nodd:x:notanumber:\n')
  t.equal(await resolveAdminGroup('', groups), undefined)
  t.equal(await resolveAdminGroup('4243', groups), 4243)
  t.equal(await resolveAdminGroup('trainers', groups), 4242)
  await t.rejects(resolveAdminGroup('nope', groups), { code: 'ERR_CONFIG_INVALID', message: /api.adminGroup: there is no group "nope"/ })
  await t.rejects(resolveAdminGroup('odd', groups), { code: 'ERR_CONFIG_INVALID' })
  await t.rejects(buildApiApp({ bodyLimitBytes: 1024, version: 't', adminGroup: 'no-such-group-here' }, base), { code: 'ERR_CONFIG_INVALID' }, 'the API does not build with an unknown group')
})

t.test('namespace rules: owner, nobody, the agent, weights/, nested namespaces, admins', async t => {
  const owners = createNamespaceOwners()
  const keys: StateKey[] = []
  const store = (key: string, owner: number | undefined): void => {
    const k = parseKey(key)
    const release = owners.claim([k.namespace], owner)
    owners.stored(k.namespace)
    release()
    keys.push(k)
  }
  store('alice/actor/w:param@[0]/[4]:u8#v0', 1001)
  store('weights/m/w:param@[0]/[4]:u8#v0', undefined)
  store('old/x/w:param@[0]/[4]:u8#v0', undefined)
  const source = {
    namespaceOwner: (ns: string) => owners.ownerOf(ns),
    nestedNamespaceOwners: (ns: string) => owners.nested(ns),
    claimNamespaces: (ns: Iterable<string>, owner: number | undefined) => owners.claim(ns, owner),
    storedKeys: (prefix = '') => keys.filter(k => k.text.startsWith(prefix)),
  }
  const authorization: Authorization = {
    forbidden: (request, action, who, details) => Object.assign(new Error(`${request.caller?.uid} may not ${action}: ${who}`), { code: 'ERR_FORBIDDEN', details }) as never,
    admins: () => 'admins',
  }
  const guard = createNamespaceGuard(authorization, () => source)
  const as = (uid: number | null, admin = false): FastifyRequest => ({ caller: uid === null ? null : { uid, gid: uid, pid: 1 } satisfies PeerCredentials, admin }) as unknown as FastifyRequest
  const alice = as(1001)
  const bob = as(1002)

  t.doesNotThrow(() => guard.check(alice, ['alice/actor'], 'write', 'drop keys'), 'the owner writes')
  t.throws(() => guard.check(bob, ['alice/actor'], 'read', 'onload keys'), { code: 'ERR_FORBIDDEN', message: /belongs to uid 1001/ }, 'another uid does not even read')
  t.throws(() => guard.check(bob, ['old/x'], 'read', 'onload keys'), { message: /belongs to the agent itself/ }, "the agent's own keys: admins only")
  t.doesNotThrow(() => guard.check(bob, ['weights/m'], 'read', 'onload keys'), 'weights are read by anyone')
  t.throws(() => guard.check(bob, ['weights/m'], 'write', 'drop keys'), { message: /through \/v1\/weights/ })
  t.throws(() => guard.check(bob, ['weights/new'], 'write', 'offload keys'), { message: /through \/v1\/weights/ }, 'even a weights namespace nobody holds')
  t.doesNotThrow(() => guard.check(bob, ['bob/a'], 'write', 'offload keys'), 'a namespace nobody owns is free')
  t.throws(() => guard.check(bob, ['alice/actor/x'], 'write', 'offload keys'), { message: /alice\/actor, above it, belongs to uid 1001/ }, 'not below another uid\'s namespace')
  t.throws(() => guard.check(bob, ['alice'], 'write', 'offload keys'), { message: /alice\/actor, below it/ }, 'nor above it')
  t.doesNotThrow(() => guard.check(alice, ['alice/actor/x', 'alice'], 'write', 'offload keys'), 'the owner nests its own')
  t.throws(() => guard.check(as(null), ['bob/a'], 'read', 'onload keys'), { message: /uid is unknown/ }, 'an unidentified caller fails closed')
  t.doesNotThrow(() => guard.check(as(1002, true), ['alice/actor', 'old/x', 'weights/m'], 'write', 'drop keys'), 'an admin may do anything')
  t.doesNotThrow(() => guard.check(as(null, true), ['alice/actor'], 'write', 'drop keys'), 'a trusted unidentified caller is an admin')

  t.same(guard.ofPrefixes(['alice/']), ['alice/actor'])
  t.same(guard.ofPrefixes(['ali']), ['alice/actor'], 'a prefix shorter than the namespace reaches all of it')
  t.same(guard.ofPrefixes(['alice/actor/w:param']), ['alice/actor'], 'a prefix into a namespace reaches it')
  t.same(guard.ofPrefixes(['alice/actorx']), [], 'a namespace whose keys cannot match is not reached')
  t.same(guard.ofPrefixes(['']).sort(), ['alice/actor', 'old/x', 'weights/m'])
  t.same(guard.ofKeys(['alice/actor/w:param@[0]/[4]:u8#v9', 'not a key']), ['alice/actor'])

  const release = guard.claimForStore(bob, ['bob/b'], 'offload keys')
  t.equal(owners.ownerOf('bob/b'), 1002, 'a store claims the namespace for the caller')
  t.throws(() => guard.check(alice, ['bob/b'], 'write', 'offload keys'), { message: /belongs to uid 1002/ }, 'while the store runs')
  release()
  t.equal(owners.ownerOf('bob/b'), undefined, 'a claim that stored nothing lapses')
})

t.test('namespace owners: a claim lasts while keys do, a store without a claim is the agent\'s, recovery resolves disagreement to the agent', async t => {
  const owners = createNamespaceOwners()
  const release = owners.claim(['a', 'a'], 7)
  t.equal(owners.stored('a'), 7, 'keys are stored under the claimer')
  release()
  release()
  t.equal(owners.ownerOf('a'), 7, 'the key keeps the namespace owned')
  t.equal(owners.claim(['a'], 8)(), undefined)
  t.equal(owners.ownerOf('a'), 7, 'a later claim does not change the owner')
  owners.removed('a')
  t.equal(owners.ownerOf('a'), undefined, 'the last key gone, nobody owns it')
  t.equal(owners.stored('b'), undefined)
  t.equal(owners.ownerOf('b'), 'agent', 'a store without a claim: the agent')
  owners.recovered('c', 5)
  owners.recovered('c', 5)
  t.equal(owners.ownerOf('c'), 5)
  owners.recovered('d', 5)
  owners.recovered('d', undefined)
  t.equal(owners.ownerOf('d'), 'agent', 'records that disagree: the agent')
  t.same(owners.nested('c/x'), [{ namespace: 'c', owner: 5 }])
})
