// The StateManager through the real API of a dev agent: offload/onload, dedup, residency, restart, kill -9.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { agentctlMain, runNode, spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { makeShm, patternBytes } from '../../native/helpers.ts'
import type { Residency } from '../../../agent/state/state-manager.ts'
import type { ResidencyBody } from '../../../agent/api/wire/state.ts'

const MiB = 2 ** 20
const key = (ns: string, name: string, bytes: number): string => `${ns}/${name}:param@[0]/[${bytes}]:u8#v1`
const small = ['--set', 'state.hostPoolBytes=16777216', '--set', 'state.nvmeCapacityBytes=268435456']

t.test('offload, onload and residency over the socket; agentctl inspect residency shows it', async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, ...small] })
  const data = patternBytes(4 * MiB, 11)
  const replicas = [makeShm(t, data), makeShm(t, data), makeShm(t, data), makeShm(t, data)]
  const keys = [0, 1, 2, 3].map(i => key('job1/actor', `layer${i}`, MiB))
  const answers = await Promise.all(replicas.map(name => agent.client.call<{ results: Array<{ deduplicated: boolean }> }>('POST', '/v1/state/offload', {
    tensors: keys.map((k, i) => ({ key: k, source: { kind: 'shm', name, offset: i * MiB } })),
  })))
  t.equal(answers.flatMap(a => a.results).filter(r => !r.deduplicated).length, 4, 'each key copied once')
  const residency = await agent.client.call<Residency>('GET', '/v1/state/residency?prefix=job1/')
  t.match(residency, { storedBytes: 4 * MiB, logicalBytes: 16 * MiB, counters: { offloadCopies: 4, deduplicated: 12 }, namespaces: [{ namespace: 'job1/actor', keys: 4 }] })
  t.same(await agent.client.call('GET', '/v1/state/owners?prefix=job1/'), { namespaces: [{ namespace: 'job1/actor', owner: process.getuid!() }] }, 'the namespace is the uid\'s that stored its first key')

  const target = makeShm(t, MiB)
  const onload = await agent.client.call<{ results: unknown[] }>('POST', '/v1/state/onload', { tensors: [{ key: keys[2], target: { kind: 'shm', name: target, offset: 0 } }] })
  t.same(onload.results, [{ key: keys[2], fromTier: 'host' }])
  t.ok(readFileSync(`/dev/shm/${target}`).equals(data.subarray(2 * MiB, 3 * MiB)))

  const human = await runNode(agentctlMain, ['--socket', agent.socketPath, 'inspect', 'residency'])
  t.equal(human.code, 0, human.stderr)
  t.match(human.stdout, /TIER\s+USED\s+CAPACITY/)
  t.match(human.stdout, /dedup ratio 4\.00/)
  t.match(human.stdout, /NAMESPACE\s+KEYS\s+LOGICAL\s+STORED\s+QUOTA\s+OWNER\n/)
  t.match(human.stdout, new RegExp(`job1/actor\\s+4\\s+16\\.0 MiB\\s+4\\.0 MiB\\s+-\\s+${process.getuid!()}\\n`), 'and agentctl shows it')
  const json = JSON.parse((await runNode(agentctlMain, ['--socket', agent.socketPath, 'inspect', 'residency', '--tier', 'nvme', '--json'])).stdout)
  t.same(json.keys, [], '--tier filters the key list')
  t.equal((await runNode(agentctlMain, ['--socket', agent.socketPath, 'inspect', 'residency', '--tier', 'gpu'])).code, 2)

  // Pages in key order, filters and the summary alone.
  const sorted = [...keys].sort()
  const page = await agent.client.call<ResidencyBody>('GET', '/v1/state/residency?prefix=job1/&limit=3')
  t.same(page.keys!.map(k => k.key), sorted.slice(0, 3), 'the first page')
  const rest = await agent.client.call<ResidencyBody>('GET', `/v1/state/residency?prefix=job1/&limit=3&cursor=${encodeURIComponent(page.nextCursor!)}`)
  t.same([rest.keys!.map(k => k.key), rest.nextCursor], [sorted.slice(3), null], 'the page after the cursor ends the walk')
  const summary = await agent.client.call<ResidencyBody>('GET', '/v1/state/residency?job=job1&summary=true')
  t.notOk('keys' in summary || 'nextCursor' in summary, 'summary=true: no keys')
  t.match(summary, { keyCounts: { host: 4, nvme: 0 }, dedupRatio: 4, storedBytes: 4 * MiB, namespaces: [{ namespace: 'job1/actor', keys: 4 }] })
  t.match(await agent.client.call('GET', '/v1/state/residency?namespace=job1/actor&tier=nvme'), { keys: [], nextCursor: null, keyCounts: { host: 0, nvme: 0 }, namespaces: [] })
  const cli = (...args: string[]) => runNode(agentctlMain, ['--socket', agent.socketPath, 'inspect', 'residency', ...args])
  const first = await cli('--limit', '2')
  const next = /2 key\(s\) shown of 4; the next page: --cursor (\S+); every key: --all/.exec(first.stdout)
  t.ok(next !== null, `agentctl says how to go on: ${first.stdout}`)
  const second = await cli('--limit', '2', '--cursor', next![1]!)
  t.ok(sorted.slice(2).every(k => second.stdout.includes(k)) && !second.stdout.includes(sorted[0]!) && !second.stdout.includes('next page'), 'and --cursor goes on')
  t.same(JSON.parse((await cli('--all', '--json')).stdout).keys.map((k: { key: string }) => k.key), sorted, '--all --json: every key')
  for (const bad of [['--limit', '0'], ['--limit', '2001'], ['--limit', 'x'], ['--all', '--limit', '1'], ['--all', '--cursor', 'c'], ['--watch', '--all'], ['--watch', '--cursor', 'c']]) t.equal((await cli(...bad)).code, 2, bad.join(' '))
})

t.test('bad requests: schema errors are 400 with a code, state errors keep their codes', async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, ...small] })
  const shm = makeShm(t, MiB)
  await t.rejects(agent.client.call('POST', '/v1/state/offload', { tensors: [] }), { code: 'ERR_BAD_REQUEST' })
  await t.rejects(agent.client.call('POST', '/v1/state/offload', { tensors: [{ key: 'k', source: { kind: 'tcp', name: 'x', offset: 0 } }] }), { code: 'ERR_BAD_REQUEST' })
  await t.rejects(agent.client.call('POST', '/v1/state/offload', { tensors: [{ key: key('j/a', 'w', MiB), source: { kind: 'shm', name: shm, offset: -1 } }] }), { code: 'ERR_BAD_REQUEST' })
  await t.rejects(agent.client.call('POST', '/v1/state/offload', { tensors: [{ key: 'j/a:param', source: { kind: 'shm', name: shm, offset: 0 } }] }), { code: 'ERR_KEY_INVALID' })
  await t.rejects(agent.client.call('POST', '/v1/state/offload', { tensors: [{ key: key('j/a', 'w', MiB), source: { kind: 'shm', name: 'no-such-object', offset: 0 } }] }), { code: 'ERR_SOURCE_NOT_FOUND' })
  await t.rejects(agent.client.call('POST', '/v1/state/offload', { tensors: [{ key: key('j/a', 'w', 2 * MiB), source: { kind: 'shm', name: shm, offset: 0 } }] }), { code: 'ERR_SIZE_MISMATCH' })
  await t.rejects(agent.client.call('POST', '/v1/state/onload', { tensors: [{ key: key('j/a', 'w', MiB), target: { kind: 'shm', name: shm, offset: 0 } }] }), { code: 'ERR_KEY_NOT_FOUND' })
  const residency = await agent.client.call<Residency>('GET', '/v1/state/residency')
  t.equal(residency.keys.length, 0, 'no partial state')
  const queries = ['tier=gpu', 'limit=0', 'limit=2001', 'limit=1.5', 'limit=x', `cursor=${encodeURIComponent('%%%')}`, 'cursor=abc', 'namespace=a//b', 'job=', 'job=j/',
    'all=true', 'summary=true&limit=5', 'summary=true&cursor=abc', 'summary=maybe']
  for (const query of queries) await t.rejects(agent.client.call('GET', `/v1/state/residency?${query}`), { code: 'ERR_BAD_REQUEST' }, query)
})

t.test('a restart finds the NVMe keys; kill -9 during durable writes never leaves a key that reads back wrong', async t => {
  const dir = tempDir(t)
  const args = ['--dev', '--state-dir', dir, ...small]
  const first = await spawnAgent(t, { stateDir: dir, args })
  const n = 40
  const sources = Array.from({ length: n }, (_, i) => makeShm(t, patternBytes(MiB, 500 + i)))
  const keys = sources.map((_, i) => key('job9/opt', `s${i}`, MiB))
  // Durable offloads in flight when the agent is killed.
  const writes = keys.map((k, i) => first.client.call('POST', '/v1/state/offload', { tensors: [{ key: k, source: { kind: 'shm', name: sources[i], offset: 0 } }], durability: 'nvme' }).then(() => true, () => false))
  const done = await Promise.race([Promise.all(writes.slice(0, 10)), new Promise(resolve => setTimeout(resolve, 5000))])
  t.ok(done, 'some writes completed before the kill')
  first.proc.kill('SIGKILL')
  await first.exited
  const acknowledged = (await Promise.all(writes)).map((ok, i) => ok ? keys[i]! : undefined).filter(k => k !== undefined)

  const second = await spawnAgent(t, { stateDir: dir, args })
  const residency = await second.client.call<Residency>('GET', '/v1/state/residency')
  const recovered = new Set(residency.keys.map(k => k.key))
  t.ok(acknowledged.every(k => recovered.has(k)), `every acknowledged durable key survived (${acknowledged.length} acknowledged, ${recovered.size} recovered)`)
  t.ok(residency.keys.every(k => k.durable && k.tier === 'nvme'))
  for (const k of recovered) {
    const i = keys.indexOf(k)
    const target = makeShm(t, MiB)
    await second.client.call('POST', '/v1/state/onload', { tensors: [{ key: k, target: { kind: 'shm', name: target, offset: 0 } }] })
    if (!readFileSync(`/dev/shm/${target}`).equals(patternBytes(MiB, 500 + i))) t.fail(`${k} reads back wrong`)
  }
  t.pass(`all ${recovered.size} recovered keys read back byte-exact`)
})
