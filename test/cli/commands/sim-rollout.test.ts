// agentctl sim trace rollout / sim rollout: local commands, no agent.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, tempDir } from '../../helpers/agent-process.ts'

t.test('generate a trace with preemptions, simulate every balancer and resume mode', async t => {
  const dir = tempDir(t)
  const args = ['sim', 'trace', 'rollout', '--requests', '64', '--engines', '4', '--preempt', '2', '--at', '5', '--mean-tokens', '200', '--max-tokens', '1024', '--seed', '7']
  const generated = await runNode(agentctlMain, args)
  t.equal(generated.code, 0, generated.stderr)
  const trace = JSON.parse(generated.stdout)
  t.equal(trace.requests.length, 64)
  t.same(trace.engines.map((e: { preemptAtS?: number }) => e.preemptAtS), [5, 5, undefined, undefined])
  t.ok(trace.requests.every((r: { responseTokens: number }) => r.responseTokens <= 1024))
  t.equal((await runNode(agentctlMain, args)).stdout, generated.stdout, 'same seed, same trace')
  const file = join(dir, 'rollout.json')
  writeFileSync(file, generated.stdout)

  const json = await runNode(agentctlMain, ['sim', 'rollout', '--trace', file, '--json'])
  t.equal(json.code, 0, json.stderr)
  const runs = JSON.parse(json.stdout) as Array<{ balancer: string, resume: string, stepS: number, moves: { lost: number }, generatedTokens: number, keptTokens: number }>
  t.same(runs.map(r => `${r.balancer}/${r.resume}`), ['rlboost/tokens', 'rlboost/recompute', 'jsq/tokens', 'jsq/recompute', 'round-robin/tokens', 'round-robin/recompute'])
  const kept = trace.requests.reduce((n: number, r: { responseTokens: number }) => n + r.responseTokens, 0)
  for (const r of runs) {
    t.equal(r.keptTokens, kept, `${r.balancer}/${r.resume}: every response complete`)
    t.ok(r.moves.lost > 0, `${r.balancer}/${r.resume}: ${r.moves.lost} requests moved off the preempted engines`)
    if (r.resume === 'tokens') t.equal(r.generatedTokens, kept, `${r.balancer}: migration generates nothing twice`)
    else t.ok(r.generatedTokens > kept, `${r.balancer}: recompute generates ${r.generatedTokens - kept} tokens twice`)
  }
  const recompute = runs.find(r => r.balancer === 'rlboost' && r.resume === 'recompute')!
  const migrate = runs.find(r => r.balancer === 'rlboost' && r.resume === 'tokens')!
  t.ok(recompute.stepS >= migrate.stepS, `recompute ${recompute.stepS.toFixed(2)} s, migration ${migrate.stepS.toFixed(2)} s`)

  const human = await runNode(agentctlMain, ['sim', 'rollout', '--trace', file, '--balancer', 'jsq', '--resume', 'tokens'])
  t.equal(human.code, 0, human.stderr)
  t.match(human.stdout, /64 requests on 4 engines, 2 preempted\n\nBALANCER\s+RESUME\s+STEP_S\s+MOVED_LOST\s+MOVED_BALANCE\s+TOKENS\s+WASTED\njsq\s+tokens\s+[\d.]+/)
})

t.test('bad flags and traces are refused with the reason', async t => {
  const dir = tempDir(t)
  const bad = async (args: string[], pattern: RegExp): Promise<void> => {
    const r = await runNode(agentctlMain, args)
    t.not(r.code, 0, args.join(' '))
    t.match(r.stderr, pattern, args.join(' '))
  }
  await bad(['sim', 'trace', 'rollout', '--requests', '4', '--engines', '2', '--preempt', '3', '--seed', '1'], /--preempt 3 exceeds --engines 2/)
  await bad(['sim', 'trace', 'rollout', '--requests', '4', '--engines', '2', '--preempt', '1', '--seed', '1'], /--preempt needs --at S/)
  await bad(['sim', 'trace', 'rollout', '--requests', '0', '--engines', '2', '--seed', '1'], /--requests/)
  await bad(['sim', 'rollout'], /--trace F is required/)
  const file = join(dir, 'bad.json')
  writeFileSync(file, JSON.stringify({ engines: [{ id: 'a', decodeStepMs: 1, decodeMsPerSeq: 0, prefillMsPerToken: 0, kvCapacityTokens: 10, maxRunning: 1 }], requests: [{ id: 'r', promptTokens: 1, maxTokens: 5, responseTokens: 9 }] }))
  await bad(['sim', 'rollout', '--trace', file], /ERR_TRACE_INVALID[\s\S]*requests\[0\]\.responseTokens: 9 exceeds maxTokens 5/)
  writeFileSync(file, JSON.stringify({ engines: [{ id: 'a', decodeStepMs: 1, decodeMsPerSeq: 0, prefillMsPerToken: 0, kvCapacityTokens: 10, maxRunning: 1 }], requests: [{ id: 'r', promptTokens: 1, maxTokens: 5, responseTokens: 2 }] }))
  await bad(['sim', 'rollout', '--trace', file, '--balancer', 'fastest'], /--balancer/)
})
