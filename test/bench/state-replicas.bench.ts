/**
 * The StateManager acceptance scenario at full size, on a real dev agent:
 * four data-parallel "replicas" offload the same 1 GiB namespace (64 tensors
 * of 16 MiB) at once into a 512 MiB host pool, so half of it must spill to
 * NVMe; every tensor is restored and compared byte for byte; the agent is
 * restarted and must still serve the keys that were on NVMe; and
 * `agentctl inspect residency` shows the result. Prints timings.
 *
 *   npm run build && node_modules/.bin/node test/bench/state-replicas.bench.ts [--dir /var/tmp]
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { builtAgentMain, builtAgentctl } from '../helpers/agent-process.ts'
import { createAgentClient, type AgentClient } from '../../agent/client/client.ts'
import type { OffloadResult, Residency } from '../../agent/state/state-manager.ts'
import { MiB } from './bench-stats.ts'

const { values } = parseArgs({ options: { dir: { type: 'string', default: '/var/tmp' } } })
const nvmeDir = mkdtempSync(join(values.dir, 'agentd-replicas-'))
const stateDir = mkdtempSync('/tmp/agentd-rp-')
const tensorBytes = 16 * MiB
const tensors = 64
const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex')

// One 1 GiB shared-memory object per replica, identical content (a different pattern per tensor).
const content = Buffer.alloc(tensors * tensorBytes)
for (let i = 0; i < tensors; i++) content.fill(i * 37 % 251 + 1, i * tensorBytes, (i + 1) * tensorBytes)
for (let i = 0; i < tensors; i++) content.writeUInt32LE(0xabcd0000 + i, i * tensorBytes + 12345)
const expected = Array.from({ length: tensors }, (_, i) => sha(content.subarray(i * tensorBytes, (i + 1) * tensorBytes)))
const replicas = [0, 1, 2, 3].map(r => { const name = `agentd-replica-${process.pid}-${r}`; writeFileSync(`/dev/shm/${name}`, content); return name })
const target = `agentd-replica-${process.pid}-target`
writeFileSync(`/dev/shm/${target}`, Buffer.alloc(tensorBytes))
// Gigabytes of shared memory and a state dir: removed however the script ends.
process.once('exit', () => {
  for (const name of [...replicas, target]) rmSync(`/dev/shm/${name}`, { force: true })
  rmSync(nvmeDir, { recursive: true, force: true })
  rmSync(stateDir, { recursive: true, force: true })
})
const key = (i: number): string => `job42/actor/model.layers.${i}.mlp.up_proj.weight:param@[0,0]/[4096,2048]:bf16#v17`

async function start (): Promise<{ proc: ChildProcess, client: AgentClient }> {
  const proc = spawn(process.execPath, [builtAgentMain, '--dev', '--state-dir', stateDir, '--log-level', 'warn',
    '--set', `state.hostPoolBytes=${512 * MiB}`, '--set', `state.nvmeDir=${nvmeDir}`, '--set', `state.nvmeCapacityBytes=${4096 * MiB}`, '--set', 'mesh.enabled=false'],
  { stdio: ['ignore', 'ignore', 'inherit'] })
  const client = createAgentClient({ socketPath: join(stateDir, 'agentd.sock'), timeoutMs: 600_000 })
  for (;;) { try { await client.health(); return { proc, client } } catch { await sleep(20) } }
}

let { proc, client } = await start()
let began = performance.now()
const answers = await Promise.all(replicas.map(name => client.call<{ results: OffloadResult[] }>('POST', '/v1/state/offload', {
  tensors: Array.from({ length: tensors }, (_, i) => ({ key: key(i), source: { kind: 'shm', name, offset: i * tensorBytes } })),
})))
const offloadS = (performance.now() - began) / 1000
const copies = answers.flatMap(a => a.results).filter(r => !r.deduplicated).length
let residency = await client.call<Residency>('GET', '/v1/state/residency')
console.log(`4 replicas x 1 GiB offloaded in ${offloadS.toFixed(2)} s: ${copies} copies for ${tensors} keys, stored ${residency.storedBytes / MiB} MiB, ` +
  `logical ${residency.logicalBytes / MiB} MiB (dedup ratio ${(residency.logicalBytes / residency.storedBytes).toFixed(2)}), ` +
  `host ${residency.keys.filter(k => k.tier === 'host').length} keys / NVMe ${residency.keys.filter(k => k.tier === 'nvme').length} keys`)

began = performance.now()
let wrong = 0
for (let i = 0; i < tensors; i++) {
  await client.call('POST', '/v1/state/onload', { tensors: [{ key: key(i), target: { kind: 'shm', name: target, offset: 0 } }] })
  if (sha(readFileSync(`/dev/shm/${target}`)) !== expected[i]) wrong++
}
console.log(`restored all ${tensors} tensors in ${((performance.now() - began) / 1000).toFixed(2)} s: ${wrong} mismatches`)
residency = await client.call<Residency>('GET', '/v1/state/residency')
const durable = residency.keys.filter(k => k.durable).map(k => k.key)

proc.kill('SIGTERM')
await new Promise(resolve => proc.once('exit', resolve));
({ proc, client } = await start())
residency = await client.call<Residency>('GET', '/v1/state/residency')
let wrongAfter = 0
for (const k of residency.keys) {
  const i = Number(/layers\.(\d+)\./.exec(k.key)![1])
  await client.call('POST', '/v1/state/onload', { tensors: [{ key: k.key, target: { kind: 'shm', name: target, offset: 0 } }] })
  if (sha(readFileSync(`/dev/shm/${target}`)) !== expected[i]) wrongAfter++
}
console.log(`after restart: ${residency.keys.length} keys recovered (${durable.length} were on NVMe before), ${wrongAfter} mismatches`)
console.log('\n$ agentctl inspect residency (keys elided)')
console.log(execFileSync(process.execPath, [builtAgentctl, '--socket', join(stateDir, 'agentd.sock'), 'inspect', 'residency'], { encoding: 'utf8' }).split('\n').slice(0, 12).join('\n'))
proc.kill('SIGTERM')
await new Promise(resolve => proc.once('exit', resolve))
if (wrong + wrongAfter > 0 || copies !== tensors) process.exitCode = 1
