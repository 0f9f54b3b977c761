/**
 * `npm run lint` (and the first step of `npm test`): the three linters, each
 * a devDependency, so a fresh clone needs nothing beyond `npm install`:
 *
 * - TypeScript: Biome, `biome lint` with the rules in biome.jsonc;
 * - Python: ruff, through its WebAssembly build (@astral-sh/ruff-wasm-nodejs,
 *   published by ruff's authors) with the settings in ruff.toml, the file the
 *   ruff command line reads too, so `ruff check` gives the same answer;
 * - C++ (native/src): clang-format with .clang-format; a file it would change
 *   is a finding (`npm run format:native` rewrites them).
 *
 * Python and C++ files are the ones git tracks plus untracked ones it does not
 * ignore. The three run side by side; each finding is printed, and the exit
 * status is 1 when there is any. A tool that cannot run is a failure too.
 *
 * Run it with `node --liftoff-only` (the npm script does): V8's optimizing
 * compiler would spend ~4 s of CPU on ruff's 10 MB WebAssembly module, far
 * more than checking the Python files with the baseline code takes (~0.3 s).
 */
import { execFile, spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { parse as parseToml } from 'smol-toml'

const repoRoot = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? '..' : '../..', import.meta.url))
const require = createRequire(import.meta.url)
const run = promisify(execFile)

interface LintResult {
  tool: string
  /** Lines to print, one per finding (or the tool's own output). */
  output: string
  ok: boolean
}

/** Files git knows of (tracked, or untracked and not ignored) matching the pathspecs. */
async function gitFiles (...pathspecs: string[]): Promise<string[]> {
  const { stdout } = await run('git', ['ls-files', '--cached', '--others', '--exclude-standard', '--', ...pathspecs], { cwd: repoRoot, maxBuffer: 16 << 20 })
  return [...new Set(stdout.split('\n').filter(f => f !== ''))].sort()
}

/** Biome prints its own report (with code frames); it exits non-zero on any finding. */
function lintTypeScript (): Promise<LintResult> {
  return new Promise(resolve => {
    const child = spawn(process.execPath, [require.resolve('@biomejs/biome/bin/biome'), 'lint', '--error-on-warnings', '--max-diagnostics=none', '--colors=off', '.'], { cwd: repoRoot })
    let output = ''
    child.stdout.setEncoding('utf8').on('data', (s: string) => { output += s })
    child.stderr.setEncoding('utf8').on('data', (s: string) => { output += s })
    child.on('error', err => resolve({ tool: 'biome', output: `biome did not start: ${err.message}`, ok: false }))
    child.on('close', code => resolve({ tool: 'biome', output: output.trimEnd(), ok: code === 0 }))
  })
}

async function lintPython (): Promise<LintResult> {
  const { Workspace, PositionEncoding } = await import('@astral-sh/ruff-wasm-nodejs')
  const settings = parseToml(await readFile(`${repoRoot}/ruff.toml`, 'utf8'))
  const workspace = new Workspace(settings, PositionEncoding.Utf16)
  const files = await gitFiles('*.py')
  const findings: string[] = []
  for (const file of files) {
    const diagnostics = workspace.check(await readFile(`${repoRoot}/${file}`, 'utf8')) as Array<{ code: string | null, message: string, start_location: { row: number, column: number } }>
    for (const d of diagnostics) findings.push(`${file}:${d.start_location.row}:${d.start_location.column} ${d.code ?? 'syntax'} ${d.message}`)
  }
  workspace.free()
  return { tool: `ruff ${Workspace.version()}`, output: [...findings, `${files.length} files, ${findings.length} findings`].join('\n'), ok: findings.length === 0 }
}

/** The bundled clang-format binary; Debian's `clang-format` where the package ships none for this platform (arm64 Linux). */
function clangFormatBinary (): string {
  try {
    return (require('clang-format') as { getNativeBinary(): string }).getNativeBinary()
  } catch {
    return 'clang-format'
  }
}

async function checkNativeFormat (): Promise<LintResult> {
  const binary = clangFormatBinary()
  const files = await gitFiles('native/src/*.cc', 'native/src/*.h')
  const findings = await Promise.all(files.map(async file => {
    const [{ stdout: formatted }, source] = await Promise.all([
      run(binary, ['--style=file', file], { cwd: repoRoot, maxBuffer: 64 << 20 }),
      readFile(`${repoRoot}/${file}`, 'utf8'),
    ])
    if (formatted === source) return undefined
    const a = source.split('\n')
    const b = formatted.split('\n')
    let line = 0
    while (line < a.length && a[line] === b[line]) line++
    return `${file}:${line + 1} not as clang-format lays it out (first difference here; npm run format:native rewrites it)`
  }))
  const wrong = findings.filter(f => f !== undefined)
  const { stdout: version } = await run(binary, ['--version'])
  return { tool: version.trim().replace(/ \(.*\)$/, ''), output: [...wrong, `${files.length} files, ${wrong.length} to reformat`].join('\n'), ok: wrong.length === 0 }
}

const failed = (tool: string) => (err: Error): LintResult => ({ tool, output: `${tool} failed: ${err.message}`, ok: false })
const results = await Promise.all([
  lintTypeScript(),
  lintPython().catch(failed('ruff')),
  checkNativeFormat().catch(failed('clang-format')),
])
for (const r of results) process.stdout.write(`== ${r.tool}: ${r.ok ? 'ok' : 'FAILED'}\n${r.output}\n`)
process.exitCode = results.every(r => r.ok) ? 0 : 1
