/**
 * CPU profile of one idle agent in an N-agent cluster (built agents, loopback):
 *
 *   node test/bench/mesh-profile.bench.ts [nodes=20] [idleS=30] [outDir=.] [servers=3]
 *
 * N−1 agents start as in the mesh bench (`servers` election servers, the
 * rest clients; servers=0: every agent a --dev agent leading itself), the N-th with --cpu-prof; once all
 * converged and settled for 5 s it idles idleS seconds and is stopped
 * (SIGTERM, so the profile is written). Prints the idle window's self time by
 * package and the top functions (samples before the window are left out).
 */
import { readdirSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestMesh } from '../helpers/test-mesh.ts'

const nodes = Number(process.argv[2] ?? 20)
const idleS = Number(process.argv[3] ?? 30)
const outDir = resolve(process.argv[4] ?? '.')
const servers = Number(process.argv[5] ?? 3)

interface ProfileNode { id: number, callFrame: { functionName: string, url: string, lineNumber: number }, children?: number[] }
interface Profile { nodes: ProfileNode[], startTime: number, samples: number[], timeDeltas: number[] }

const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
let windowStartMs = 0
let windowEndMs = 0
try {
  const mesh = await startTestMesh(t, { nodes: nodes - 1, built: true, convergeTimeoutMs: 220_000, ...(servers > 0 ? { clusterServers: Math.min(servers, nodes - 1) } : {}) })
  const profiled = await mesh.addAgent({ name: 'profiled', env: { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${outDir} --cpu-prof-interval=1000` } })
  await mesh.waitConverged(mesh.agents.concat(profiled), 120_000)
  await sleep(5000)
  windowStartMs = Date.now()
  await sleep(idleS * 1000)
  windowEndMs = Date.now()
  profiled.proc.kill('SIGTERM')
  await profiled.exited
} finally {
  for (const fn of teardowns.reverse()) await fn()
}

const file = readdirSync(outDir).filter(f => f.endsWith('.cpuprofile')).map(f => join(outDir, f)).sort().at(-1)!
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
const byId = new Map(profile.nodes.map(n => [n.id, n]))
// Profile timestamps are µs of a monotonic clock; the last sample is at the SIGTERM, about windowEndMs.
let at = profile.startTime
const times = profile.timeDeltas.map(d => (at += d))
const endUs = times.at(-1)!
const fromUs = endUs - (Date.now() - windowStartMs) * 1000 + (Date.now() - windowEndMs) * 1000
const selfUs = new Map<number, number>()
for (let i = 0; i < profile.samples.length; i++) {
  if (times[i]! < fromUs || times[i]! > endUs - 0) continue
  const dt = profile.timeDeltas[i + 1] ?? 0
  selfUs.set(profile.samples[i]!, (selfUs.get(profile.samples[i]!) ?? 0) + dt)
}
const windowS = (windowEndMs - windowStartMs) / 1000
const pkg = (url: string): string => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1] ?? (url.startsWith('node:') ? url : url === '' ? '(native/idle/gc)' : url.replace(/^.*\/dist\//, 'dist/'))
const byPkg = new Map<string, number>()
const byFn = new Map<string, number>()
for (const [id, us] of selfUs) {
  const n = byId.get(id)!
  const f = n.callFrame
  byPkg.set(pkg(f.url), (byPkg.get(pkg(f.url)) ?? 0) + us)
  const key = `${f.functionName || '(anon)'} ${pkg(f.url)}:${f.lineNumber + 1}`
  byFn.set(key, (byFn.get(key) ?? 0) + us)
}
const pct = (us: number): string => `${(us / 1e6 / windowS * 100).toFixed(3)} %`
const idleUs = [...selfUs].filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)').reduce((sum, [, us]) => sum + us, 0)
const totalUs = [...selfUs.values()].reduce((sum, us) => sum + us, 0)
console.log(`profile ${file}, idle window ${windowS.toFixed(1)} s; % of one core; main thread busy ${pct(totalUs - idleUs)}`)
for (const [k, us] of [...byPkg].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`  ${pct(us).padStart(9)}  ${k}`)
console.log('top functions (self):')
for (const [k, us] of [...byFn].sort((a, b) => b[1] - a[1]).slice(0, 40)) console.log(`  ${pct(us).padStart(9)}  ${k}`)
