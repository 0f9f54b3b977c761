// The Python client's unittest suite (test/agent/client/python/), run and counted by tap.
import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { repoRoot } from '../../helpers/agent-process.ts'
import { hasTorch, python } from '../../helpers/python.ts'
const suite = join('test', 'agent', 'client', 'python')
// The suite stores and loads a 65,536-key batch (test_request_limits.py): beyond tap's 120 s on a busy machine.
t.setTimeout(300_000)

/** Runs the suite to completion: exit code and unittest's report (it writes to stderr). */
function runSuite (): Promise<{ code: number | null, output: string }> {
  return new Promise(resolve => {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AGENTD_')))
    const proc = spawn(python, ['-m', 'unittest', 'discover', '-s', suite, '-v'], {
      cwd: repoRoot,
      env: { ...env, PYTHONDONTWRITEBYTECODE: '1', PYTHONUNBUFFERED: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    proc.stdout.on('data', (c: Buffer) => { output += c.toString() })
    proc.stderr.on('data', (c: Buffer) => { output += c.toString() })
    proc.once('close', code => resolve({ code, output }))
  })
}

const probe = spawnSync(python, ['-c', 'import sys; assert sys.version_info >= (3, 9), sys.version'], { encoding: 'utf8' })
const noPython = probe.error !== undefined || probe.status !== 0
  ? `${python} (>= 3.9) is not available: ${probe.error?.message ?? probe.stderr.trim()}`
  : undefined

t.test('the Python client passes its unittest suite against a real dev agent', { skip: noPython }, async t => {
  t.comment(`interpreter: ${python} (${hasTorch(python) ? 'torch importable: the torch paths run' : 'no torch: the torch tests skip'})`)
  const { code, output } = await runSuite()
  const ran = /^Ran (\d+) tests? in [\d.]+s$/m.exec(output)
  const verdict = /^(OK|FAILED)(?: \((.*)\))?$/m.exec(output)
  const skipped = Number(/skipped=(\d+)/.exec(verdict?.[2] ?? '')?.[1] ?? 0)
  const skipReasons = [...output.matchAll(/\.\.\. skipped (.*)$/gm)].map(m => m[1])
  t.equal(code, 0, code === 0 ? 'unittest exits 0' : `unittest failed:\n${output.slice(-6000)}`)
  t.ok(ran !== null && Number(ran[1]) > 0, `unittest ran ${ran?.[1] ?? 'no'} tests`)
  t.equal(verdict?.[1], 'OK', `unittest says OK: ${verdict?.[0] ?? 'no verdict'}`)
  t.ok(Number(ran?.[1] ?? 0) > skipped,
    `${Number(ran?.[1] ?? 0) - skipped} of ${ran?.[1] ?? 0} Python tests ran, ${skipped} skipped` +
    (skipReasons.length > 0 ? `: ${skipReasons.join('; ')}` : ''))
})
