// agentctl sim seeding: a local command, no agent.
import t from 'tap'
import { agentctlMain, runNode } from '../../helpers/agent-process.ts'

t.test('the three variants side by side, and per step', async t => {
  const res = await runNode(agentctlMain, ['sim', 'seeding', '--available', '1x3,4x3', '--requests', '64', '--mean-tokens', '150', '--max-tokens', '400', '--per-step'])
  t.equal(res.code, 0, res.stderr)
  t.match(res.stdout, /^6 steps of 64 requests; remote instances available: 1x3,4x3/)
  for (const v of ['full', 'no-memory', 'no-seeding']) t.match(res.stdout, new RegExp(`^${v} +[0-9.]+ +[0-9.]+ +\\d+ +\\d+ +[0-9.]+$`, 'm'), `a row for ${v}`)
  t.match(res.stdout, /STEP +AVAILABLE +USED +SEED_S/)
  const json = await runNode(agentctlMain, ['sim', 'seeding', '--available', '2x2', '--requests', '32', '--variant', 'full', '--json'])
  const results = JSON.parse(json.stdout) as Array<{ variant: string, steps: unknown[] }>
  t.same(results.map(r => [r.variant, r.steps.length]), [['full', 2]])
})

t.test('bad flags: a usage error naming the flag', async t => {
  for (const [args, message] of [
    [['--available', '3'], /--available takes COUNTxSTEPS/],
    [['--eta', '0'], /--eta must be a number >= 0.001/],
    [['--variant', 'fast'], /--variant must be one of/],
    [['--microbatch', '0'], /--microbatch must be an integer >= 1/],
  ] as const) {
    const res = await runNode(agentctlMain, ['sim', 'seeding', ...args])
    t.not(res.code, 0)
    t.match(res.stderr, message, args.join(' '))
  }
})
