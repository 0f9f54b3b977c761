/**
 * Mesh benchmark: N real agents (separate processes) on loopback, each size
 * with the bounded partial view (mesh.maxPeers = 12, the default) and with a
 * full mesh (maxPeers = 1024: every agent draws every other, the agent before
 * the bounded view), measured in the same run.
 *
 *   node_modules/.bin/node test/bench/mesh.bench.ts [sizes=10,25,50] [idleS=30] [servers=3] [builds=bundle] [maxPeers=12,1024] [rounds=1]
 *
 * `builds`: comma-separated, each `bundle` (this build as installed),
 * `unbundled` (its compiled modules) or the path of another build's agentd
 * entry (a previous version's dist/bundle/agentd.js: the baseline). Each
 * round runs every build in turn, so a baseline is measured in the same run.
 *
 * The cluster is deployed as README describes: `servers` election servers
 * (one voter set) and the rest clients; servers=0 makes every agent a --dev
 * agent leading a voter set of its own (how figures before this option were
 * taken: N leaders each republishing decisions).
 *
 * - convergence: from the last agent's "mesh started" until every agent has
 *   logged every other one alive (log timestamps, one clock, no polling);
 * - dissemination: record receipt − publish time over the idle minute, per
 *   agent (GET /v1/mesh): median of the agents' p50, max of their p99;
 * - idle CPU (utime+stime over the idle window, % of one core; election servers and clients apart), RSS and PSS
 *   per agent — built agents as installed (the bundle, agent/node-flags.ts;
 *   build=unbundled runs the compiled modules instead, the previous build) —
 *   with an agent whose mesh is disabled as the baseline in the same run;
 * - detection: SIGKILL one agent, then SIGSTOP another; time until the last
 *   other agent logged it dead (and suspect first, for SIGSTOP); then SIGCONT
 *   and the time until every agent sees it alive again (refutation).
 *
 * - connections and neighbors per agent at the end of the idle window;
 * - bytes written per second per agent over the idle window (wchar of
 *   /proc/<pid>/io: the agents' socket writes, plus a few log lines).
 *
 * Goals (issue 6): detect SIGKILL < 1 s and SIGSTOP < 5 s at 20 agents,
 * converge < 3 s, idle < 5 % of a core and < 120 MB per agent. Goals at 100
 * agents (issue 20): all members seen within 15 s, SIGKILL seen by all within
 * 3 s, idle <= 0.5 % of a core and <= 80 MB per agent, connections <= the
 * bound. Anchor: Serf/memberlist LAN defaults detect in ~6-7 s and converge in ~2 s.
 */
import { existsSync, readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestMesh, type MeshAgent } from '../helpers/test-mesh.ts'
import { spawnAgent, tempDir, type SpawnOptions } from '../helpers/agent-process.ts'
import { MiB, processCpuSeconds, processRssBytes } from './bench-stats.ts'

const sizes = (process.argv[2] ?? '10,25,50').split(',').map(Number)
const idleS = Number(process.argv[3] ?? 30)
const servers = Number(process.argv[4] ?? 3)
const builds = (process.argv[5] ?? 'bundle').split(',')
const views = (process.argv[6] ?? '12,1024').split(',').map(Number)
const rounds = Number(process.argv[7] ?? 1)
/** What spawnAgent runs for a build named on the command line. */
function builtOf (build: string): SpawnOptions['built'] {
  if (build === 'bundle') return true
  if (build === 'unbundled') return 'unbundled'
  if (!existsSync(build)) throw new Error(`build ${build}: bundle, unbundled or the path of an agentd entry point`)
  return { entry: resolve(build) }
}

interface LogLine { time: string, msg: string, peer?: string, to?: string, peerId?: string }
const lines = (a: { output(): string }): LogLine[] => a.output().split('\n').filter(l => l.startsWith('{')).map(l => JSON.parse(l) as LogLine)
const ms = (iso: string): number => Date.parse(iso)
const rssMiB = (pid: number): number => processRssBytes(pid) / MiB
/** Proportional set size: the Node.js binary's text (~55 MB of RSS) is shared by every agent on a host. */
const pssMiB = (pid: number): number => Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))![1]) / 1024
/** Bytes the process passed to write() and friends so far (sockets, pipes, files). */
const writtenBytes = (pid: number): number => Number(/^wchar:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))![1])
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const round = (x: number, d = 1): number => Math.round(x * 10 ** d) / 10 ** d

/** When each observer logged `peer` entering `state` (after `sinceMs`); waits up to timeoutMs for all. */
async function loggedAt (observers: MeshAgent[], peer: string, state: string, sinceMs: number, timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const times = observers.map(o => lines(o).find(l => l.msg === 'member state' && l.peer === peer && l.to === state && ms(l.time) >= sinceMs))
    if (times.every(x => x !== undefined) || Date.now() > deadline) return times.map(x => x === undefined ? NaN : ms(x.time))
    await sleep(50)
  }
}

async function run (n: number, maxPeers: number, build: string): Promise<Record<string, unknown>> {
  const built = builtOf(build)
  const teardowns: Array<() => unknown> = []
  const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
  try {
    const mesh = await startTestMesh(t, { nodes: n, convergeTimeoutMs: 60_000 + 4000 * n, built, args: ['--set', `mesh.maxPeers=${maxPeers}`], ...(servers > 0 ? { clusterServers: Math.min(servers, n) } : {}) })
    const baselineDir = tempDir(t)
    const baseline = await spawnAgent(t, { stateDir: baselineDir, built, args: ['--dev', '--state-dir', baselineDir, '--set', 'state.enabled=false', '--set', 'mesh.enabled=false'] })
    const agents = mesh.agents
    /** The first `voters` agents are the election servers (startTestMesh's clusterServers). */
    const voters = servers > 0 ? Math.min(servers, n) : 0

    const lastStart = Math.max(...agents.map(a => ms(lines(a).find(l => l.msg === 'mesh started')!.time)))
    const learned = agents.map(a => Math.max(...agents.filter(b => b !== a).map(b => ms(lines(a).find(l => l.msg === 'member state' && l.peer === b.peerId && l.to === 'alive')!.time))))
    const convergenceMs = Math.max(...learned) - lastStart

    const pids = [...agents.map(a => a.proc.pid!), baseline.proc.pid!]
    await sleep(5000)
    const before = pids.map(processCpuSeconds)
    const writtenBefore = pids.map(writtenBytes)
    const idleBegan = performance.now()
    await sleep(idleS * 1000)
    const seconds = (performance.now() - idleBegan) / 1000
    const cpu = pids.map((p, i) => (processCpuSeconds(p) - before[i]!) / seconds * 100)
    const written = pids.map((p, i) => (writtenBytes(p) - writtenBefore[i]!) / seconds)
    const rss = pids.map(rssMiB)
    const pss = pids.map(pssMiB)
    const infos = await Promise.all(agents.map(a => a.client.mesh({ idleTimeoutMs: 60_000 })))
    const p50s = infos.map(i => i.dissemination.p50Ms ?? NaN)
    const p99s = infos.map(i => i.dissemination.p99Ms ?? NaN)

    const killed = agents[n - 1]!
    const others = agents.filter(a => a !== killed)
    const killAt = Date.now()
    killed.proc.kill('SIGKILL')
    const killDead = await loggedAt(others, killed.peerId, 'dead', killAt, 15_000)

    const frozen = agents[1]!
    const rest = others.filter(a => a !== frozen)
    const stopAt = Date.now()
    frozen.proc.kill('SIGSTOP')
    const stopDead = await loggedAt(rest, frozen.peerId, 'dead', stopAt, 30_000)
    const stopSuspect = rest.map(o => lines(o).find(l => l.msg === 'member state' && l.peer === frozen.peerId && (l.to === 'suspect' || l.to === 'dead') && ms(l.time) >= stopAt))
    const contAt = Date.now()
    frozen.proc.kill('SIGCONT')
    const alive = await loggedAt(rest, frozen.peerId, 'alive', contAt, 30_000)

    const delays = (xs: number[], from: number): number[] => xs.map(x => x - from)
    /** Of the observers, how many logged it within the wait (a NaN max / median means not all did). */
    const seenBy = (xs: number[]): string => `${xs.filter(x => !Number.isNaN(x)).length}/${xs.length}`
    const medianOfSeen = (xs: number[], from: number): number => median(delays(xs, from).filter(x => !Number.isNaN(x)))
    const perAgent = (xs: number[], d = 1): { median: number, max: number } => ({ median: round(median(xs), d), max: round(Math.max(...xs), d) })
    return {
      agents: n,
      maxPeers,
      view: maxPeers >= 3 * (n - 1) ? 'full mesh' : 'bounded',
      build,
      electionServers: servers > 0 ? Math.min(servers, n) : 'every agent leads itself (--dev)',
      convergenceMs: Math.round(convergenceMs),
      disseminationMs: { p50MedianOfAgents: round(median(p50s)), p99MaxOfAgents: round(Math.max(...p99s)), samplesPerAgent: median(infos.map(i => i.dissemination.samples)) },
      idlePerAgent: {
        windowS: round(seconds),
        cpuPercentOfCore: { median: round(median(cpu.slice(0, -1)), 2), max: round(Math.max(...cpu.slice(0, -1)), 2) },
        ...(voters > 0 && voters < n ? { serversCpuPercentOfCore: round(median(cpu.slice(0, voters)), 2), clientsCpuPercentOfCore: round(median(cpu.slice(voters, n)), 2) } : {}),
        rssMiB: { median: round(median(rss.slice(0, -1))), max: round(Math.max(...rss.slice(0, -1))) },
        pssMiB: { median: round(median(pss.slice(0, -1))), max: round(Math.max(...pss.slice(0, -1))) },
        writtenBytesPerS: perAgent(written.slice(0, -1), 0),
        baselineAgentWithoutMesh: { cpuPercentOfCore: round(cpu.at(-1)!, 2), rssMiB: round(rss.at(-1)!), pssMiB: round(pss.at(-1)!), writtenBytesPerS: round(written.at(-1)!, 0) },
      },
      connectionsPerAgent: perAgent(infos.map(i => i.connections), 0),
      neighborsPerAgent: perAgent(infos.map(i => i.neighbors.outbound + i.neighbors.inbound), 0),
      sigkill: { detectedByAllMs: Math.max(...delays(killDead, killAt)), medianMs: medianOfSeen(killDead, killAt), seenBy: seenBy(killDead) },
      sigstop: {
        firstSuspectMs: Math.min(...stopSuspect.map(l => l === undefined ? NaN : ms(l.time) - stopAt)),
        deadByAllMs: Math.max(...delays(stopDead, stopAt)),
        medianDeadMs: medianOfSeen(stopDead, stopAt),
        deadSeenBy: seenBy(stopDead),
        sigcontAliveAgainByAllMs: Math.max(...delays(alive, contAt)),
        aliveSeenBy: seenBy(alive),
      },
    }
  } finally {
    for (const fn of teardowns.reverse()) await fn()
  }
}

const results: Array<Record<string, any>> = []
for (const n of sizes) {
  for (const maxPeers of views) {
    for (let r = 0; r < rounds; r++) {
      for (const build of builds) {
        results.push(await run(n, maxPeers, build))
        console.log(JSON.stringify(results.at(-1), null, 2))
      }
    }
  }
}
console.log('\nagents maxPeers view       converge  SIGKILL-all  SIGSTOP-dead-all  idle-cpu%(median)  rss-MiB(median)  connections(median/max)  written-B/s(median)')
for (const r of results) {
  const i = r.idlePerAgent
  console.log(`${String(r.agents).padEnd(6)} ${String(r.maxPeers).padEnd(8)} ${String(r.view).padEnd(10)} ${String(r.convergenceMs).padStart(6)} ms ${String(r.sigkill.detectedByAllMs).padStart(8)} ms ${String(r.sigstop.deadByAllMs).padStart(12)} ms ${String(i.cpuPercentOfCore.median).padStart(12)} ${String(i.rssMiB.median).padStart(14)} ${String(r.connectionsPerAgent.median).padStart(14)}/${r.connectionsPerAgent.max} ${String(i.writtenBytesPerS.median).padStart(16)}  ${r.build}`)
}
// Idle CPU by build and role: the median over the rounds of each round's per-agent median.
for (const n of sizes) {
  for (const maxPeers of views) {
    for (const build of builds) {
      const runs = results.filter(r => r.agents === n && r.maxPeers === maxPeers && r.build === build).map(r => r.idlePerAgent)
      if (runs[0]?.serversCpuPercentOfCore === undefined) continue
      const of = (key: string): string => `median ${round(median(runs.map(i => i[key] as number)), 2)} %  [${runs.map(i => i[key]).join(', ')}]`
      console.log(`idle CPU ${n} agents maxPeers ${maxPeers} ${build}: servers ${of('serversCpuPercentOfCore')}  clients ${of('clientsCpuPercentOfCore')}`)
    }
  }
}
