// agentctl sim trace reward / sim reward: local commands, no agent.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, tempDir } from '../../helpers/agent-process.ts'

t.test('generate a trace, replay it, print the issue\'s JSON and a table', async t => {
  const dir = tempDir(t)
  const generated = await runNode(agentctlMain, ['sim', 'trace', 'reward', '--tasks', '2', '--batch', '16', '--iterations', '3', '--seed', '5'])
  t.equal(generated.code, 0, generated.stderr)
  const trace = JSON.parse(generated.stdout)
  t.same(trace.stages.map((s: { name: string, resource: string }) => [s.name, s.resource]), [['compile', 'cpu'], ['execute', 'gpu']])
  t.equal(trace.tasks.length, 2)
  t.equal(trace.tasks[0].batches.length, 3)
  t.equal(trace.tasks[0].batches[0].requests.length, 16)
  const again = await runNode(agentctlMain, ['sim', 'trace', 'reward', '--tasks', '2', '--batch', '16', '--iterations', '3', '--seed', '5'])
  t.equal(again.stdout, generated.stdout, 'same seed, same trace')
  const file = join(dir, 'trace.json')
  writeFileSync(file, generated.stdout)

  const json = await runNode(agentctlMain, ['sim', 'reward', '--trace', file, '--policy', 'distrs', '--json'])
  t.equal(json.code, 0, json.stderr)
  const result = JSON.parse(json.stdout)
  t.same(Object.keys(result), ['policy', 'cpuSeconds', 'gpuSeconds', 'avgExtraDelayS', 'maxExtraDelayS', 'batches', 'planner'])
  t.equal(result.policy, 'distrs')
  t.ok(result.cpuSeconds > 0 && result.gpuSeconds > 0)
  t.equal(result.batches.length, 4, 'batches 1 and 2 of both tasks (batch 0 is the history)')
  t.same(Object.keys(result.batches[0]), ['task', 'index', 'earliestS', 'completedS', 'extraDelayS'])
  t.same(Object.keys(result.planner), ['calls', 'meanMs', 'maxMs', 'maxRequests'])
  t.equal(result.planner.calls, 8, 'one decision at each batch start and completion')

  const human = await runNode(agentctlMain, ['sim', 'reward', '--trace', file, '--policy', 'zq-dedicated'])
  t.equal(human.code, 0, human.stderr)
  t.match(human.stdout, /policy\s+zq-dedicated\n/)
  t.match(human.stdout, /TASK\s+BATCH\s+EARLIEST_S\s+COMPLETED_S\s+EXTRA_DELAY_S\ntask-0\s+1\s/)
})

t.test('bad usage exits 2 with a hint; a bad trace exits 1 with ERR_TRACE_INVALID naming the field', async t => {
  const dir = tempDir(t)
  const noPolicy = await runNode(agentctlMain, ['sim', 'reward', '--trace', 'x.json'])
  t.equal(noPolicy.code, 2)
  t.match(noPolicy.stderr, /--policy is required, one of distrs, zq-dedicated, history, ideal/)
  const typo = await runNode(agentctlMain, ['sim', 'reward', '--trace', 'x.json', '--policy', 'histroy'])
  t.equal(typo.code, 2)
  t.match(typo.stderr, /unknown policy "histroy"; did you mean "history"\?/)
  t.match((await runNode(agentctlMain, ['sim', 'reward', '--policy', 'ideal'])).stderr, /--trace F is required/)
  const badCount = await runNode(agentctlMain, ['sim', 'trace', 'reward', '--tasks', '2', '--batch', '8', '--iterations', '1', '--seed', '1'])
  t.equal(badCount.code, 2)
  t.match(badCount.stderr, /--iterations must be an integer >= 2 \(the first batch of each task is the planner's history\), got "1"/)
  t.match((await runNode(agentctlMain, ['sim', 'trace', 'reward', '--tasks', 'two', '--batch', '8', '--iterations', '3', '--seed', '1'])).stderr, /--tasks must be an integer >= 1, got "two"/)

  const missing = await runNode(agentctlMain, ['sim', 'reward', '--trace', join(dir, 'none.json'), '--policy', 'distrs', '--json'])
  t.equal(missing.code, 1)
  t.equal(JSON.parse(missing.stdout).error.code, 'ERR_NOT_FOUND')
  const bad = join(dir, 'bad.json')
  writeFileSync(bad, JSON.stringify({ stages: [{ name: 'c', resource: 'tpu', cost: 1, timeoutS: 5 }], maxExtraDelayS: 1, tasks: [] }))
  const invalid = await runNode(agentctlMain, ['sim', 'reward', '--trace', bad, '--policy', 'distrs'])
  t.equal(invalid.code, 1)
  t.match(invalid.stderr, /ERR_TRACE_INVALID: .*bad\.json is not a valid reward trace:\n {2}stages\[0\]\.resource: /)
  writeFileSync(bad, '{ not json')
  t.match((await runNode(agentctlMain, ['sim', 'reward', '--trace', bad, '--policy', 'distrs'])).stderr, /ERR_TRACE_INVALID: .*bad\.json is not JSON/)
})
