/**
 * Residency at the key counts users reach: a StateManager in process holding
 * `--keys` 4 KiB keys in 10 namespaces (nine in ten adopted in place from a
 * shared-memory object, host tier; one in ten offloaded into a small pool, so
 * most of those spill to NVMe), each figure against the full listing measured
 * in the same run (residency() and its JSON: the work the unpaged route did
 * per request before it paged):
 *
 * 1. In process, each call with its JSON.stringify (what the route sends):
 *    the summary (summary=true), the default answer (summary + the first
 *    1000 keys), a middle page (by cursor, half way), a namespace page and a
 *    tier page (NVMe keys: one in ten). Goal: < 20 ms each at 100k keys.
 *    Median of `--repeats` calls per run, median of `--runs` runs; the
 *    bracket lists the runs.
 * 2. Event-loop lag (perf_hooks monitorEventLoopDelay, 1 ms resolution) while
 *    serving each kind of call back to back: p99 and max, median of runs.
 * 3. Through the real HTTP API on a unix socket (createApiServer in this
 *    process, the client in a worker thread): latency of each request and the
 *    server loop's lag p99 meanwhile, and `--all`'s walk of every page.
 *
 *   node_modules/.bin/node test/bench/state-residency.bench.ts [--runs 5] [--keys 100000] [--repeats 20] [--dir /var/tmp]
 */
import { closeSync, ftruncateSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { setImmediate as yieldLoop } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { Worker } from 'node:worker_threads'
import { pino } from 'pino'
import { createStateManager, type ResidencyFilter } from '../../agent/state/state-manager.ts'
import { createApiServer } from '../../agent/api/server.ts'
import type { StatusBody } from '../../agent/api/wire/status.ts'
import { median, MiB, percentile } from './bench-stats.ts'

const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' }, keys: { type: 'string', default: '100000' }, repeats: { type: 'string', default: '20' }, dir: { type: 'string', default: '/var/tmp' } } })
const runs = Number(values.runs)
const keyCount = Number(values.keys)
const repeats = Number(values.repeats)
const keyBytes = 4096
const namespaces = 10
const dir = mkdtempSync(join(values.dir, 'agentd-state-residency-bench-'))
const adopted = `agentd-bench-residency-${process.pid}`
const source = `agentd-bench-residency-src-${process.pid}`
process.once('exit', () => {
  for (const name of [adopted, source]) rmSync(`/dev/shm/${name}`, { force: true })
  rmSync(dir, { recursive: true, force: true })
})
const logger = pino({ level: 'silent' })

const keyOf = (i: number): string => `bench/job${i % namespaces}/actor/layer${String(i).padStart(7, '0')}:param@[0]/[${keyBytes}]:u8#v1`

// Nine in ten keys adopted in place (the object stays sparse: nothing reads it), one in ten copied in.
const fd = openSync(`/dev/shm/${adopted}`, 'w')
ftruncateSync(fd, keyCount * keyBytes)
closeSync(fd)
writeFileSync(`/dev/shm/${source}`, Buffer.alloc(1000 * keyBytes, 0x5a))
const sm = createStateManager({
  hostPoolBytes: 16 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 2 * keyCount * keyBytes, directIo: true,
  spillHighWatermark: 0.9, spillLowWatermark: 0.75, namespaceQuotaBytes: {}, prefetchHorizonMs: 5000,
}, { logger })
await sm.start()
const copied: number[] = []
const inPlace: Array<{ key: string, offset: number }> = []
for (let i = 0; i < keyCount; i++) {
  if (i % 10 === 0) copied.push(i)
  else inPlace.push({ key: keyOf(i), offset: i * keyBytes })
}
sm.adoptShm(adopted, inPlace)
for (let b = 0; b < copied.length; b += 1000) {
  await sm.offload(copied.slice(b, b + 1000).map((i, j) => ({ key: keyOf(i), source: { kind: 'shm' as const, name: source, offset: j * keyBytes } })))
}
await new Promise(resolve => setTimeout(resolve, 1000))
const counts = sm.residencySummary().keyCounts

/** The cursor after about half the keys, as a caller walking the pages gets it. */
let middleCursor: string | undefined
for (let seen = 0; seen < keyCount / 2;) {
  const page = sm.residencyPage({}, { limit: 2000, ...(middleCursor !== undefined ? { cursor: middleCursor } : {}) })
  seen += page.keys.length
  middleCursor = page.nextCursor ?? undefined
}

/** What GET /v1/state/residency answers for a filter and page, serialized. */
const answer = (filter: ResidencyFilter, page: { cursor?: string, limit?: number }): string =>
  JSON.stringify({ ...sm.residencySummary(filter), ...sm.residencyPage(filter, page) })
const calls: Array<{ label: string, call: () => string }> = [
  { label: 'full listing (unpaged, before; baseline)', call: () => JSON.stringify(sm.residency()) },
  { label: 'summary (summary=true)', call: () => JSON.stringify(sm.residencySummary()) },
  { label: 'summary + first page (1000 keys)', call: () => answer({}, {}) },
  { label: 'summary + middle page (cursor)', call: () => answer({}, { cursor: middleCursor! }) },
  { label: 'summary + namespace page', call: () => answer({ namespace: 'bench/job3/actor' }, {}) },
  { label: 'summary + tier page (nvme)', call: () => answer({ tier: 'nvme' }, {}) },
]

const timings = calls.map(() => ({ ms: [] as number[], lagP99: [] as number[], lagMax: [] as number[], bytes: 0 }))
const histogram = monitorEventLoopDelay({ resolution: 1 })
for (let r = 0; r < runs; r++) {
  for (const [c, { call }] of calls.entries()) {
    const ms: number[] = []
    await yieldLoop()
    histogram.reset()
    histogram.enable()
    for (let i = 0; i < repeats; i++) {
      const start = process.hrtime.bigint()
      timings[c]!.bytes = call().length
      ms.push(Number(process.hrtime.bigint() - start) / 1e6)
      // Other work gets the loop between calls, as between requests.
      await new Promise(resolve => setTimeout(resolve, 2))
    }
    histogram.disable()
    timings[c]!.ms.push(median(ms))
    timings[c]!.lagP99.push(histogram.percentile(99) / 1e6)
    timings[c]!.lagMax.push(histogram.max / 1e6)
  }
}

const runsOf = (xs: number[]): string => `[${xs.map(x => x.toFixed(2)).join(', ')}]`
console.log(`Residency at scale: ${keyCount} keys of ${keyBytes / 1024} KiB in ${namespaces} namespaces (${counts.host} host, ${counts.nvme} NVMe), ${runs} runs of ${repeats} calls`)
const baseline = median(timings[0]!.ms)
for (const [c, { label }] of calls.entries()) {
  const t = timings[c]!
  console.log(`${label.padEnd(42)} median ${median(t.ms).toFixed(2)} ms ${runsOf(t.ms)}  ${(t.bytes / MiB).toFixed(2)} MiB  ` +
    `lag p99 ${median(t.lagP99).toFixed(1)} ms max ${median(t.lagMax).toFixed(1)} ms` + (c > 0 ? `  ratio ${(median(t.ms) / baseline).toFixed(4)}` : ''))
}
console.log('goal: summary and every page < 20 ms at 100k keys, and event-loop lag p99 < 20 ms while serving them')

// Through the real API: the server on this thread, the client on a worker thread (its own loop).
const socketPath = join(dir, 'api.sock')
const server = await createApiServer({ socketPath, socketMode: '0600', socketGroup: '', bodyLimitBytes: 1 << 20, version: '0.0.0' }, {
  logger, status: { status: () => ({}) as StatusBody }, inventory: { inventory: () => undefined }, state: { stateManager: () => sm },
})
await server.start()
const requests = [
  { label: 'GET ?summary=true', path: '/v1/state/residency?summary=true' },
  { label: 'GET (summary + first 1000 keys)', path: '/v1/state/residency' },
  { label: 'GET ?cursor=<middle>', path: `/v1/state/residency?cursor=${middleCursor}` },
  { label: 'GET ?namespace=bench/job3/actor', path: '/v1/state/residency?namespace=bench/job3/actor' },
  { label: 'GET ?tier=nvme', path: '/v1/state/residency?tier=nvme' },
  { label: 'every page, 2000 keys each (--all)', path: '/v1/state/residency?limit=2000', walk: true },
]
const clientCode = `
const { parentPort, workerData } = require('node:worker_threads')
const http = require('node:http')
const get = path => new Promise((resolve, reject) => {
  http.get({ socketPath: workerData.socketPath, path, agent: false }, res => {
    let body = ''
    res.setEncoding('utf8')
    res.on('data', c => { body += c })
    res.on('end', () => res.statusCode === 200 ? resolve(JSON.parse(body)) : reject(new Error(body)))
  }).on('error', reject)
})
parentPort.on('message', async ({ path, walk, repeats }) => {
  const ms = []
  for (let i = 0; i < repeats; i++) {
    const start = performance.now()
    let page = await get(path)
    while (walk && page.nextCursor !== null) page = await get(path + '&cursor=' + page.nextCursor)
    ms.push(performance.now() - start)
  }
  parentPort.postMessage(ms)
})`
const worker = new Worker(clientCode, { eval: true, workerData: { socketPath } })
const over = requests.map(() => ({ ms: [] as number[], lagP99: [] as number[] }))
for (let r = 0; r < runs; r++) {
  for (const [q, request] of requests.entries()) {
    histogram.reset()
    histogram.enable()
    worker.postMessage({ path: request.path, walk: request.walk === true, repeats: request.walk === true ? 2 : repeats })
    const ms = await new Promise<number[]>(resolve => worker.once('message', resolve))
    histogram.disable()
    over[q]!.ms.push(median(ms))
    over[q]!.lagP99.push(histogram.percentile(99) / 1e6)
  }
}
await worker.terminate()
await server.stop()
console.log(`through the API (unix socket, client on a worker thread; the server's event-loop lag):`)
for (const [q, { label }] of requests.entries()) {
  const t = over[q]!
  console.log(`${label.padEnd(42)} median ${median(t.ms).toFixed(2)} ms ${runsOf(t.ms)}  lag p99 ${median(t.lagP99).toFixed(1)} ms ${runsOf(t.lagP99)}  (p99 of runs ${percentile(t.ms, 99).toFixed(2)} ms)`)
}
await sm.stop()
