/**
 * The long Jepsen-style run (test/helpers/jepsen.ts): 5 servers in network
 * namespaces, clients submitting through every agent, the whole nemesis
 * schedule `--rounds` times per seed (flapping for 30 s), then the checker.
 * Prints per seed and in all: partitions, acknowledged submissions, lost
 * (goal 0), phantoms, identical tables, convergence after each heal (p50,
 * max), leader changes, submit latency of acknowledged submissions. Needs root.
 *
 *   node_modules/.bin/node test/bench/jepsen.bench.ts [--seeds 3] [--rounds 2]
 */
import { parseArgs } from 'node:util'
import { netnsSkipReason } from '../helpers/netns-lab.ts'
import { nemesisKinds, runJepsen, startJepsenCluster, type JepsenResult } from '../helpers/jepsen.ts'
import { median, percentile } from './bench-stats.ts'

const { values } = parseArgs({ options: { seeds: { type: 'string', default: '3' }, rounds: { type: 'string', default: '2' } } })
const skip = await netnsSkipReason()
if (skip !== false) { console.log(`jepsen bench not run: ${skip}`); process.exit(0) }

const all: JepsenResult[] = []
for (let seed = 1; seed <= Number(values.seeds); seed++) {
  const teardowns: Array<() => unknown> = []
  try {
    const { lab, cluster } = await startJepsenCluster({ teardown: fn => { teardowns.push(fn) } }, 5)
    const schedule = Array.from({ length: Number(values.rounds) }, () => nemesisKinds).flat()
    const r = await runJepsen(lab, cluster, { seed, schedule, flapForMs: 30_000, maxSubmissions: 400 })
    all.push(r)
    const lost = Object.values(r.lost).flat().length
    console.log(`seed ${seed}: ${r.partitions} partitions, ${r.faults.length} faults, ${r.attempted} submitted, ${r.acknowledged} acknowledged, lost ${lost}, phantom ${r.phantom.length}, tables identical ${r.tablesIdentical}, ` +
      `violations ${r.violations.length}, convergence p50 ${median(r.convergenceMs).toFixed(0)} ms max ${Math.max(...r.convergenceMs).toFixed(0)} ms, leader changes ${r.leaderChanges}, refused ${JSON.stringify(r.refused)}`)
  } finally {
    for (const fn of teardowns.reverse()) await fn()
  }
}
const convergence = all.flatMap(r => r.convergenceMs)
const submit = all.flatMap(r => r.submitMs)
console.log(`all: ${all.reduce((n, r) => n + r.partitions, 0)} partitions, ${all.reduce((n, r) => n + r.acknowledged, 0)} acknowledged, ` +
  `lost ${all.reduce((n, r) => n + Object.values(r.lost).flat().length, 0)}, phantom ${all.reduce((n, r) => n + r.phantom.length, 0)}, ` +
  `runs with differing tables ${all.filter(r => !r.tablesIdentical).length}, invariant violations ${all.reduce((n, r) => n + r.violations.length, 0)}`)
console.log(`convergence after a heal: p50 ${median(convergence).toFixed(0)} ms, max ${Math.max(...convergence).toFixed(0)} ms (${convergence.length} heals)`)
console.log(`acknowledged submit latency under faults: p50 ${percentile(submit, 50).toFixed(0)} ms, p99 ${percentile(submit, 99).toFixed(0)} ms`)
