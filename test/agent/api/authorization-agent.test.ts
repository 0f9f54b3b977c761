// Authorization by SO_PEERCRED against a real dev agent, called by processes of other uids (curl run
// with the uid and gid of the test's users; setpriv for a supplementary group). The socket is 0666
// here so that any uid can connect: what each may do is the agent's decision alone.
// Needs root (to run the callers as other uids); skipped otherwise.
import t, { type Test } from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { spawnAgent, tempDir, untilActing, type AgentProcess } from '../../helpers/agent-process.ts'
import { makeShm, patternBytes } from '../../native/helpers.ts'
import type { Residency } from '../../../agent/state/state-manager.ts'
import type { NamespaceOwnersBody } from '../../../agent/api/wire/state.ts'

interface Teardown { teardown(fn: () => unknown): void }
interface User { name: string, uid: number, gid: number, groups?: number[] }
interface Answer { status: number, body: { error?: { code: string, message: string, details?: Record<string, unknown> } } & Record<string, unknown> }

const adminGid = 4242
const alice: User = { name: 'alice', uid: 1001, gid: 1001 }
const bob: User = { name: 'bob', uid: 1002, gid: 1002 }
const nobody: User = { name: 'nobody', uid: 65534, gid: 65534 }
/** In api.adminGroup by its primary group, and by a supplementary group. */
const carol: User = { name: 'carol', uid: 1003, gid: adminGid }
const dave: User = { name: 'dave', uid: 1004, gid: 1004, groups: [adminGid] }

const fakeGpus = JSON.stringify([0, 1].map(i => ({ model: 'Fake GPU', memoryBytes: 85_520_809_984, uuid: `GPU-fake-${i}`, pciBus: `00000000:1${i}:00.0` })))
const lockClientMain = fileURLToPath(new URL('./locks-client-process.ts', import.meta.url))
const bytes = 4096
const key = (ns: string, name: string, version = 1): string => `${ns}/${name}:param@[0]/[${bytes}]:u8#v${version}`

if (process.getuid?.() !== 0) {
  t.plan(0, 'needs root: the callers run as other uids')
  process.exit(0)
}

async function startAgent (t: Teardown, stateDir?: string): Promise<AgentProcess> {
  const dir = stateDir ?? tempDir(t)
  chmodSync(dir, 0o755) // the callers' uids reach the socket in it
  return await spawnAgent(t, {
    stateDir: dir,
    args: ['--dev', '--state-dir', dir, '--set', 'api.socketMode=0666', '--set', `api.adminGroup=${adminGid}`, '--set', `inventory.gpus=${fakeGpus}`,
      '--set', 'locks.holderCheckIntervalMs=50', '--set', 'state.hostPoolBytes=16777216', '--set', 'state.nvmeCapacityBytes=67108864'],
  })
}

/** One request through the agent's socket by a process of `user` (curl). */
async function callAs (agent: AgentProcess, user: User, method: string, path: string, body?: unknown): Promise<Answer> {
  const curl = ['curl', '-q', '-s', '-S', '--unix-socket', agent.socketPath, '-X', method, '-w', '\n%{http_code}', `http://agent${path}`,
    ...(body !== undefined ? ['-H', 'content-type: application/json', '--data-binary', JSON.stringify(body)] : [])]
  const proc = user.groups !== undefined
    ? spawn('setpriv', ['--reuid', String(user.uid), '--regid', String(user.gid), '--groups', user.groups.join(','), ...curl], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(curl[0]!, curl.slice(1), { uid: user.uid, gid: user.gid, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  proc.stdout.on('data', (c: Buffer) => { out += c.toString() })
  proc.stderr.on('data', (c: Buffer) => { err += c.toString() })
  const [code] = await once(proc, 'exit') as [number | null]
  if (code !== 0) throw new Error(`curl as ${user.name} exited ${code}: ${err}`)
  const cut = out.lastIndexOf('\n')
  const text = out.slice(0, cut)
  return { status: Number(out.slice(cut + 1)), body: text === '' ? {} : JSON.parse(text) }
}

/** A 403 ERR_FORBIDDEN that names the refused uid, gid and pid (and says `message`). */
function forbidden (t: Test, answer: Answer, user: User, message?: RegExp): void {
  t.equal(answer.status, 403, `${user.name}: 403 ${answer.status === 403 ? '' : JSON.stringify(answer.body)}`)
  t.equal(answer.body.error?.code, 'ERR_FORBIDDEN')
  t.match(answer.body.error?.message, new RegExp(`^uid ${user.uid} \\(gid ${user.gid}, pid \\d+\\) may not `))
  if (message !== undefined) t.match(answer.body.error?.message, message)
  t.match(answer.body.error?.details, { uid: user.uid, gid: user.gid })
}

const residency = async (agent: AgentProcess): Promise<Residency> => await agent.client.call<Residency>('GET', '/v1/state/residency')
const storedKeys = async (agent: AgentProcess): Promise<string[]> => (await residency(agent)).keys.map(k => k.key)
const owners = async (agent: AgentProcess): Promise<NamespaceOwnersBody> => await agent.client.call<NamespaceOwnersBody>('GET', '/v1/state/owners')

t.test('as other uids: read routes for all, admin routes for admins only, namespaces for their owners, holders and workers for their creators', async t => {
  const agent = await startAgent(t)
  await untilActing(agent)

  t.test('read routes answer every uid', async t => {
    for (const user of [nobody, bob]) {
      for (const path of ['/healthz', '/v1/status', '/v1/node', '/v1/state/residency', '/v1/state/owners', '/v1/locks', '/v1/leader', '/v1/jobs', '/v1/weights', '/v1/openapi.json']) {
        t.equal((await callAs(agent, user, 'GET', path)).status, 200, `${user.name} GET ${path}`)
      }
    }
  })

  t.test('admin routes: refused to other uids before anything changes; root and api.adminGroup members (primary or supplementary) pass', async t => {
    const decisions = async (): Promise<number> => (await agent.client.call<{ entries: unknown[] }>('GET', '/v1/leader/decisions')).entries.length
    const before = await decisions()
    for (const user of [nobody, bob]) {
      forbidden(t, await callAs(agent, user, 'POST', '/v1/leader/decisions', { kind: 'notes', payload: { by: user.name } }), user, /needs an admin caller: root, the agent's uid 0, or a member of group 4242 \(api.adminGroup\)/)
      forbidden(t, await callAs(agent, user, 'POST', '/v1/jobs', { id: 'evil', nodes: 1, gpusPerNode: 1, periodS: 60, iterations: 1, segments: [{ offsetS: 0, durationS: 1 }], maxSlowdown: 2 }), user)
      forbidden(t, await callAs(agent, user, 'POST', '/v1/reward/work/fetch', { workerId: 'x/y/0', waitMs: 0 }), user)
    }
    t.equal(await decisions(), before, 'no decision was published by a refused call')
    t.same((await agent.client.jobs()).jobs, [], 'no job was submitted by a refused call')
    t.equal((await callAs(agent, carol, 'POST', '/v1/leader/decisions', { kind: 'notes', payload: { by: 'carol' } })).status, 200, 'primary group 4242')
    t.equal((await callAs(agent, dave, 'POST', '/v1/leader/decisions', { kind: 'notes', payload: { by: 'dave' } })).status, 200, 'supplementary group 4242')
    t.equal(await decisions(), before + 2)
  })

  t.test('state keys: only the uid that stored a namespace\'s first key (or an admin) uses it', async t => {
    const data = patternBytes(bytes, 7)
    const source = makeShm(t, data)
    const ka = key('alice/actor', 'w')
    const stored = await callAs(agent, alice, 'POST', '/v1/state/offload', { tensors: [{ key: ka, source: { kind: 'shm', name: source, offset: 0 } }] })
    t.equal(stored.status, 200, JSON.stringify(stored.body))

    const target = makeShm(t, bytes)
    const other = makeShm(t, patternBytes(bytes, 9))
    const refused = [
      ['POST', '/v1/state/drop', { keys: [ka] }],
      ['POST', '/v1/state/drop', { prefix: 'alice/' }],
      ['POST', '/v1/state/drop', { prefix: '' }],
      ['POST', '/v1/state/onload', { tensors: [{ key: ka, target: { kind: 'shm', name: target, offset: 0 } }] }],
      ['POST', '/v1/state/offload', { tensors: [{ key: ka, source: { kind: 'shm', name: other, offset: 0 } }] }],
      ['POST', '/v1/state/offload', { tensors: [{ key: key('alice/actor', 'w2'), source: { kind: 'shm', name: other, offset: 0 } }] }],
      ['POST', '/v1/state/offload', { tensors: [{ key: key('alice/actor/sub', 'w'), source: { kind: 'shm', name: other, offset: 0 } }] }],
      ['POST', '/v1/state/offload', { tensors: [{ key: key('weights/m', 'w'), source: { kind: 'shm', name: other, offset: 0 } }] }],
      ['POST', '/v1/state/prefetch', { prefix: 'alice/actor/' }],
      ['POST', '/v1/state/hints', { next: [{ prefix: 'alice/', inMs: 0 }] }],
      ['POST', '/v1/state/materialize', { prefix: 'alice/actor/', version: 1, path: `${agent.stateDir}/files/out.safetensors` }],
      ['POST', '/v1/weights/publish', { model: 'stolen', source: { kind: 'keys', prefix: 'alice/actor/' } }],
    ] as const
    for (const [method, path, body] of refused) forbidden(t, await callAs(agent, bob, method, path, body), bob, /alice\/actor|weights\/m/)
    t.same(await storedKeys(agent), [ka], 'the key is still there, and nothing else was stored')
    t.match((await residency(agent)).keys, [{ key: ka, replicas: 1 }], 'not even counted as a replica')
    t.ok(readFileSync(`/dev/shm/${target}`).equals(Buffer.alloc(bytes)), 'the refused onload wrote nothing')
    t.same((await agent.client.call<{ versions: unknown[] }>('GET', '/v1/weights')).versions, [], 'nothing published')

    const handedOut = await callAs(agent, alice, 'POST', '/v1/weights/regions', { model: 'am', tensors: [{ name: 'w', dtype: 'u8', shape: [16] }] })
    t.equal(handedOut.status, 200, JSON.stringify(handedOut.body))
    const region = handedOut.body.region as string
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/weights/publish', { model: 'am', source: { kind: 'region', region } }), bob, /handed out to uid 1001/)
    forbidden(t, await callAs(agent, bob, 'DELETE', `/v1/weights/regions/${region}`), bob)
    t.ok(existsSync(`/dev/shm/${region}`), 'the region is still handed out')
    t.equal((await callAs(agent, alice, 'DELETE', `/v1/weights/regions/${region}`)).status, 200, 'its uid gives it back')

    const onload = async (user: User): Promise<boolean> => {
      const out = makeShm(t, bytes)
      const answer = await callAs(agent, user, 'POST', '/v1/state/onload', { tensors: [{ key: ka, target: { kind: 'shm', name: out, offset: 0 } }] })
      t.equal(answer.status, 200, `${user.name} onloads: ${JSON.stringify(answer.body)}`)
      return readFileSync(`/dev/shm/${out}`).equals(data)
    }
    t.ok(await onload(alice), 'the owner reads its bytes')
    t.ok(await onload(carol), 'an admin-group member too')
    t.ok((await agent.client.call<{ results: unknown[] }>('POST', '/v1/state/onload', { tensors: [{ key: ka, target: { kind: 'shm', name: makeShm(t, bytes), offset: 0 } }] })).results.length === 1, 'and root')
    t.equal((await callAs(agent, bob, 'POST', '/v1/state/offload', { tensors: [{ key: key('bob/a', 'w'), source: { kind: 'shm', name: other, offset: 0 } }] })).status, 200, 'bob stores in a namespace of his own')
    t.equal((await callAs(agent, alice, 'POST', '/v1/state/drop', { prefix: 'alice/' })).status, 200, 'the owner drops')
    t.equal((await callAs(agent, bob, 'POST', '/v1/state/offload', { tensors: [{ key: ka, source: { kind: 'shm', name: other, offset: 0 } }] })).status, 200, 'an emptied namespace is free again')
    forbidden(t, await callAs(agent, alice, 'POST', '/v1/state/onload', { tensors: [{ key: ka, target: { kind: 'shm', name: target, offset: 0 } }] }), alice, /namespace alice\/actor: the namespace belongs to uid 1002/)
    await agent.client.call('POST', '/v1/state/drop', { prefix: '' })
  })

  t.test('models: only the uid that first published a model (or an admin) publishes, hands out regions for or retires its versions', async t => {
    const offloadAs = async (user: User, k: string): Promise<void> => {
      const answer = await callAs(agent, user, 'POST', '/v1/state/offload', { tensors: [{ key: k, source: { kind: 'shm', name: makeShm(t, patternBytes(bytes, user.uid)), offset: 0 } }] })
      t.equal(answer.status, 200, `${user.name} offloads ${k}: ${JSON.stringify(answer.body)}`)
    }
    await offloadAs(alice, key('alice/pub', 'w'))
    await offloadAs(bob, key('bob/pub', 'w'))
    const publish = async (user: User, model: string, prefix: string): Promise<Answer> => await callAs(agent, user, 'POST', '/v1/weights/publish', { model, source: { kind: 'keys', prefix } })
    const versions = async (): Promise<Array<{ model: string, version: number, owner: number | 'agent' }>> => (await agent.client.call<{ versions: Array<{ model: string, version: number, owner: number | 'agent' }> }>('GET', '/v1/weights')).versions

    t.equal((await publish(alice, 'am', 'alice/pub/')).status, 200, 'alice publishes a model nobody owns (her region for it was discarded above) and owns it')
    t.match(await versions(), [{ model: 'am', version: 0, owner: alice.uid }])
    forbidden(t, await publish(bob, 'am', 'bob/pub/'), bob, /may not publish a version of model am: the model belongs to uid 1001, the uid that first published it/)
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/weights/regions', { model: 'am', tensors: [{ name: 'w', dtype: 'u8', shape: [16] }] }), bob, /may not hand out a region to publish model am/)
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/weights/retire', { model: 'am', version: 0 }), bob, /may not retire a version of model am/)
    t.match(await versions(), [{ model: 'am', version: 0 }], 'bob changed nothing')
    t.equal((await versions()).length, 1)

    t.equal((await callAs(agent, bob, 'POST', '/v1/weights/publish', { model: 'ghost', source: { kind: 'keys', prefix: 'bob/none/' } })).status, 404, 'a publish that fails ...')
    t.equal((await publish(alice, 'ghost', 'alice/pub/')).status, 200, '... leaves the model nobody\'s: alice claims it')
    t.equal((await publish(bob, 'bm', 'bob/pub/')).status, 200, 'bob publishes a model of his own')
    t.equal((await publish(alice, 'am', 'alice/pub/')).status, 200, 'the owner publishes v1')
    t.equal((await callAs(agent, carol, 'POST', '/v1/weights/publish', { model: 'am', version: 5, source: { kind: 'keys', prefix: 'alice/pub/' } })).status, 200, 'an admin publishes into it')
    t.equal((await callAs(agent, alice, 'POST', '/v1/weights/retire', { model: 'am', version: 1 })).status, 200, 'the owner retires a version')
    t.equal((await callAs(agent, bob, 'POST', '/v1/weights/retire', { model: 'bm', version: 0 })).status, 200, 'bob retires his')
    t.match(await versions(), [{ model: 'am', version: 5, owner: alice.uid }, { model: 'ghost', version: 0, owner: alice.uid }], 'an admin\'s publish does not change the owner')
    forbidden(t, await publish(alice, 'bm', 'alice/pub/'), alice, /the model belongs to uid 1002/)
    t.same((await owners(agent)).namespaces, [{ namespace: 'alice/pub', owner: alice.uid }, { namespace: 'bob/pub', owner: bob.uid }], 'GET /v1/state/owners shows each namespace\'s owner')
    for (const [model, version] of [['am', 5], ['ghost', 0]] as const) await agent.client.call('POST', '/v1/weights/retire', { model, version })
    await agent.client.call('POST', '/v1/state/drop', { prefix: '' })
  })

  t.test('device-lock holders: a holder name belongs to the uid that created it while it holds or waits', async t => {
    const holder = spawn(process.execPath, [lockClientMain, agent.socketPath, '0', 'grp-a'], { uid: alice.uid, gid: alice.gid, stdio: ['ignore', 'pipe', 'inherit'] }) as ChildProcess & { stdout: NodeJS.ReadableStream }
    t.teardown(() => { holder.kill('SIGKILL') })
    const [line] = await once(holder.stdout, 'data') as [Buffer]
    t.match(JSON.parse(line.toString()), { gpu: 0, holder: 'grp-a', depth: 1 })
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/locks/gpu/0/release', { holder: 'grp-a' }), bob, /created by uid 1001/)
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/locks/gpu/0/acquire', { holder: 'grp-a', timeoutMs: 0 }), bob)
    t.match((await agent.client.call<{ gpus: unknown[] }>('GET', '/v1/locks')).gpus, [{ gpu: 0, holder: 'grp-a', depth: 1, waiters: [] }], 'still held once, nobody queued')
    t.match((await callAs(agent, alice, 'POST', '/v1/locks/gpu/0/acquire', { holder: 'grp-a', timeoutMs: 0 })), { status: 200, body: { holder: 'grp-a', depth: 2 } }, 'another process of the same uid shares it')
    holder.kill('SIGKILL')
    for (let deadline = Date.now() + 5000; (await agent.client.call<{ gpus: Array<{ holder: string | null }> }>('GET', '/v1/locks')).gpus[0]!.holder !== null;) {
      if (Date.now() > deadline) throw new Error('the hold did not end with its processes')
      await new Promise(resolve => setTimeout(resolve, 50))
    }
    t.match(await callAs(agent, bob, 'POST', '/v1/locks/gpu/0/acquire', { holder: 'grp-a', timeoutMs: 0 }), { status: 200, body: { holder: 'grp-a' } }, 'a holder name that holds nothing is free again')
  })

  t.test('workers: registration claims the job\'s namespaces; the worker is its registrant\'s', async t => {
    await agent.client.submitJob({ id: 'ja', nodes: 1, gpusPerNode: 2, periodS: 60, iterations: 100, segments: [{ offsetS: 0, durationS: 10 }], maxSlowdown: 2 })
    const shm = makeShm(t, patternBytes(16, 3))
    const registration = { job: 'ja', rank: 0, gpu: 0, ops: ['f'], tensors: [{ name: 'w', key: 'ja/r0/w:param@[0]/[4]:f32#v0', memory: { kind: 'shm', name: shm, offset: 0 } }] }
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/jobs/ja/ops', { name: 'f' }), bob)
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/jobs/ja/complete'), bob)
    const registered = await callAs(agent, alice, 'POST', '/v1/workers', registration)
    t.equal(registered.status, 200, JSON.stringify(registered.body))
    const id = registered.body.workerId as string
    forbidden(t, await callAs(agent, bob, 'GET', `/v1/workers/${id}/events`), bob, /registered by uid 1001/)
    forbidden(t, await callAs(agent, bob, 'POST', `/v1/workers/${id}/replies`, { requestId: 'r', ok: true }), bob)
    forbidden(t, await callAs(agent, bob, 'DELETE', `/v1/workers/${id}`), bob)
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/workers', registration), bob, /in namespace ja\/r0: the namespace belongs to uid 1001/)
    const rank1 = { ...registration, rank: 1, gpu: 1, tensors: [{ ...registration.tensors[0]!, key: 'ja/r1/w:param@[0]/[4]:f32#v0' }] }
    forbidden(t, await callAs(agent, bob, 'POST', '/v1/workers', rank1), bob, /namespace ja\/r0, below it, belongs to uid 1001/)
    t.match((await agent.client.call<{ workers: unknown[] }>('GET', '/v1/workers')).workers, [{ workerId: id, attached: false }], 'the worker is untouched, no other registered')
    t.same((await residency(agent)).namespaces.map(n => n.namespace), ['ja/r0'], 'nothing stored for bob')
    t.match((await agent.client.jobs()).jobs, [{ id: 'ja', state: 'RUNNING' }], 'the job still runs')
    t.equal((await callAs(agent, alice, 'DELETE', `/v1/workers/${id}`)).status, 200, 'its registrant deregisters it')
  })
})

t.test('ownership survives a restart: namespaces with the durable keys, models with the version store', async t => {
  const dir = tempDir(t)
  const first = await startAgent(t, dir)
  const ka = key('alice/opt', 's', 3)
  const data = patternBytes(bytes, 21)
  const stored = await callAs(first, alice, 'POST', '/v1/state/offload', { tensors: [{ key: ka, source: { kind: 'shm', name: makeShm(t, data), offset: 0 } }], durability: 'nvme' })
  t.equal(stored.status, 200, JSON.stringify(stored.body))
  const published = await callAs(first, alice, 'POST', '/v1/weights/publish', { model: 'am', source: { kind: 'keys', prefix: 'alice/opt/' } })
  t.equal(published.status, 200, JSON.stringify(published.body))
  first.proc.kill('SIGKILL')
  await first.exited
  const second = await startAgent(t, dir)
  forbidden(t, await callAs(second, bob, 'POST', '/v1/state/drop', { keys: [ka] }), bob, /namespace alice\/opt: the namespace belongs to uid 1001/)
  t.same(await storedKeys(second), [ka])
  await callAs(second, bob, 'POST', '/v1/state/offload', { tensors: [{ key: key('bob/opt', 's'), source: { kind: 'shm', name: makeShm(t, patternBytes(bytes, 22)), offset: 0 } }] })
  forbidden(t, await callAs(second, bob, 'POST', '/v1/weights/publish', { model: 'am', source: { kind: 'keys', prefix: 'bob/opt/' } }), bob, /model am: the model belongs to uid 1001/)
  forbidden(t, await callAs(second, bob, 'POST', '/v1/weights/retire', { model: 'am', version: 0 }), bob, /model am: the model belongs to uid 1001/)
  t.match((await second.client.call<{ versions: unknown[] }>('GET', '/v1/weights')).versions, [{ model: 'am', version: 0, owner: alice.uid }])
  t.same((await owners(second)).namespaces, [{ namespace: 'alice/opt', owner: alice.uid }, { namespace: 'bob/opt', owner: bob.uid }])
  const out = makeShm(t, bytes)
  t.equal((await callAs(second, alice, 'POST', '/v1/state/onload', { tensors: [{ key: ka, target: { kind: 'shm', name: out, offset: 0 } }] })).status, 200)
  t.ok(readFileSync(`/dev/shm/${out}`).equals(data))
})

t.test('an api.adminGroup that names no group stops the agent at start', async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, waitReady: false, args: ['--dev', '--state-dir', dir, '--set', 'api.adminGroup=no-such-group-4242'] })
  const exit = await agent.exited
  t.not(exit.code, 0)
  t.match(agent.output(), /api.adminGroup: there is no group \\?"no-such-group-4242\\?" in \/etc\/group/)
})
