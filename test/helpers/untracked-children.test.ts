// test/helpers/untracked-children.ts, loaded into every test process: the children a test starts do
// not load tap's process tracking (its module-load hook costs each agentctl run and agent start CPU);
// and the test processes themselves load only the tap plugins the suite configures.
import t from 'tap'
import { execFileSync } from 'node:child_process'

t.test('a child of a test process gets no process-tracking loader', async t => {
  const seen = JSON.parse(execFileSync(process.execPath, ['-p', 'JSON.stringify({ options: process.env.NODE_OPTIONS ?? "", argv: process.execArgv })'], { encoding: 'utf8' })) as { options: string, argv: string[] }
  t.notMatch(seen.options, /@tapjs\/processinfo/, `NODE_OPTIONS of the child: ${JSON.stringify(seen.options)}`)
  t.notOk(seen.argv.some(a => a.includes('@tapjs/processinfo')), 'nor in its exec arguments')
})

// `npm test` runs `tap build` before tap: without it, the first run after `npm install` (CI's) runs
// every test file with tap's default plugins, whose ts-node loader quadruples a file's CPU.
t.test('a test process loads only the plugins package.json configures (no ts-node loader, no mock hooks)', async t => {
  const loaders = process.execArgv.filter(a => a.startsWith('--import'))
  t.notOk(loaders.some(a => a.includes('@tapjs/typescript')), `exec arguments: ${JSON.stringify(loaders)}`)
  t.notOk(loaders.some(a => a.includes('@tapjs/mock')), 'nor the mock plugin\'s module hooks')
})
