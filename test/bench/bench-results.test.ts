import t from 'tap'
import { compareRuns, direction, formatComparison, formatRun, parseJsonMetrics, parseMetrics, parseTextMetrics, type BenchResult, type BenchRun } from './bench-results.ts'

const figures = (lines: string[]): Array<[string, number, string]> => parseTextMetrics(lines).map(m => [m.key, m.value, m.unit])

t.test('median and pNN figures of the benches\' human lines, keyed by label and statistic', async t => {
  t.same(figures([
    'offload: POST /v1/state/offload                median 3.21 GB/s  [3.10, 3.21, 3.40]  ratio 0.912',
    'latency GET /healthz (baseline)            p50 37 us  p99 80 us',
    'place one job (spread-backfill ) median 1.23 ms (cpu 0.50 ms)  p90 2.00 ms  max 3 ms',
    'distrs       16000 requests  wall median 12.3 ms  cpu median 10.1 ms  ',
    'full pull S=4: median 1.20 GB/s [1.1, 1.2]; iperf3 -P 4: median 2.50 GB/s [2.4, 2.5]; ratio 0.480',
    'live  submit → acknowledged (decision published)   median 4.56 ms, max 9.10 ms',
  ]), [
    ['offload: POST /v1/state/offload median', 3.21, 'GB/s'],
    ['latency GET /healthz (baseline) p50', 37, 'us'],
    ['latency GET /healthz (baseline) p99', 80, 'us'],
    ['place one job (spread-backfill ) median', 1.23, 'ms'],
    ['place one job (spread-backfill ) p90', 2, 'ms'],
    ['distrs 16000 requests wall median', 12.3, 'ms'],
    ['distrs 16000 requests wall cpu median', 10.1, 'ms'],
    ['full pull S=4 median', 1.2, 'GB/s'],
    ['full pull S=4 iperf3 -P 4 median', 2.5, 'GB/s'],
    ['live submit → acknowledged (decision published) median', 4.56, 'ms'],
  ])
})

t.test('keys do not move with the measured values; lines without a number after the statistic are left alone', async t => {
  const keys = (line: string): string[] => parseTextMetrics([line]).map(m => m.key)
  t.same(keys('seed 1 sb κ=0.5            ratio 0.612  over bound   3.2 %  worst 1.40  queue delay p50  0.12 p90  0.80'),
    keys('seed 1 sb κ=0.5            ratio 0.598  over bound  11.0 %  worst 2.10  queue delay p50  0.15 p90  0.95'))
  t.same(figures(['this build  via leader    p50 3.1 ms  p99 9.8 ms  (per-run medians 3.0, 3.2, 3.1)']),
    [['this build via leader p50', 3.1, 'ms'], ['this build via leader p99', 9.8, 'ms']], '"medians" is not "median"')
  t.same(figures(['median HRRS/FCFS context switches 0.646, mean task wait 0.802']), [])
  t.same(figures(['x median 1 ms', 'x median 2 ms']).map(f => f[0]), ['x median', 'x median #2'], 'a repeated key is numbered')
})

t.test('a bench that prints one JSON object: numeric median / pNN fields by path, unit from the name', async t => {
  const lines = JSON.stringify({
    runs: 7,
    bundle: { startMedianMs: 412, startAllMs: [400, 412], idleRssMedianMiB: 71.5 },
    handoffP99Us: 5632,
    handoffToHealthzMedianRatio: 1.71,
  }, null, 2).split('\n')
  t.same(parseJsonMetrics(lines).map(m => [m.key, m.value, m.unit]), [
    ['bundle.startMedianMs', 412, 'ms'],
    ['bundle.idleRssMedianMiB', 71.5, 'MiB'],
    ['handoffP99Us', 5632, 'us'],
    ['handoffToHealthzMedianRatio', 1.71, ''],
  ])
  t.same(parseJsonMetrics(['{ not json', '}']), [], 'unparsable output is no figures, not an error')
  t.equal(parseMetrics(['{', '"aMedianMs": 1', '}', 'b median 2 s']).length, 2, 'both kinds from one output')
})

t.test('direction of a unit', async t => {
  t.equal(direction('GB/s'), 'higher')
  t.equal(direction('ms'), 'lower')
  t.equal(direction('MiB'), 'lower')
  t.equal(direction(''), 'unknown')
  t.equal(direction('x'), 'unknown')
})

const bench = (name: string, metrics: Array<[string, number, string]>, status: BenchResult['status'] = 'ok'): BenchResult =>
  ({ name, status, exitCode: status === 'ok' ? 0 : 1, durationS: 1, output: [], metrics: metrics.map(([key, value, unit]) => ({ key, value, unit })) })
const run = (benches: BenchResult[], startedAt = '2026-01-01T00:00:00.000Z'): BenchRun =>
  ({ startedAt, commit: 'abc1234', node: 'v26.0.0', host: 'h', cpus: 2, filter: [], benches })

t.test('compareRuns: within the threshold is the same; beyond it better or worse by the unit, changed without one', async t => {
  const before = run([
    bench('weights', [['pull median', 2.0, 'GB/s'], ['publish median', 1.0, 's'], ['ratio p50', 1.0, ''], ['steady median', 10, 'ms'], ['old median', 5, 'ms']]),
    bench('state', [['offload median', 3, 'GB/s']]),
    bench('only-before', [['x median', 1, 'ms']]),
  ])
  const after = run([
    bench('weights', [['pull median', 1.5, 'GB/s'], ['publish median', 0.8, 's'], ['ratio p50', 1.5, ''], ['steady median', 10.9, 'ms'], ['added median', 7, 'ms']]),
    bench('state', [], 'failed'),
    bench('fresh', [['y median', 1, 'ms']]),
  ], '2026-01-02T00:00:00.000Z')
  const comparison = compareRuns(before, after, 10)
  t.same(comparison.benches.map(b => b.bench), ['weights', 'state', 'fresh'], 'only benches of the current run')
  t.same(comparison.benches[0]!.metrics.map(m => [m.key, m.verdict, m.changePct === undefined ? undefined : Math.round(m.changePct)]), [
    ['pull median', 'worse', -25],
    ['publish median', 'better', -20],
    ['ratio p50', 'changed', 50],
    ['steady median', 'same', 9],
    ['added median', 'new', undefined],
    ['old median', 'gone', undefined],
  ])
  t.same(comparison.benches[2]!.metrics.map(m => m.verdict), ['new'], 'a bench that did not run before: every figure new')
  t.same(comparison.regressions, ['weights: pull median 2 → 1.5 GB/s', 'state: was ok, now failed'])

  const text = formatComparison(comparison)
  t.match(text, /compared with 2026-01-01T00:00:00.000Z \(abc1234\)/)
  t.match(text, /weights: pull median\s+GB\/s\s+2\s+1\.5\s+-25\.0%\s+worse/)
  t.notMatch(text, /steady median/, 'unchanged figures are left out')
  t.match(formatComparison(comparison, { all: true }), /steady median/)
  t.match(formatComparison(comparison, { all: true }), /8 figures, 9 differences/, 'counts figures and status changes that differ, shown or not')
  t.match(text, /8 figures, 9 differences/)
  t.match(text, /REGRESSIONS \(2/)
})

t.test('compareRuns: a previous value of 0 and a stricter threshold', async t => {
  const comparison = compareRuns(run([bench('b', [['z p50', 0, 'ms'], ['w p50', 100, 'ms']])]), run([bench('b', [['z p50', 1, 'ms'], ['w p50', 104, 'ms']])]), 3)
  t.same(comparison.benches[0]!.metrics.map(m => [m.key, m.verdict, m.changePct]), [['z p50', 'worse', undefined], ['w p50', 'worse', 4]])
  t.match(formatComparison(compareRuns(run([bench('b', [])]), run([bench('b', [])]))), /no regressions/)
})

t.test('formatRun: one row per bench with its status and reason', async t => {
  const text = formatRun(run([bench('a', [['m median', 1, 'ms']]), { ...bench('b', []), status: 'not-run', reason: 'needs fio (not on PATH)', exitCode: null }]))
  t.match(text, /^bench\s+status\s+exit\s+seconds\s+figures$/m)
  t.match(text, /^a\s+ok\s+0\s+1\.0\s+1$/m)
  t.match(text, /^b\s+not-run: needs fio \(not on PATH\)\s+-\s+0?1\.0\s+0$/m)
})
