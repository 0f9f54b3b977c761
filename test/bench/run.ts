/**
 * `npm run bench [-- FILTER…] [--threshold PCT] [--all] [--timeout-s S] [--results-dir DIR]`
 *
 * Runs every `test/bench/*.bench.ts` whose name contains one of the filters
 * (all without a filter), one after another, each with this Node.js and no
 * arguments (its defaults), with the run's results directory as working
 * directory (where a bench writes files, e.g. mesh-profile's CPU profile).
 * Output is shown as it comes and captured. Writes
 * `DIR/<timestamp>/results.json` (per bench: name, status, exit code,
 * duration, output lines, the median / pNN figures parsed from them) and
 * `summary.txt` (the table, and the comparison with the newest earlier run
 * in DIR that ran one of the same benches). Exits 1 when a bench failed or timed out;
 * regressions are reported, not fatal (benchmarks are noisy).
 *
 * A bench that cannot run here says so instead of failing: a
 * `// bench-requires: TOOL… (why)` line (commands on PATH, or `root`) is checked
 * before it starts, and a bench that checks for itself prints
 * "… not run: REASON" and exits 0.
 */
import { spawn, execFileSync } from 'node:child_process'
import { accessSync, constants, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { cpus, hostname } from 'node:os'
import { delimiter, dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { compareRuns, formatComparison, formatRun, parseMetrics, type BenchResult, type BenchRun } from './bench-results.ts'

const benchDir = dirname(fileURLToPath(import.meta.url))
const repo = resolve(benchDir, '../..')

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    threshold: { type: 'string', default: '10' },
    /** List every compared figure, not only those beyond the threshold. */
    all: { type: 'boolean', default: false },
    'timeout-s': { type: 'string', default: '1800' },
    'results-dir': { type: 'string', default: join(repo, 'bench-results') },
  },
})
const thresholdPct = Number(values.threshold)
const timeoutMs = Number(values['timeout-s']) * 1000
const resultsRoot = resolve(values['results-dir'])

const names = readdirSync(benchDir).filter(f => f.endsWith('.bench.ts')).map(f => f.slice(0, -'.bench.ts'.length)).sort()
const selected = positionals.length === 0 ? names : names.filter(n => positionals.some(p => n.includes(p)))
if (selected.length === 0) {
  console.error(`no bench matches ${positionals.join(', ')}; benches: ${names.join(', ')}`)
  process.exit(2)
}

/** A command found on PATH (or an executable path). */
function onPath (command: string): boolean {
  const candidates = command.includes('/') ? [command] : (process.env.PATH ?? '').split(delimiter).map(d => join(d, command))
  return candidates.some(c => { try { accessSync(c, constants.X_OK); return true } catch { return false } })
}

/** Why a bench cannot run here, from its `// bench-requires:` line; undefined when it can. */
function missingRequirement (file: string): string | undefined {
  // The names before any parenthesised note: `// bench-requires: fio iperf3 (why)`.
  const line = /^\/\/ bench-requires:([^(\n]*)/m.exec(readFileSync(file, 'utf8'))?.[1] ?? ''
  for (const need of line.split(/[\s,]+/).filter(n => n !== '')) {
    if (need === 'root' && process.getuid?.() !== 0) return 'needs root'
    if (need !== 'root' && !onPath(need)) return `needs ${need} (not on PATH)`
  }
  return undefined
}

function gitCommit (): string {
  try {
    return execFileSync('git', ['describe', '--always', '--dirty'], { cwd: repo, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  } catch {
    return ''
  }
}

async function runBench (name: string, cwd: string): Promise<BenchResult> {
  const file = join(benchDir, `${name}.bench.ts`)
  const missing = missingRequirement(file)
  if (missing !== undefined) {
    console.log(`${name}: not run: ${missing}`)
    return { name, status: 'not-run', reason: missing, exitCode: null, durationS: 0, output: [], metrics: [] }
  }
  const began = performance.now()
  const child = spawn(process.execPath, [file], { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
  const output: string[] = []
  const collect = (stream: NodeJS.ReadableStream, echo: NodeJS.WritableStream): void => {
    let pending = ''
    stream.setEncoding('utf8')
    stream.on('data', (chunk: string) => {
      echo.write(chunk)
      const parts = (pending + chunk).split('\n')
      pending = parts.pop()!
      output.push(...parts)
    })
    stream.on('end', () => { if (pending !== '') output.push(pending) })
  }
  collect(child.stdout, process.stdout)
  collect(child.stderr, process.stderr)
  let timedOut = false
  const timer = setTimeout(() => { timedOut = true; child.kill('SIGTERM') }, timeoutMs)
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>(resolve => child.on('close', (c, s) => resolve([c, s])))
  clearTimeout(timer)
  const durationS = Math.round((performance.now() - began) / 100) / 10
  const metrics = parseMetrics(output)
  const notRun = code === 0 && metrics.length === 0 ? output.map(l => /\bnot run: (.*)$/.exec(l)?.[1]).find(r => r !== undefined) : undefined
  const base = { name, exitCode: code, durationS, output, metrics }
  if (timedOut) return { ...base, status: 'timed-out', reason: `killed after ${timeoutMs / 1000} s` }
  if (code !== 0) return { ...base, status: 'failed', reason: signal !== null ? `signal ${signal}` : `exit ${code}` }
  if (notRun !== undefined) return { ...base, status: 'not-run', reason: notRun }
  return { ...base, status: 'ok' }
}

/**
 * The newest earlier run in resultsRoot whose results.json has one of the
 * selected benches (directory names sort by time), so a filtered run compares
 * with the last run of the same benches.
 */
function previousRun (current: string): BenchRun | undefined {
  if (!existsSync(resultsRoot)) return undefined
  const earlier = readdirSync(resultsRoot).filter(d => d < current && existsSync(join(resultsRoot, d, 'results.json'))).sort().reverse()
  for (const dir of earlier) {
    const run = JSON.parse(readFileSync(join(resultsRoot, dir, 'results.json'), 'utf8')) as BenchRun
    if (run.benches.some(b => selected.includes(b.name))) return run
  }
  return undefined
}

const startedAt = new Date().toISOString()
const runName = startedAt.replace(/:/g, '-').replace(/\.\d+Z$/, 'Z')
const runDir = join(resultsRoot, runName)
mkdirSync(runDir, { recursive: true })
const run: BenchRun = { startedAt, commit: gitCommit(), node: process.version, host: hostname(), cpus: cpus().length, filter: positionals, benches: [] }
const previous = previousRun(runName)

for (const name of selected) {
  console.log(`\n== ${name}`)
  run.benches.push(await runBench(name, runDir))
  // Written after every bench: an interrupted run keeps what it measured.
  writeFileSync(join(runDir, 'results.json'), JSON.stringify(run, null, 2) + '\n')
}

const summary = [
  `bench run ${startedAt}${run.commit !== '' ? ` at ${run.commit}` : ''}, node ${run.node}, ${run.cpus} CPUs on ${run.host}`,
  '',
  formatRun(run),
  '',
  previous === undefined ? 'no previous results to compare with' : formatComparison(compareRuns(previous, run, thresholdPct), { all: values.all }),
].join('\n') + '\n'
writeFileSync(join(runDir, 'summary.txt'), summary)
console.log('\n' + summary + `results: ${runDir}`)
if (run.benches.some(b => b.status === 'failed' || b.status === 'timed-out')) process.exitCode = 1
