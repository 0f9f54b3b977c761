/**
 * The mesh's membership at 256 to 4096 agents, simulated (mesh/membership/membership-sim.ts: the agent's
 * own membership table, failure detector and neighbor set on a simulated clock and network):
 *
 *   node --max-old-space-size=16384 test/bench/membership-sim.bench.ts [sizes=256,1024,4096] [loss=0.01] [seed=1] [fullMeshUpTo=256] [stops=sigkill,silent]
 *
 * Per size: convergence after the last start, detection of a SIGKILLed agent and of a frozen one
 * (SIGSTOP: only suspicion finds it; each stop is its own run, `stops` picks them: at 4096 agents a
 * run takes about 10 minutes on one core), suspicions and deaths of running agents, and messages and
 * bytes sent per agent per second in the steady state (median over agents). The per-agent figures
 * should stay flat as N grows. Baseline in the same run: the full mesh (maxPeers = 3 × N, every agent
 * every other's neighbor, as before the bounded view) up to fullMeshUpTo agents (beyond it the full
 * mesh's N² links do not fit the simulation).
 */
import { runMembershipSim, type MembershipSimResult } from '../../mesh/membership/membership-sim.ts'

const sizes = (process.argv[2] ?? '256,1024,4096').split(',').map(Number)
const loss = Number(process.argv[3] ?? 0.01)
const seed = Number(process.argv[4] ?? 1)
const fullMeshUpTo = Number(process.argv[5] ?? 256)
const stops = (process.argv[6] ?? 'sigkill,silent').split(',')
if (stops.some(s => s !== 'sigkill' && s !== 'silent')) throw new Error(`stops must be sigkill and/or silent, got ${process.argv[6]}`)

const fmt = (x: number | null, d = 2): string => x === null ? '-' : x.toFixed(d)
const rows: string[] = []
for (const n of sizes) {
  const views: Array<[string, number]> = [['bounded', 12], ...(n <= fullMeshUpTo ? [['full mesh', 3 * n] as [string, number]] : [])]
  for (const [view, maxPeers] of views) {
    // Joins spread over 10 s per 1000 agents (at least 10 s), as a cluster's agents start under systemd.
    const common = { nodes: n, seed, loss, joinSpreadS: Math.max(10, n / 100), steadyS: 20, mesh: { maxPeers } }
    const label = `${String(n).padStart(5)} agents ${view.padEnd(9)} loss ${loss}`
    const parts: string[] = []
    let steady: MembershipSimResult | undefined
    let events = 0
    let wallS = 0
    for (const stop of stops) {
      const r = await runMembershipSim({ ...common, killMode: stop as 'sigkill' | 'silent', afterKillS: stop === 'sigkill' ? 15 : 40 })
      steady ??= r
      events += r.events
      wallS += r.wallS
      parts.push(`${stop === 'sigkill' ? 'SIGKILL' : 'SIGSTOP'} dead at all ${fmt(r.detection.allS, 3)} s (missed ${r.detection.missed}), false suspicions ${r.falseSuspicions}, false deaths ${r.falseDeaths}`)
    }
    const p = steady!.perAgent
    const line = `${label}: converge ${fmt(steady!.convergenceS)} s; ${parts.join('; ')}; ` +
      `messages/agent/s median ${p.messagesSentPerS.median.toFixed(1)} (max ${p.messagesSentPerS.max.toFixed(1)}); ` +
      `bytes/agent/s median ${Math.round(p.bytesSentPerS.median)} B (max ${Math.round(p.bytesSentPerS.max)}); neighbors median ${p.neighbors.median} (max ${p.neighbors.max}); ` +
      `${events} events in ${wallS.toFixed(0)} s`
    console.log(line)
    rows.push(line)
  }
}
console.log(`\nsummary (seed ${seed}, loss ${loss}):`)
for (const r of rows) console.log(r)
