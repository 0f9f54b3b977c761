// test/helpers/untracked-children.ts, loaded into every test process: the children a test starts do
// not load tap's process tracking (its module-load hook costs each agentctl run and agent start CPU).
import t from 'tap'
import { execFileSync } from 'node:child_process'

t.test('a child of a test process gets no process-tracking loader', async t => {
  const seen = JSON.parse(execFileSync(process.execPath, ['-p', 'JSON.stringify({ options: process.env.NODE_OPTIONS ?? "", argv: process.execArgv })'], { encoding: 'utf8' })) as { options: string, argv: string[] }
  t.notMatch(seen.options, /@tapjs\/processinfo/, `NODE_OPTIONS of the child: ${JSON.stringify(seen.options)}`)
  t.notOk(seen.argv.some(a => a.includes('@tapjs/processinfo')), 'nor in its exec arguments')
})
