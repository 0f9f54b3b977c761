/**
 * Weight fan-out over bandwidth-limited links (the weight swarm): 1 + N
 * agents in network namespaces joined by a bridge, every host's uplink shaped
 * with tc tbf to RATE Mbit/s, real agent processes in one mesh. Per run:
 * 1. agent 0 publishes a new version of a MODEL_MIB model (TENSORS tensors);
 *    agent 1 pulls it alone, without --from (the holder from the mesh): T1;
 * 2. agent 0 publishes the next version; agents 1..N pull it at the same
 *    moment: T8 (the slowest pull's wall time), and the bytes the pullers
 *    got from agent 0 / the model's bytes (the publisher's uploads; each
 *    pull reports its bytes per source);
 * baseline in the same run: iperf3 from agent 0's namespace to agent 1's
 * (one link, RATE). Goals (issue): T8 <= 1.5 x T1, T1 >= 0.9 x iperf3, the
 * publisher's uploads <= 1.5 x the model.
 * With --tp T, every pull is rank 0 of a row-parallel tp T layout (each
 * tensor split along dim 1, gathered by the publisher): the sliced swarm, the
 * uploads counted in copies of the rank's slices (the model / T).
 * Needs root (network namespaces) and iperf3.
 * Usage: node test/bench/weights-swarm.bench.ts [--pullers N] [--model-mib M] [--tensors K] [--rate-mbit R] [--runs R] [--tp T]
 */
// bench-requires: iperf3 (the link baseline; npm run bench checks this line)
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { createNetnsLab, netnsSkipReason } from '../helpers/netns-lab.ts'
import { startTestMesh, type MeshAgent } from '../helpers/test-mesh.ts'
import { agentctlMain, runNode } from '../helpers/agent-process.ts'
import { median, MiB } from './bench-stats.ts'

const { values } = parseArgs({ options: { pullers: { type: 'string' }, 'model-mib': { type: 'string' }, tensors: { type: 'string' }, 'rate-mbit': { type: 'string' }, runs: { type: 'string' }, tp: { type: 'string' } } })
const pullers = Number(values.pullers ?? 8)
const modelMiB = Number(values['model-mib'] ?? 128)
const tensorCount = Number(values.tensors ?? 64)
const rateMbit = Number(values['rate-mbit'] ?? 200)
const runs = Number(values.runs ?? 3)
const tp = Number(values.tp ?? 1)
/** Rank 0 of a row-parallel layout (the rules name every tensor of writeModel), or the whole version. */
const layout = tp > 1 ? { tp, rank: 0, rules: [{ pattern: 'down_proj', dim: 1 }] } : undefined

const skip = await netnsSkipReason()
if (skip !== false) {
  console.log(`skipped: ${skip}`)
  process.exit(0)
}
const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const dir = mkdtempSync(join(tmpdir(), 'agentd-swarm-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

/** A safetensors file of `count` bf16 tensors of equal size, `seed` varying the bytes (each version differs). */
function writeModel (path: string, seed: number): void {
  const each = Math.floor(modelMiB * MiB / tensorCount / 2048) * 2048
  const header: Record<string, unknown> = { __metadata__: { seed: String(seed) } }
  for (let i = 0; i < tensorCount; i++) header[`model.layers.${i}.mlp.down_proj.weight`] = { dtype: 'BF16', shape: [each / 2048, 1024], data_offsets: [i * each, (i + 1) * each] }
  let json = Buffer.from(JSON.stringify(header))
  json = Buffer.concat([json, Buffer.alloc((8 - json.length % 8) % 8, 0x20)])
  const length = Buffer.alloc(8)
  length.writeBigUInt64LE(BigInt(json.length))
  const data = Buffer.alloc(each * tensorCount)
  for (let i = 0; i < data.length; i += 4) data.writeUInt32LE((i * 2654435761 + seed) >>> 0, i)
  writeFileSync(path, Buffer.concat([length, json, data]))
}

/** iperf3 from host `from` to host `to` (the sender's uplink), Gbit/s → bytes/s. */
function iperf (fromNs: string, toNs: string, toAddress: string): number {
  const server = spawn('ip', ['netns', 'exec', toNs, 'iperf3', '-s', '-1', '-p', '5301'], { stdio: 'ignore' })
  spawnSync('sleep', ['0.5'])
  const out = spawnSync('ip', ['netns', 'exec', fromNs, 'iperf3', '-c', toAddress, '-p', '5301', '-t', '4', '-J'], { encoding: 'utf8' })
  server.kill()
  const parsed = JSON.parse(out.stdout) as { end: { sum_received: { bits_per_second: number } } }
  return parsed.end.sum_received.bits_per_second / 8
}

try {
  const lab = await createNetnsLab(t, 1 + pullers)
  await lab.shapeUplinks(rateMbit)
  const mesh = await startTestMesh(t, {
    nodes: 1 + pullers,
    hosts: lab.hosts,
    built: true,
    args: ['--set', 'state.enabled=true', '--set', `state.hostPoolBytes=${Math.max(256, 3 * modelMiB) * MiB}`, '--set', 'weights.dataListen=0.0.0.0:7461', '--set', 'weights.retainVersions=2', '--log-level', 'warn'],
  })
  await mesh.waitConverged()
  const [publisher, ...rest] = mesh.agents as [MeshAgent, ...MeshAgent[]]
  // What one pull moves: the model, or the rank's slices of it.
  const modelBytes = Math.floor(modelMiB * MiB / tensorCount / 2048) * 2048 * tensorCount / tp
  console.log(`${1 + pullers} agents in network namespaces, uplinks ${rateMbit} Mbit/s (tbf); model ${(modelBytes * tp / MiB).toFixed(0)} MiB in ${tensorCount} tensors${layout !== undefined ? `, each pull rank 0 of tp ${tp} (${(modelBytes / MiB).toFixed(0)} MiB, row-parallel slices)` : ''}; ${runs} runs`)

  let version = 0
  /** Publishes the next version on agent 0 and waits until every agent sees it advertised. */
  const publish = async (): Promise<number> => {
    version++
    const file = join(dir, `v${version}.safetensors`)
    writeModel(file, version)
    const out = await runNode(agentctlMain, ['--socket', publisher.socketPath, 'weights', 'publish', '--model', 'm', '--version', String(version), '--from-safetensors', file])
    if (out.code !== 0) throw new Error(`publish failed: ${out.stderr}`)
    rmSync(file)
    await mesh.waitFor(rest, peers => peers.some(p => p.peerId === publisher.peerId && (p.record?.weights ?? []).some(w => w.model === 'm' && w.version === version && w.pulling !== true)), 30_000, `v${version} advertised`)
    return version
  }

  const t1: number[] = []; const t8: number[] = []; const uploads: number[] = []; const links: number[] = []; const fromPeers: number[] = []
  for (let r = 0; r < runs; r++) {
    links.push(iperf(publisher.host!.ns, rest[0]!.host!.ns, rest[0]!.host!.address))
    const v1 = await publish()
    let began = performance.now()
    await rest[0]!.client.weightsPull({ model: 'm', version: v1, ...(layout !== undefined ? { layout } : {}) })
    t1.push((performance.now() - began) / 1000)

    const v2 = await publish()
    began = performance.now()
    const results = await Promise.all(rest.map(a => a.client.weightsPull({ model: 'm', version: v2, ...(layout !== undefined ? { layout } : {}) })))
    t8.push((performance.now() - began) / 1000)
    // What the publisher sent for this fan-out: what each puller says it got from it.
    const fromPublisher = results.reduce((s, x) => s + Object.entries(x.sources).filter(([a]) => a.startsWith(`${publisher.host!.address}:`)).reduce((p, [, b]) => p + b, 0), 0)
    uploads.push(fromPublisher / modelBytes)
    const total = results.reduce((s, x) => s + x.bytes, 0)
    fromPeers.push((total - fromPublisher) / total)
    const dropped = results.flatMap(x => x.droppedSources ?? [])
    if (dropped.length > 0) console.log(`  run ${r + 1}: dropped peers ${JSON.stringify(dropped)}`)
  }
  const list = (xs: number[], d = 2): string => `[${xs.map(x => x.toFixed(d)).join(', ')}]`
  const linkRate = median(links)
  console.log(`iperf3 ${publisher.host!.address} -> ${rest[0]!.host!.address}: median ${(linkRate * 8 / 1e6).toFixed(0)} Mbit/s ${list(links.map(x => x * 8 / 1e6), 0)}`)
  console.log(`T1 (one puller): median ${median(t1).toFixed(2)} s ${list(t1)}; ${(modelBytes / median(t1) * 8 / 1e6).toFixed(0)} Mbit/s = ${(modelBytes / median(t1) / linkRate).toFixed(3)} x iperf3 (goal >= 0.9)`)
  console.log(`T${pullers} (${pullers} pullers at once): median ${median(t8).toFixed(2)} s ${list(t8)}; T${pullers} / T1 = ${(median(t8) / median(t1)).toFixed(2)} (goal <= 1.5; without the swarm ${pullers}x)`)
  console.log(`publisher's uploads per fan-out: median ${median(uploads).toFixed(2)} x the ${layout !== undefined ? 'rank\'s slices' : 'model'} ${list(uploads)} (goal <= 1.5); bytes the pullers got from peers: median ${(median(fromPeers) * 100).toFixed(0)} % ${list(fromPeers.map(x => x * 100), 0)}`)
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
