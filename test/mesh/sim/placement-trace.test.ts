import t from 'tap'
import { generatePlacementTrace, parsePlacementTrace } from '../../../mesh/sim/placement-trace.ts'

const valid = () => ({
  cluster: { nodes: 4, gpusPerNode: 8 },
  jobs: [{ id: 'a', submitS: 0, nodes: 2, periodS: 100, iterations: 3, segments: [{ offsetS: 50, durationS: 20 }, { offsetS: 75, durationS: 20 }], maxSlowdown: 1.3 }],
})

t.test('a valid trace parses from text or value', async t => {
  t.same(parsePlacementTrace(JSON.stringify(valid())), valid())
  t.same(parsePlacementTrace(valid()), valid())
})

t.test('bad traces are rejected with ERR_TRACE_INVALID naming the field', async t => {
  const cases: Array<[string, (v: any) => void, RegExp]> = [
    ['not JSON', () => {}, /is not JSON/],
    ['negative duration', v => { v.jobs[0].segments[0].durationS = -1 }, /jobs\[0\]\.segments\[0\]\.durationS/],
    ['misspelt key', v => { v.jobs[0].maxSlowdwn = 1.2; delete v.jobs[0].maxSlowdown }, /maxSlowdwn: Unexpected property, got 1\.2; did you mean "maxSlowdown"/],
    ['overlapping segments', v => { v.jobs[0].segments[1].offsetS = 60 }, /jobs\[0\]\.segments\[1\]\.offsetS: starts at 60 s, before the previous segment ends at 70 s/],
    ['segment past the period', v => { v.jobs[0].segments[1].durationS = 30 }, /jobs\[0\]\.segments\[1\]: ends at 105 s, after the 100 s period/],
    ['gang too wide', v => { v.jobs[0].nodes = 5 }, /jobs\[0\]\.nodes: needs 5 nodes, the cluster has 4/],
    ['duplicate id', v => { v.jobs.push({ ...v.jobs[0] }) }, /jobs\[1\]\.id: duplicate job id "a"/],
    ['slowdown below 1', v => { v.jobs[0].maxSlowdown = 0.9 }, /jobs\[0\]\.maxSlowdown/],
    ['no jobs', v => { v.jobs = [] }, /jobs: /],
  ]
  for (const [name, mutate, message] of cases) {
    const v = valid()
    mutate(v)
    const input = name === 'not JSON' ? '{ nope' : JSON.stringify(v)
    t.throws(() => parsePlacementTrace(input, 'trace.json'), { code: 'ERR_TRACE_INVALID', message }, name)
  }
})

t.test('touching segments written in decimal are accepted; a real overlap of a millisecond is not', async t => {
  // 100.2 + 19.62 is 119.82000000000001 in binary floating point: the segments touch.
  const touching = { ...valid().jobs[0]!, periodS: 200, segments: [{ offsetS: 100.2, durationS: 19.62 }, { offsetS: 119.82, durationS: 72.68 }, { offsetS: 192.5, durationS: 7.5 }] }
  t.ok(100.2 + 19.62 > 119.82, 'the sum really lands past the decimal offset')
  const trace = { cluster: valid().cluster, jobs: [touching] }
  t.same(parsePlacementTrace(JSON.stringify(trace)), trace, 'touching segments ending exactly at the period parse')
  const overlap = { cluster: valid().cluster, jobs: [{ ...touching, segments: [{ offsetS: 100.2, durationS: 19.62 }, { offsetS: 119.819, durationS: 20 }] }] }
  t.throws(() => parsePlacementTrace(overlap), { code: 'ERR_TRACE_INVALID', message: /segments\[1\]\.offsetS: starts at 119\.819 s, before the previous segment ends at 119\.82/ })
  const past = { cluster: valid().cluster, jobs: [{ ...touching, periodS: 199.999 }] }
  t.throws(() => parsePlacementTrace(past), { code: 'ERR_TRACE_INVALID', message: /segments\[2\]: ends at 200 s, after the 199\.999 s period/ })
})

t.test('generated traces are valid, deterministic per seed and shaped like PlexRL\'s workloads', async t => {
  const a = generatePlacementTrace({ jobs: 300, nodes: 32, seed: 7 })
  t.same(a, generatePlacementTrace({ jobs: 300, nodes: 32, seed: 7 }))
  t.notSame(a, generatePlacementTrace({ jobs: 300, nodes: 32, seed: 8 }))
  t.same(parsePlacementTrace(JSON.stringify(a)), a)
  t.equal(a.jobs.length, 300)
  const bubbles = a.jobs.map(j => 1 - j.segments.reduce((s, x) => s + x.durationS, 0) / j.periodS)
  t.ok(bubbles.every(b => b > 0.66 && b < 0.84), 'bubble ratios 70-80 % (with the gap between segments)')
  t.ok(new Set(a.jobs.map(j => j.nodes)).size >= 3, 'mixed gang sizes')
  t.ok(a.jobs.some(j => j.profiled === false) && a.jobs.some(j => j.profiled === true), 'cold and warm starts')
  t.ok(a.jobs.every((j, i) => i === 0 || j.submitS >= a.jobs[i - 1]!.submitS), 'submissions in order')
  t.ok(generatePlacementTrace({ jobs: 20, nodes: 2, seed: 1 }).jobs.every(j => j.nodes <= 2), 'gangs fit a small cluster')
  t.throws(() => generatePlacementTrace({ jobs: 0, nodes: 2, seed: 1 }), RangeError)
})

t.test('generator options: one bound for every job, log-prob/update/sync back to back, uniform gangs', async t => {
  const trace = generatePlacementTrace({ jobs: 200, nodes: 6, seed: 4, maxSlowdown: 1.25, segments: 'back-to-back', gangs: { min: 1, max: 8 } })
  t.same(parsePlacementTrace(JSON.stringify(trace)), trace, 'valid, touching segments included')
  t.ok(trace.jobs.every(j => j.maxSlowdown === 1.25), 'one bound')
  t.ok(trace.jobs.every(j => j.segments.length === 3 && j.segments.every((s, i) => i === 0 || Math.abs(j.segments[i - 1]!.offsetS + j.segments[i - 1]!.durationS - s.offsetS) < 0.011)), 'three segments, each starting where the previous ends')
  t.ok(trace.jobs.every(j => Math.abs(j.segments[2]!.offsetS + j.segments[2]!.durationS - j.periodS) < 0.011), 'sync ends the period')
  t.same([...new Set(trace.jobs.map(j => j.nodes))].sort(), [1, 2, 3, 4, 5, 6], 'gangs 1-8 capped at the 6-node cluster')
  t.same(generatePlacementTrace({ jobs: 50, nodes: 32, seed: 4 }).jobs.map(j => j.submitS), generatePlacementTrace({ jobs: 50, nodes: 32, seed: 4, maxSlowdown: 2 }).jobs.map(j => j.submitS), 'a fixed bound draws the same jobs')
  t.throws(() => generatePlacementTrace({ jobs: 1, nodes: 1, seed: 1, gangs: { min: 3, max: 2 } }), RangeError)
  t.throws(() => generatePlacementTrace({ jobs: 1, nodes: 1, seed: 1, maxSlowdown: 0.9 }), RangeError)
})
