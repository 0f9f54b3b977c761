/**
 * Weights at real model sizes: a model at least 8x the host pool, moved
 * between local agentd processes whose pools hold an eighth of it, with
 * baselines measured in the same run (interleaved with the pulls):
 * 1. agent A publishes MODEL_MIB (default 2048) of a Llama-like bf16 model
 *    from a safetensors file, durable: it lands on NVMe, and most of it is
 *    only there (A's pool is POOL_MIB, default MODEL_MIB / 8);
 * 2. B pulls it into its keys with 4 streams (they spill to NVMe as they
 *    complete): GB/s vs min(`iperf3 -P 4` on loopback, `fio` sequential
 *    O_DIRECT write), goal >= 0.8; and vs `fio` sequential read (A reads the
 *    version from NVMe while it serves), goal >= 0.85;
 * 3. B pulls it into a file (`agentctl weights pull --out F`: straight from
 *    the network into the file, fdatasync included; nothing stored in B):
 *    GB/s of the whole command (its wall time, agentctl's start included) and
 *    of the pull alone, vs min(iperf3, fio write);
 * 4. four agents (B and three more, same pools) pull the version from A at
 *    the same moment: the bytes A read from NVMe for them / the model's bytes
 *    (goal ~1x, not 4x), from A's state counters (rangeReadBytes, and
 *    promoted keys at the model's mean tensor size: approximate);
 * 5. peak and current RSS (VmHWM, VmRSS) of A and of the pullers when they
 *    have started, after the publish, after B's first pull into keys (before
 *    its first pull into a file) and at the end: the peak's growth against
 *    the pool size, and what the end's RSS is (anonymous, file, shared).
 * Here server and puller share one machine and one disk: the bound that
 * applies is also measured (fio reading and writing at once).
 * fio runs with the NVMe tier's I/O (4 MiB blocks, queue depth 8) on a file
 * of the model's size in the bench's temp dir, the agents' NVMe directory's
 * file system.
 * Usage: node test/bench/weights-beyond-pool.bench.ts [--model-mib N] [--pool-mib P] [--serve-window-mib W] [--runs R]
 * (--serve-window-mib: A's weights.serveWindowBytes; default the agent's, an eighth of the pool).
 * Medians of R runs (default 3), each run's values in brackets.
 */
// bench-requires: iperf3 fio (iperf3 and fio are the baselines of the pulls; npm run bench checks this line)
import { rmSync, statSync, writeFileSync, mkdtempSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { parseArgs } from 'node:util'
import { agentctlMain, agentMain, runNode, spawnAgent, waitReady, type AgentProcess } from '../helpers/agent-process.ts'
import { generateClusterKey } from '../../mesh/membership/cluster-key.ts'
import type { PullResult } from '../../agent/api/wire/weights.ts'
import { median, MiB } from './bench-stats.ts'
import { processMemory, type ProcessMemory } from '../helpers/process-memory.ts'
import { fioGbPerSecond, fioReadWhileWriting } from './fio.ts'
import { bf16Bytes, iperfGbPerSecond, llamaLike, llamaLikeTensors, writeSafetensors } from './weights-bench-model.ts'

const { values } = parseArgs({ options: { 'model-mib': { type: 'string' }, 'pool-mib': { type: 'string' }, 'serve-window-mib': { type: 'string' }, runs: { type: 'string' } } })
const modelMiB = Number(values['model-mib'] ?? 2048)
const poolMiB = Number(values['pool-mib'] ?? Math.floor(modelMiB / 8))
const runs = Number(values.runs ?? 3)
const streams = 4
/** The NVMe tier's I/O (nvme-tier.ts defaults), fio's too. */
const nvmeIo = { blockBytes: 4 * MiB, queueDepth: 8 }
const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
// tmpdir: a dev agent's API may write there (api.pathRoots), for --out.
const dir = mkdtempSync(join(tmpdir(), 'agentd-wbp-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const { tensors, bytes: total } = llamaLikeTensors(modelMiB)
const poolBytes = poolMiB * MiB
const meanTensorBytes = total / tensors.length
const largestTensorBytes = Math.max(...tensors.map(x => bf16Bytes(x.shape)))

/** What this bench reads of GET /v1/state/residency. rangeReadBytes: NVMe bytes read by range without promoting a key. */
interface Residency {
  counters: { promoted: number, rangeReadBytes: number }
  keyCounts: { host: number, nvme: number }
  tiers: Record<'host' | 'nvme', { usedBytes: number }>
}
const residency = (agent: AgentProcess, query = ''): Promise<Residency> => agent.client.call<Residency>('GET', `/v1/state/residency?summary=true${query}`)

/** NVMe bytes A read between two residency snapshots: ranges read, plus whole keys promoted at the mean tensor size (approximate). */
const nvmeReadBytes = (before: Residency, after: Residency): { bytes: number, rangeBytes: number, promoted: number } => {
  const rangeBytes = after.counters.rangeReadBytes - before.counters.rangeReadBytes
  const promoted = after.counters.promoted - before.counters.promoted
  return { bytes: rangeBytes + promoted * meanTensorBytes, rangeBytes, promoted }
}

let stopping = false
const gb = (x: number): string => `${x.toFixed(2)} GB/s`
const mib = (bytes: number): string => `${(bytes / MiB).toFixed(0)} MiB`
const list = (xs: number[], digits = 2): string => `[${xs.map(x => x.toFixed(digits)).join(', ')}]`
try {
  const keyFile = join(dir, 'cluster.key')
  writeFileSync(keyFile, generateClusterKey(), { mode: 0o600 })
  const args = (state: string): string[] => ['--dev', '--state-dir', state, '--cluster-key', keyFile, '--log-level', 'warn', '--set', 'mesh.enabled=false',
    '--set', `state.hostPoolBytes=${poolBytes}`, '--set', `state.nvmeCapacityBytes=${3 * total}`, '--set', 'weights.retainVersions=2',
    ...(values['serve-window-mib'] !== undefined ? ['--set', `weights.serveWindowBytes=${Number(values['serve-window-mib']) * MiB}`] : [])]
  const file = join(dir, 'model.safetensors')
  // Before the agents start: a synchronous multi-GiB write would stall their log pipes.
  writeSafetensors(file, tensors, { num_attention_heads: String(llamaLike.heads), num_key_value_heads: String(llamaLike.kvHeads) })
  const names = ['A', 'B', 'B2', 'B3', 'B4']
  const agents: AgentProcess[] = []
  for (const name of names) agents.push(await spawnAgent(t, { stateDir: join(dir, name), args: args(join(dir, name)), waitReady: false }))
  for (const agent of agents) await waitReady(agent, 180_000)
  agents.forEach((agent, i) => {
    void agent.exited.then(exit => { if (!stopping) console.error(`agent ${names[i]} exited (${JSON.stringify(exit)}):\n${agent.output().slice(-3000)}`) })
  })
  const [a, b] = [agents[0]!, agents[1]!]
  const pullers = agents.slice(1)
  /** Memory of every agent at each phase: started, published, B's first pull into keys, end. */
  const memory: ProcessMemory[][] = []
  const readMemory = (): void => { memory.push(agents.map(agent => processMemory(agent.proc.pid!))) }
  readMemory()
  console.log(`model: ${tensors.length} tensors, ${mib(total)} bf16 (Llama-like, GQA ${llamaLike.heads}/${llamaLike.kvHeads}, mean tensor ${mib(meanTensorBytes)}, largest ${mib(largestTensorBytes)}); ` +
    `host pools ${mib(poolBytes)} (model/pool ${(total / poolBytes).toFixed(1)}x); ${runs} runs; agent ${basename(agentMain)}; load average ${loadavg().map(x => x.toFixed(1)).join(' ')}`)

  // 1. publish (durable: includes the NVMe write and fsync).
  let began = performance.now()
  const version = (await a.client.weightsPublish({ model: 'bench', version: 1, source: { kind: 'safetensors', path: file } })).version
  const publishSeconds = (performance.now() - began) / 1000
  const held = await residency(a, '&prefix=weights%2F')
  console.log(`publish from safetensors file: ${publishSeconds.toFixed(2)} s (${gb(total / publishSeconds / 1e9)}); A holds ${held.keyCounts.host} keys in host memory, ${held.keyCounts.nvme} on NVMe only ` +
    `(host ${mib(held.tiers.host.usedBytes)}, NVMe ${mib(held.tiers.nvme.usedBytes)})`)
  readMemory()
  const address = (await a.client.status()).weights!.address
  const pull = (agent: AgentProcess): Promise<PullResult> => agent.client.weightsPull({ from: address, model: 'bench', version, streams })
  const dropPulled = (agent: AgentProcess): Promise<unknown> => agent.client.call('POST', '/v1/state/drop', { prefix: 'weights/' })
  const checkWhole = (res: { bytesReceived: number }, who: string): void => {
    if (res.bytesReceived !== total) throw new Error(`${who} received ${res.bytesReceived} bytes, expected ${total}`)
  }

  const keysGbps: number[] = []; const keysServeRead: number[] = []; const iperf: number[] = []; const fioWrite: number[] = []; const fioRead: number[] = []
  const fioBothRead: number[] = []; const fioBothWrite: number[] = []
  const fileGbps: number[] = []; const filePullGbps: number[] = []; const ctlStart: number[] = []
  const fourGbps: number[] = []; const fourRead: number[] = []; const fourRange: number[] = []; const fourPromoted: number[] = []
  const fioFile = join(dir, 'fio.bin')
  const fioBytes = Math.ceil(total / nvmeIo.blockBytes) * nvmeIo.blockBytes
  const outFile = join(dir, 'pulled.safetensors')
  for (let r = 0; r < runs; r++) {
    // 2. into B's keys.
    await dropPulled(b)
    let before = await residency(a)
    const res = await pull(b)
    checkWhole(res, 'B')
    keysGbps.push(total / res.seconds / 1e9)
    keysServeRead.push(nvmeReadBytes(before, await residency(a)).bytes / total)
    if (r === 0) readMemory()
    iperf.push(iperfGbPerSecond(streams))
    fioWrite.push(fioGbPerSecond({ rw: 'write', file: fioFile, sizeBytes: fioBytes, ...nvmeIo }))
    fioRead.push(fioGbPerSecond({ rw: 'read', file: fioFile, sizeBytes: fioBytes, ...nvmeIo }))
    const both = fioReadWhileWriting({ readFile: fioFile, writeFile: `${fioFile}.w`, sizeBytes: fioBytes, ...nvmeIo })
    fioBothRead.push(both.read); fioBothWrite.push(both.write)
    rmSync(`${fioFile}.w`)

    // 3. into a file, as an operator does: the command's wall time, agentctl's start included.
    await dropPulled(b)
    began = performance.now()
    const cli = await runNode(agentctlMain, ['--socket', b.socketPath, '--json', 'weights', 'pull', '--from', address, '--model', 'bench', '--version', String(version), '--streams', String(streams), '--out', outFile])
    const wallSeconds = (performance.now() - began) / 1000
    if (cli.code !== 0) throw new Error(`agentctl weights pull --out exited ${cli.code}: ${cli.stderr}`)
    const written = JSON.parse(cli.stdout) as { seconds: number, bytes: number }
    began = performance.now()
    await runNode(agentctlMain, ['--version'])
    const startSeconds = (performance.now() - began) / 1000
    if (written.bytes !== total || statSync(outFile).size < total) throw new Error(`--out: pulled ${written.bytes} bytes, file ${statSync(outFile).size} bytes, expected ${total} (+ header)`)
    fileGbps.push(total / wallSeconds / 1e9)
    filePullGbps.push(total / written.seconds / 1e9)
    ctlStart.push(startSeconds)
    rmSync(outFile)

    // 4. four pullers at once.
    await Promise.all(pullers.map(dropPulled))
    before = await residency(a)
    began = performance.now()
    const results = await Promise.all(pullers.map(pull))
    const seconds = (performance.now() - began) / 1000
    results.forEach((x, i) => { checkWhole(x, names[i + 1]!) })
    const read = nvmeReadBytes(before, await residency(a))
    fourGbps.push(pullers.length * total / seconds / 1e9)
    fourRead.push(read.bytes / total)
    fourRange.push(read.rangeBytes / total)
    fourPromoted.push(read.promoted)
  }
  readMemory()

  const ratioNet = median(keysGbps) / Math.min(median(iperf), median(fioWrite))
  console.log(`pull into B's keys, ${streams} streams: median ${gb(median(keysGbps))} ${list(keysGbps)}; A's NVMe reads / model ${list(keysServeRead, 3)} (approximate)`)
  console.log(`  iperf3 -P ${streams}: median ${gb(median(iperf))} ${list(iperf)}; fio write: median ${gb(median(fioWrite))} ${list(fioWrite)}; fio read: median ${gb(median(fioRead))} ${list(fioRead)} (O_DIRECT, ${mib(nvmeIo.blockBytes)} blocks, qd ${nvmeIo.queueDepth}, ${mib(fioBytes)})`)
  console.log(`  pull / min(iperf3, fio write): ${ratioNet.toFixed(3)} (goal >= 0.8); pull / fio read (A serves from NVMe): ${(median(keysGbps) / median(fioRead)).toFixed(3)} (goal >= 0.85)`)
  const sameDisk = Math.min(median(iperf), median(fioBothRead), median(fioBothWrite))
  console.log(`  one machine, one disk (A reads while B writes): fio read and write at once: read median ${gb(median(fioBothRead))} ${list(fioBothRead)}, write median ${gb(median(fioBothWrite))} ${list(fioBothWrite)}; ` +
    `pull / min(iperf3, both) ${(median(keysGbps) / sameDisk).toFixed(3)}`)
  console.log(`pull into a file (agentctl weights pull --out, wall time, agentctl's start median ${median(ctlStart).toFixed(2)} s): median ${gb(median(fileGbps))} ${list(fileGbps)}; its pull: median ${gb(median(filePullGbps))} ${list(filePullGbps)}; ` +
    `file / min(iperf3, fio write) ${(median(fileGbps) / Math.min(median(iperf), median(fioWrite))).toFixed(3)} (goal >= 0.8); pull / min(iperf3, both) ${(median(filePullGbps) / Math.min(median(iperf), median(fioBothRead), median(fioBothWrite))).toFixed(3)}`)
  console.log(`${pullers.length} pullers at once: aggregate median ${gb(median(fourGbps))} ${list(fourGbps)}; A's NVMe reads / model median ${median(fourRead).toFixed(3)} ${list(fourRead, 3)} (goal ~1, not ${pullers.length}; approximate: ` +
    `range reads ${list(fourRange, 3)} + promoted keys ${list(fourPromoted, 0)} x mean tensor ${mib(meanTensorBytes)})`)
  agents.forEach((_, i) => {
    const [start, published, pulled, end] = memory.map(phase => phase[i]!) as [ProcessMemory, ProcessMemory, ProcessMemory, ProcessMemory]
    const peak = Math.max(...memory.map(phase => phase[i]!.peak))
    console.log(`RSS ${names[i]!.padEnd(2)}${i === 0 ? ' (server)' : ' (puller)'}: started ${mib(start.now)}, published ${mib(published.now)}, B pulled ${mib(pulled.now)}, ` +
      `end ${mib(end.now)} (anon ${mib(end.anon)}, file ${mib(end.file)}, shmem ${mib(end.shmem)}); peak ${mib(start.peak)} -> ${mib(peak)}: growth ${mib(peak - start.peak)} = ${((peak - start.peak) / poolBytes).toFixed(2)}x the pool`)
  })
} finally {
  stopping = true
  for (const fn of teardowns.reverse()) await fn()
}
