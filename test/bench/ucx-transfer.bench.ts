/**
 * UCX one-sided reads through the addon (native/ucx.ts) vs UCX's own
 * `ucx_perftest -t ucp_get`, same run, same message size, same number of
 * gets in flight, same transports (UCX_TLS), two processes on this machine.
 * Per transport set and run: a serving process (test/native/ucx-peer.ts)
 * maps MODEL_MIB of host memory; this process reads all of it with gets of
 * SIZE bytes, DEPTH at a time, into its own pool, prefaulted (GiB/s: the
 * model); then the same number of gets of one SIZE range into one
 * destination again and again, as ucx_perftest does (cache-warm: the tool's
 * own conditions); then ucx_perftest client/server with -s SIZE -O DEPTH for
 * the same number of gets (its "overall" bandwidth, MB/s = 2^20 bytes/s).
 * Goal (issue): the addon >= 0.85x ucx_perftest. Reported: medians of RUNS
 * and the ratios of the medians. Then, per GATHER size R, the model read as
 * gathered slices (what a row-parallel rank of tp 2 pulls): each SIZE
 * destination one get of runs of R bytes, 2R apart (half the model read),
 * against the contiguous
 * figure of the same run (how pullers choose between one get per run and
 * the server's gather over TCP: ucx-connector.ts minRunBytes).
 * Needs libucx (the addon built with it) and ucx-utils (ucx_perftest).
 * Usage: node test/bench/ucx-transfer.bench.ts [--model-mib M] [--size-kib K] [--depth D] [--runs R] [--tls tcp,posix] [--gather 512,2048,16384]
 */
// bench-requires: ucx_perftest (the baseline; npm run bench checks this line)
import { spawn, spawnSync } from 'node:child_process'
import { createInterface } from 'node:readline'
import { parseArgs } from 'node:util'
import { capabilities, createHostPool, createUcxWorker, populateHostRange } from '../../native/index.ts'
import { median, MiB } from './bench-stats.ts'

const { values } = parseArgs({ options: { 'model-mib': { type: 'string' }, 'size-kib': { type: 'string' }, depth: { type: 'string' }, runs: { type: 'string' }, tls: { type: 'string' }, gather: { type: 'string' } } })
const modelMiB = Number(values['model-mib'] ?? 1024)
const size = Number(values['size-kib'] ?? 4096) * 1024
const depth = Number(values.depth ?? 1)
const runs = Number(values.runs ?? 3)
const gatherSizes = (values.gather ?? '512,2048,16384').split(',').filter(x => x !== '').map(Number)
const tlsSets = (values.tls ?? 'tcp,posix').split(',').map(x => x === 'posix' ? 'posix,self' : x)

if (!capabilities.ucx.compiled) {
  console.log('skipped: the native addon was built without UCX (install libucx-dev and rebuild)')
  process.exit(0)
}
if (spawnSync('ucx_perftest', ['-h'], { stdio: 'ignore' }).error !== undefined) {
  console.log('skipped: ucx_perftest is not installed (Debian: ucx-utils)')
  process.exit(0)
}
const bytes = modelMiB * MiB
const gets = Math.floor(bytes / size)

/**
 * The addon: the peer's mapping read with gets of `size`, `depth` in flight, GiB/s: every byte of it (`model`), one
 * range over and over (`oneBuffer`), and per gather size R half of it as runs of R bytes 2R apart (`gathered`).
 */
async function addonRun (tls: string): Promise<{ model: number, oneBuffer: number, gathered: number[] }> {
  process.env.UCX_TLS = tls
  const child = spawn(process.execPath, ['test/native/ucx-peer.ts', '--bytes', String(2 * bytes)], { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, UCX_LOG_LEVEL: 'fatal' } })
  try {
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
    const info = JSON.parse((await lines.next()).value as string) as { address: string, mappings: Array<{ rkey: string, address: string }> }
    const pool = await createHostPool({ sizeBytes: bytes, lock: false, hugePages: false, registerCuda: false })
    const worker = createUcxWorker()
    try {
      const extent = pool.allocate(bytes)
      await populateHostRange(pool.range(extent))
      const ep = worker.connect(Buffer.from(info.address, 'hex'))
      const key = worker.remoteKey(ep, Buffer.from(info.mappings[0]!.rkey, 'hex'))
      const base = BigInt(info.mappings[0]!.address)
      const timed = async (at: (i: number) => number): Promise<number> => {
        let next = 0
        const lane = async (): Promise<void> => {
          for (let i = next++; i < gets; i = next++) await worker.get(ep, key, base + BigInt(at(i)), pool.range(extent, at(i), size))
        }
        const began = performance.now()
        await Promise.all(Array.from({ length: depth }, lane))
        return gets * size / ((performance.now() - began) / 1000) / 2 ** 30
      }
      const model = await timed(i => i * size)
      const oneBuffer = await timed(() => 0)
      const gathered: number[] = []
      for (const run of gatherSizes) {
        // Runs 2R apart over the first mapping (MODEL_MIB): half of it read, in half as many gets.
        const perGet = size / run
        const halfGets = Math.floor(gets / 2)
        const began = performance.now()
        let next = 0
        const lane = async (): Promise<void> => {
          for (let i = next++; i < halfGets; i = next++) {
            const runs = Array.from({ length: perGet }, (_, j) => ({ offset: (i * perGet + j) * 2 * run, length: run }))
            await worker.get(ep, key, base, pool.range(extent, i * size, size), runs)
          }
        }
        await Promise.all(Array.from({ length: depth }, lane))
        gathered.push(halfGets * size / ((performance.now() - began) / 1000) / 2 ** 30)
      }
      return { model, oneBuffer, gathered }
    } finally {
      worker.close()
      pool.close()
    }
  } finally {
    child.kill()
  }
}

/** ucx_perftest ucp_get, same size, outstanding and bytes; GiB/s from its overall MB/s. */
async function perftestRun (tls: string, port: number): Promise<number> {
  const env = { ...process.env, UCX_TLS: tls, UCX_LOG_LEVEL: 'fatal' }
  const server = spawn('ucx_perftest', ['-p', String(port)], { stdio: 'ignore', env })
  try {
    await new Promise(resolve => setTimeout(resolve, 500))
    const out = spawnSync('ucx_perftest', ['127.0.0.1', '-p', String(port), '-t', 'ucp_get', '-s', String(size), '-n', String(gets), '-w', '16', '-O', String(depth)], { encoding: 'utf8', env, timeout: 120_000 })
    const final = /^Final:\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)/m.exec(out.stdout)
    if (final === null) throw new Error(`ucx_perftest printed no Final line: ${out.stdout.slice(-500)}${out.stderr.slice(-500)}`)
    return Number(final[1]) * MiB / 2 ** 30
  } finally {
    server.kill()
  }
}

console.log(`UCX ${capabilities.ucx.version}: ${modelMiB} MiB read with ${gets} gets of ${size / 1024} KiB, ${depth} in flight, two processes; ${runs} runs`)
let port = 13400
for (const tls of tlsSets) {
  const model: number[] = []; const oneBuffer: number[] = []; const theirs: number[] = []
  const gathered: number[][] = gatherSizes.map(() => [])
  for (let r = 0; r < runs; r++) {
    const ours = await addonRun(tls)
    model.push(ours.model)
    oneBuffer.push(ours.oneBuffer)
    for (const [i, x] of ours.gathered.entries()) gathered[i]!.push(x)
    theirs.push(await perftestRun(tls, port++))
  }
  const list = (xs: number[]): string => `[${xs.map(x => x.toFixed(2)).join(', ')}]`
  const ratio = (xs: number[]): string => (median(xs) / median(theirs)).toFixed(2)
  console.log(`UCX_TLS=${tls}: ucx_perftest median ${median(theirs).toFixed(2)} GiB/s ${list(theirs)}; addon, one buffer as the tool: median ${median(oneBuffer).toFixed(2)} GiB/s ${list(oneBuffer)} = ${ratio(oneBuffer)}x (goal >= 0.85); addon, the whole ${modelMiB} MiB: median ${median(model).toFixed(2)} GiB/s ${list(model)} = ${ratio(model)}x`)
  for (const [i, run] of gatherSizes.entries()) {
    console.log(`UCX_TLS=${tls}: gathered, runs of ${run} bytes (${size / run} per get): median ${median(gathered[i]!).toFixed(2)} GiB/s ${list(gathered[i]!)} = ${(median(gathered[i]!) / median(model)).toFixed(2)}x the contiguous gets`)
  }
}
