// GET /metrics of real dev agents, scraped over TCP and read with a strict text-format parser: the values
// move with what the agents do (offload, spill, onload, device lock, weight transfer), the endpoint is off
// unless configured, a non-loopback address is refused at config load, and a port in use stops the start-up.
import t from 'tap'
import { readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { once } from 'node:events'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { agentMain, runNode, spawnAgent, tempDir, type AgentProcess } from '../../helpers/agent-process.ts'
import { generateClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { capabilities } from '../../../native/index.ts'
import { makeShm, patternBytes } from '../../native/helpers.ts'
import { tensor, writeSafetensors } from '../weights/weights-fixtures.ts'
import { parsePrometheusText, sampleValue, type ParsedFamily } from './prometheus-text.ts'

// Four agent start-ups (two of them refused early); generous for a loaded 2-core machine.
t.setTimeout(300_000)

const MiB = 2 ** 20
const key = (ns: string, name: string, bytes: number): string => `${ns}/${name}:param@[0]/[${bytes}]:u8#v1`
const fakeGpus = JSON.stringify([
  { model: 'Fake GPU', memoryBytes: 85_520_809_984, uuid: 'GPU-fake-0', pciBus: '00000000:17:00.0' },
  { model: 'Fake GPU', memoryBytes: 85_520_809_984, uuid: 'GPU-fake-1', pciBus: '00000000:65:00.0' },
])

interface Scrape { families: Map<string, ParsedFamily>, value(name: string, labels?: Record<string, string>): number | undefined }

async function scrape (address: string): Promise<Scrape> {
  const response = await fetch(`http://${address}/metrics`)
  if (response.status !== 200) throw new Error(`GET /metrics answered ${response.status}`)
  if (response.headers.get('content-type') !== 'text/plain; version=0.0.4; charset=utf-8') throw new Error(`content type ${response.headers.get('content-type')}`)
  const families = parsePrometheusText(await response.text())
  return { families, value: (name, labels = {}) => sampleValue(families, name, labels) }
}

async function until<T> (what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const began = Date.now()
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() - began > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`)
    await sleep(100)
  }
}

/** TCP ports the process listens on (its socket inodes matched against /proc/net/tcp{,6} rows in state LISTEN). */
function listeningPorts (pid: number): number[] {
  const inodes = new Set<string>()
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))
      if (m !== null) inodes.add(m[1]!)
    } catch { /* closed meanwhile */ }
  }
  const ports: number[] = []
  for (const table of ['tcp', 'tcp6']) {
    for (const row of readFileSync(`/proc/${pid}/net/${table}`, 'utf8').trim().split('\n').slice(1)) {
      const f = row.trim().split(/\s+/)
      if (f[3] === '0A' && inodes.has(f[9]!)) ports.push(parseInt(f[1]!.split(':')[1]!, 16))
    }
  }
  return ports.sort((a, b) => a - b)
}

const portOf = (address: string): number => Number(address.slice(address.lastIndexOf(':') + 1))

if (!capabilities.addon.loaded) {
  t.comment(`skipped: the StateManager and weights need the native addon (${capabilities.addon.error})`)
} else {
  const dir = tempDir(t, 'agentd-m-')
  const keyFile = join(dir, 'cluster.key')
  writeFileSync(keyFile, generateClusterKey(), { mode: 0o600 })
  const common = (state: string): string[] => ['--dev', '--state-dir', state, '--cluster-key', keyFile, '--set', 'weights.chunkBytes=262144']
  const aDir = tempDir(t)
  const bDir = tempDir(t)
  // A: metrics on (any free loopback port), two faked GPUs (device lock), a 16 MiB host pool (spills soon).
  const a: AgentProcess = await spawnAgent(t, {
    stateDir: aDir,
    args: [...common(aDir), '--set', 'metrics.listen=127.0.0.1:0', '--set', `inventory.gpus=${fakeGpus}`, '--set', 'inventory.gpuSampleIntervalMs=0', '--set', 'state.hostPoolBytes=16777216'],
  })
  // B: the defaults (metrics off); it serves and pulls weights with A.
  const b: AgentProcess = await spawnAgent(t, { stateDir: bDir, args: common(bDir) })
  const aStatus = await a.client.status() as Awaited<ReturnType<AgentProcess['client']['status']>> & { metrics?: { address: string } }
  const address = aStatus.metrics?.address ?? ''

  t.test('the bound address is in GET /v1/status and the log; only GET and HEAD /metrics answer', async t => {
    t.match(address, /^127\.0\.0\.1:\d+$/)
    t.not(portOf(address), 0, 'port 0 became a real port')
    t.match(a.output(), new RegExp(`"address":"${address.replaceAll('.', '\\.')}".*"msg":"metrics endpoint listening"`))
    t.match(aStatus.subsystems.find(s => s.id === 'metrics'), { state: 'ok' })
    t.ok(listeningPorts(a.proc.pid!).includes(portOf(address)), 'the agent process itself listens there')
    const head = await fetch(`http://${address}/metrics`, { method: 'HEAD' })
    t.equal(head.status, 200)
    t.equal(await head.text(), '')
    t.equal((await fetch(`http://${address}/v1/status`)).status, 404, 'the API is not reachable here')
    t.equal((await fetch(`http://${address}/`)).status, 404)
    const post = await fetch(`http://${address}/metrics`, { method: 'POST', body: 'x' })
    t.equal(post.status, 405)
    t.equal(post.headers.get('allow'), 'GET, HEAD')
  })

  t.test('every running subsystem shows; the leader series once this single agent leads', async t => {
    const m = await until('this agent leads', async () => { const s = await scrape(address); return s.value('agentd_leader_is_leader') === 1 ? s : undefined })
    t.ok(m.value('agentd_leader_epoch')! >= 1, 'an epoch')
    t.equal(m.value('agentd_leader_role', { role: 'leader' }), 1)
    t.equal(m.value('agentd_subsystem_state', { subsystem: 'metrics', state: 'ok' }), 1)
    t.equal(m.value('agentd_subsystem_state', { subsystem: 'state', state: 'ok' }), 1)
    t.equal(m.value('agentd_state_tier_capacity_bytes', { tier: 'host' }), 16 * MiB)
    t.equal(m.value('agentd_state_tier_capacity_bytes', { tier: 'nvme' }), 4096 * MiB)
    t.equal(m.value('agentd_gpu_memory_capacity_bytes', { gpu: '1' }), 85_520_809_984)
    t.equal(m.value('agentd_gpu_memory_free_bytes', { gpu: '0' }), undefined, 'not sampled (gpuSampleIntervalMs = 0): absent, not 0')
    t.equal(m.value('agentd_device_lock_held', { gpu: '0' }), 0)
    t.equal(m.value('agentd_mesh_peers', { state: 'alive' }), 0, 'alone in its mesh (B has its own voter set)')
    t.ok(m.value('agentd_mesh_messages_published_total')! >= 1, 'heartbeats published')
    for (const state of ['queued', 'running', 'completed']) t.equal(m.value('agentd_jobs', { state }), 0, `jobs ${state}`)
    t.equal(m.value('agentd_reward_requests', { state: 'pending' }), 0)
    t.equal(m.value('agentd_reward_cluster_requests', { state: 'queued' }), 0, 'the acting leader reports the cluster\'s reward queues')
    t.equal(m.value('agentd_weights_versions'), 0)
    t.ok(m.value('agentd_process_resident_memory_bytes')! > 10 * MiB)
    t.ok(m.value('agentd_uptime_seconds')! > 0)
    t.ok(m.value('agentd_event_loop_delay_seconds_count')! > 0)
    t.notOk(m.families.has('agentd_metrics_collect_errors_total'), 'no source failed')
  })

  t.test('an offload of N bytes through the API moves host bytes and the copy and dedup counters by exactly that', async t => {
    const before = await scrape(address)
    const data = patternBytes(4 * MiB, 3)
    const keys = [0, 1, 2, 3].map(i => key('job1/actor', `layer${i}`, MiB))
    for (const replica of [makeShm(t, data), makeShm(t, data)]) {
      await a.client.call('POST', '/v1/state/offload', { tensors: keys.map((k, i) => ({ key: k, source: { kind: 'shm', name: replica, offset: i * MiB } })) })
    }
    const after = await scrape(address)
    const grew = (name: string, labels?: Record<string, string>): number => after.value(name, labels)! - before.value(name, labels)!
    t.equal(grew('agentd_state_tier_used_bytes', { tier: 'host' }), 4 * MiB, 'host tier: 4 MiB, stored once')
    t.equal(grew('agentd_state_tier_used_bytes', { tier: 'nvme' }), 0)
    t.equal(grew('agentd_state_copies_total', { direction: 'offload' }), 4, 'four copies, by the first replica')
    t.equal(grew('agentd_state_deduplicated_total'), 4, 'the second replica copied nothing')
    t.equal(grew('agentd_state_stored_bytes'), 4 * MiB)
    t.equal(grew('agentd_state_logical_bytes'), 8 * MiB)
    t.equal(grew('agentd_state_keys', { tier: 'host' }), 4)
    t.equal(after.value('agentd_state_namespace_stored_bytes', { namespace: 'job1/actor' }), 4 * MiB)

    const target = makeShm(t, MiB)
    await a.client.call('POST', '/v1/state/onload', { tensors: [{ key: keys[1], target: { kind: 'shm', name: target, offset: 0 } }] })
    t.equal((await scrape(address)).value('agentd_state_copies_total', { direction: 'onload' })! - before.value('agentd_state_copies_total', { direction: 'onload' })!, 1)
  })

  t.test('filling the pool spills keys to NVMe; onloading a spilled key promotes it', async t => {
    const before = await scrape(address)
    const source = makeShm(t, patternBytes(12 * MiB, 4))
    await a.client.call('POST', '/v1/state/offload', { tensors: Array.from({ length: 12 }, (_, i) => ({ key: key('job2/actor', `w${i}`, MiB), source: { kind: 'shm', name: source, offset: i * MiB } })) })
    const spilled = await until('background spill', async () => { const s = await scrape(address); return s.value('agentd_state_spilled_total')! > before.value('agentd_state_spilled_total')! ? s : undefined })
    t.ok(spilled.value('agentd_state_tier_used_bytes', { tier: 'nvme' })! > 0, 'NVMe holds the spilled keys')
    t.ok(spilled.value('agentd_state_keys', { tier: 'nvme' })! > 0)
    const residency = await a.client.call<{ keys: Array<{ key: string, tier: string, bytes: number }> }>('GET', '/v1/state/residency')
    const cold = residency.keys.find(k => k.tier === 'nvme')!
    const target = makeShm(t, cold.bytes)
    await a.client.call('POST', '/v1/state/onload', { tensors: [{ key: cold.key, target: { kind: 'shm', name: target, offset: 0 } }] })
    const after = await scrape(address)
    t.ok(after.value('agentd_state_promoted_total')! > spilled.value('agentd_state_promoted_total')!, 'the cold key was promoted back to host')
  })

  t.test('device lock: a hold, a waiter that times out, the release', async t => {
    await a.client.acquireGpu(0, { holder: 'trainer' })
    await t.rejects(a.client.acquireGpu(0, { holder: 'rollout', timeoutMs: 200 }), { code: 'ERR_LOCK_TIMEOUT' })
    const held = await scrape(address)
    t.equal(held.value('agentd_device_lock_held', { gpu: '0' }), 1)
    t.equal(held.value('agentd_device_lock_grants_total', { gpu: '0' }), 1)
    t.equal(held.value('agentd_device_lock_waits_total', { gpu: '0' }), 1)
    t.equal(held.value('agentd_device_lock_timeouts_total', { gpu: '0' }), 1)
    t.equal(held.value('agentd_device_lock_held', { gpu: '1' }), 0)
    await a.client.releaseGpu(0, { holder: 'trainer' })
    const released = await scrape(address)
    t.equal(released.value('agentd_device_lock_held', { gpu: '0' }), 0)
    t.equal(released.value('agentd_device_lock_releases_total', { gpu: '0', reason: 'released' }), 1)
  })

  t.test('weights: bytes served to a puller and bytes pulled from a server, by the amounts transferred', async t => {
    const before = await scrape(address)
    const tensors = [tensor('model.layers.0.mlp.down_proj.weight', 'bf16', [64, 512], 1), tensor('model.norm.weight', 'f32', [64], 2)]
    const bytes = tensors.reduce((sum, x) => sum + x.data.length, 0)
    const fileA = join(dir, 'a.safetensors')
    writeSafetensors(fileA, tensors)
    await a.client.call('POST', '/v1/weights/publish', { model: 'served', source: { kind: 'safetensors', path: fileA } })
    const pulledByB = await b.client.call<{ bytesReceived: number }>('POST', '/v1/weights/pull', { from: (await a.client.status()).weights!.address, model: 'served', version: 0 })
    t.equal(pulledByB.bytesReceived, bytes)
    const served = await scrape(address)
    t.equal(served.value('agentd_weights_served_bytes_total')! - before.value('agentd_weights_served_bytes_total')!, bytes, 'A served every byte B received')
    t.ok(served.value('agentd_weights_connections_accepted_total')! > before.value('agentd_weights_connections_accepted_total')!)
    t.equal(served.value('agentd_weights_versions'), 1)

    const fileB = join(dir, 'b.safetensors')
    writeSafetensors(fileB, tensors.slice(0, 1))
    await b.client.call('POST', '/v1/weights/publish', { model: 'pulled', source: { kind: 'safetensors', path: fileB } })
    const pulledByA = await a.client.call<{ bytesReceived: number }>('POST', '/v1/weights/pull', { from: (await b.client.status()).weights!.address, model: 'pulled', version: 0 })
    const pulled = await scrape(address)
    t.equal(pulled.value('agentd_weights_pulled_bytes_total')! - before.value('agentd_weights_pulled_bytes_total')!, pulledByA.bytesReceived)
    t.equal(pulledByA.bytesReceived, tensors[0]!.data.length)
    t.equal(pulled.value('agentd_weights_pulls_total', { outcome: 'completed' })! - before.value('agentd_weights_pulls_total', { outcome: 'completed' })!, 1)
    t.equal(pulled.value('agentd_weights_active_pulls', { direction: 'pulling' }), 0)
    t.equal(pulled.value('agentd_weights_versions'), 2)
  })

  t.test('off by default: skipped with the reason, no address in the status, nothing more listening', async t => {
    const status = await b.client.status() as Awaited<ReturnType<AgentProcess['client']['status']>> & { metrics?: unknown }
    t.match(status.subsystems.find(s => s.id === 'metrics'), { state: 'skipped', reason: 'disabled by config (metrics.listen = "")' })
    t.equal(status.metrics, undefined)
    const meshPort = Number(/\/tcp\/(\d+)\//.exec(status.mesh!.addresses[0]!)![1])
    const weightsPort = portOf(status.weights!.address)
    t.same(listeningPorts(b.proc.pid!), [meshPort, weightsPort].sort((x, y) => x - y), 'the agent listens on the mesh and weights ports only')
    t.notMatch(b.output(), /metrics endpoint listening/)
  })

  t.test('a non-loopback address is refused at config load, with the reason and the way out', async t => {
    const state = tempDir(t)
    const refused = await runNode(agentMain, ['--dev', '--state-dir', state, '--set', 'metrics.listen=0.0.0.0:9464'])
    t.equal(refused.code, 78, 'EX_CONFIG')
    t.match(refused.stderr, /metrics\.listen "0\.0\.0\.0:9464" is not a loopback address: the metrics endpoint has no authentication/)
    t.match(refused.stderr, /set metrics\.allowRemote = true/)
  })

  t.test('a port in use stops the start-up with a clear error, before the heavy subsystems start', async t => {
    const blocker = createServer()
    blocker.listen(0, '127.0.0.1')
    await once(blocker, 'listening')
    t.teardown(() => blocker.close())
    const port = (blocker.address() as { port: number }).port
    const state = tempDir(t)
    const agent = await spawnAgent(t, { stateDir: state, waitReady: false, args: ['--dev', '--state-dir', state, '--set', `metrics.listen=127.0.0.1:${port}`] })
    const exit = await agent.exited
    t.equal(exit.code, 1, 'start-up failure')
    t.match(agent.output(), /"msg":"agentd failed to start"/)
    t.match(agent.output(), new RegExp(`metrics\\.listen \\\\"127\\.0\\.0\\.1:${port}\\\\": the address is already in use`))
    t.match(agent.output(), /"subsystem":"identity","startMs"/, 'the subsystems before it started')
    t.notMatch(agent.output(), /"subsystem":"(state|mesh)","startMs"/, 'neither the host pool nor the mesh was started')
  })
}
