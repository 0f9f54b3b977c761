// The weight swarm with real agents in network namespaces, one mesh, every uplink shaped (tc tbf):
// eight pullers without --from find the publisher and each other in the mesh; a puller killed mid-swarm
// does not stop the others; seven pullers of one tensor-parallel layout swarm on their slices; the
// publisher killed once a peer holds the version whole does not stop the pullers either.
// Byte-exactness checked on what each agent exports of its keys. Needs root (network namespaces).
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { createNetnsLab, netnsSkipReason } from '../../helpers/netns-lab.ts'
import { startTestMesh, type MeshAgent, type TestMesh } from '../../helpers/test-mesh.ts'
import { agentctlMain, runNode } from '../../helpers/agent-process.ts'
import { capabilities } from '../../../native/index.ts'
import { MiB, tensor, writeSafetensors, type FixtureTensor } from './weights-fixtures.ts'
import type { PullResult } from '../../../agent/api/wire/weights.ts'

const skip = !capabilities.addon.loaded ? `the weights subsystem needs the native addon (${capabilities.addon.error})` : await netnsSkipReason()

/** The tensors of an agent's copy of `version`, exported with state materialize, by name. */
async function exported (agent: MeshAgent, version: number, dir: string): Promise<Map<string, Buffer>> {
  const out = join(dir, `${agent.name}-v${version}.safetensors`)
  const run = await runNode(agentctlMain, ['--socket', agent.socketPath, 'state', 'materialize', '--prefix', 'weights/m/', '--version', String(version), '--out', out, '--overwrite'])
  if (run.code !== 0) throw new Error(`materialize on ${agent.name}: ${run.stderr}`)
  const bytes = readFileSync(out)
  const length = Number(bytes.readBigUInt64LE(0))
  const { __metadata__: _, ...entries } = JSON.parse(bytes.subarray(8, 8 + length).toString()) as Record<string, { data_offsets: [number, number] }>
  return new Map(Object.entries(entries).map(([name, e]) => [name, bytes.subarray(8 + length + e.data_offsets[0], 8 + length + e.data_offsets[1])]))
}

async function publish (mesh: TestMesh, publisher: MeshAgent, version: number, tensors: FixtureTensor[]): Promise<void> {
  const file = join(mesh.dir, `v${version}.safetensors`)
  writeSafetensors(file, tensors)
  const run = await runNode(agentctlMain, ['--socket', publisher.socketPath, 'weights', 'publish', '--model', 'm', '--version', String(version), '--from-safetensors', file])
  if (run.code !== 0) throw new Error(`publish: ${run.stderr}`)
  const others = mesh.agents.filter(a => a !== publisher && a.proc.exitCode === null && a.proc.signalCode === null)
  await mesh.waitFor(others, peers => peers.some(p => p.peerId === publisher.peerId && (p.record?.weights ?? []).some(w => w.model === 'm' && w.version === version)), 30_000, `v${version} advertised`)
}

const fromPeers = (r: PullResult, publisher: MeshAgent): number => Object.entries(r.sources).filter(([a]) => !a.startsWith(`${publisher.host!.address}:`)).reduce((s, [, b]) => s + b, 0)

t.test('eight pullers find each other in the mesh, whole and sliced; a puller killed mid-swarm and then the publisher killed do not stop the others', { skip }, async t => {
  const lab = await createNetnsLab(t, 9)
  await lab.shapeUplinks(100)
  const mesh = await startTestMesh(t, {
    nodes: 9,
    hosts: lab.hosts,
    args: ['--set', 'state.enabled=true', '--set', `state.hostPoolBytes=${128 * MiB}`, '--set', 'weights.dataListen=0.0.0.0:7461', '--set', 'weights.chunkBytes=262144'],
  })
  await mesh.waitConverged()
  const [publisher, ...pullers] = mesh.agents as [MeshAgent, ...MeshAgent[]]
  // 24 MiB in 24 tensors: about 2 s for one puller over a 100 Mbit/s uplink.
  const v1 = Array.from({ length: 24 }, (_, i) => tensor(`model.layers.${i}.mlp.down_proj.weight`, 'bf16', [512, 1024], 300 + i))
  await publish(mesh, publisher, 1, v1)

  // Eight pullers at once (one copy takes the publisher's uplink 2 s, eight 16 s); the eighth killed after 800 ms.
  const began = performance.now()
  const pulls = pullers.map(p => p.client.weightsPull({ model: 'm', version: 1 }))
  const victim = pullers[7]!
  await new Promise(resolve => setTimeout(resolve, 800))
  victim.proc.kill('SIGKILL')
  const results = await Promise.allSettled(pulls)
  t.comment(`8 pullers of 24 MiB over 100 Mbit/s uplinks: ${((performance.now() - began) / 1000).toFixed(1)} s (one alone about 2 s)`)
  t.equal(results[7]!.status, 'rejected', 'the killed puller\'s pull failed')
  for (const [i, r] of results.slice(0, 7).entries()) {
    t.equal(r.status, 'fulfilled', `puller ${i} completed${r.status === 'rejected' ? `: ${(r.reason as Error).message}` : ''}`)
    if (r.status !== 'fulfilled') continue
    t.equal(r.value.bytes, 24 * MiB)
    const copy = await exported(pullers[i]!, 1, mesh.dir)
    t.ok(v1.every(x => copy.get(x.name)?.equals(x.data) === true), `puller ${i}: every tensor byte-exact`)
  }
  const peerBytes = results.slice(0, 7).reduce((s, r) => s + (r.status === 'fulfilled' ? fromPeers(r.value, publisher) : 0), 0)
  // The publisher alone would send 7 copies (168 MiB) to the 7 that completed: the swarm leaves it far fewer.
  t.ok(peerBytes > 3 * 24 * MiB, `the pullers got ${(peerBytes / MiB).toFixed(1)} of ${7 * 24} MiB from each other`)

  // v2, sliced: the seven pull rank 0 of a row-parallel tp 2 layout at once, finding each other's slices in the mesh.
  const v2 = v1.map((x, i) => tensor(x.name, 'bf16', x.shape, 400 + i))
  await publish(mesh, publisher, 2, v2)
  const layout = { tp: 2, rank: 0, rules: [{ pattern: 'down_proj', dim: 1 }] }
  const live = pullers.slice(0, 7)
  const sliced = await Promise.allSettled(live.map(p => p.client.weightsPull({ model: 'm', version: 2, layout })))
  const rank0 = (x: FixtureTensor): Buffer => Buffer.concat(Array.from({ length: 512 }, (_, row) => x.data.subarray(row * 2048, row * 2048 + 1024)))
  let slicedFromPeers = 0
  for (const [i, r] of sliced.entries()) {
    t.equal(r.status, 'fulfilled', `sliced puller ${i} completed${r.status === 'rejected' ? `: ${(r.reason as Error).message}` : ''}`)
    if (r.status !== 'fulfilled') continue
    t.equal(r.value.bytes, 12 * MiB)
    slicedFromPeers += fromPeers(r.value, publisher)
    // Exported (an agentctl process each) for the first and the last; every puller's slices are checked
    // byte-exact in swarm.test.ts, and each piece against its checksum here.
    if (i !== 0 && i !== live.length - 1) continue
    const copy = await exported(live[i]!, 2, mesh.dir)
    // Which tensors differ, and how: a slice missing from the export, one of another length, or other bytes.
    const wrong = v2.filter(x => copy.get(x.name)?.equals(rank0(x)) !== true)
      .map(x => { const got = copy.get(x.name); return `${x.name}: ${got === undefined ? 'missing' : got.length !== rank0(x).length ? `${got.length} bytes` : 'other bytes'}` })
    t.same(wrong, [], `sliced puller ${i}: every slice byte-exact (exported: ${[...copy.keys()].length} tensors)`)
  }
  t.ok(slicedFromPeers > 3 * 12 * MiB, `the sliced pullers got ${(slicedFromPeers / MiB).toFixed(1)} of ${7 * 12} MiB from each other`)

  // v3: puller 0 pulls it whole first; then pullers 1 and 2 start, and the publisher is killed.
  const v3 = v1.map((x, i) => tensor(x.name, 'bf16', x.shape, 500 + i))
  await publish(mesh, publisher, 3, v3)
  await pullers[0]!.client.weightsPull({ model: 'm', version: 3 })
  await mesh.waitFor([pullers[1]!, pullers[2]!], peers => peers.some(p => p.peerId === pullers[0]!.peerId && (p.record?.weights ?? []).some(w => w.version === 3 && w.pulling !== true && w.layout === undefined)), 30_000, 'puller 0 advertising v3 whole')
  const late = [pullers[1]!, pullers[2]!].map(p => p.client.weightsPull({ model: 'm', version: 3 }))
  await new Promise(resolve => setTimeout(resolve, 300))
  publisher.proc.kill('SIGKILL')
  for (const [i, r] of (await Promise.allSettled(late)).entries()) {
    t.equal(r.status, 'fulfilled', `puller ${i + 1} completed without the publisher${r.status === 'rejected' ? `: ${(r.reason as Error).message}` : ''}`)
    if (r.status !== 'fulfilled') continue
    t.ok(fromPeers(r.value, publisher) > 0, `puller ${i + 1} got ${(fromPeers(r.value, publisher) / MiB).toFixed(1)} MiB from peers (switched to ${JSON.stringify(r.value.switchedTo)})`)
    const copy = await exported(pullers[i + 1]!, 3, mesh.dir)
    t.ok(v3.every(x => copy.get(x.name)?.equals(x.data) === true), `puller ${i + 1}: v3 byte-exact`)
  }
})
