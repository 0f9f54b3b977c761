// agentctl sim trace reward / sim reward: local commands, no agent. End to end through
// agentctl for output and exit codes; usage errors in-process (quicker).
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, tempDir } from '../../helpers/agent-process.ts'
import { UsageError, type CommandContext } from '../../../cli/commands/command.ts'
import { simRewardCommand } from '../../../cli/commands/sim-reward.ts'
import { simTraceRewardCommand } from '../../../cli/commands/sim-trace-reward.ts'

const context = (values: CommandContext['values']): CommandContext =>
  ({ values, positionals: [], json: false, signal: new AbortController().signal, client: undefined as never })

t.test('generate a trace, replay it, print the issue\'s JSON and a table', async t => {
  const dir = tempDir(t)
  const generated = await runNode(agentctlMain, ['sim', 'trace', 'reward', '--tasks', '2', '--batch', '16', '--iterations', '3', '--seed', '5'])
  t.equal(generated.code, 0, generated.stderr)
  const trace = JSON.parse(generated.stdout)
  t.same(trace.stages.map((s: { name: string, resource: string }) => [s.name, s.resource]), [['compile', 'cpu'], ['execute', 'gpu']])
  t.equal(trace.tasks.length, 2)
  t.equal(trace.tasks[0].batches.length, 3)
  t.equal(trace.tasks[0].batches[0].requests.length, 16)
  const again = await simTraceRewardCommand.run(context({ tasks: '2', batch: '16', iterations: '3', seed: '5' }))
  t.equal(again.human, generated.stdout.trimEnd(), 'same seed, same trace')
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

  const live = await runNode(agentctlMain, ['sim', 'reward', '--trace', file, '--policy', 'distrs', '--json', '--worker-start-ms', '5000', '--start-concurrency', '1', '--keep-warm-ms', '60000'])
  t.equal(live.code, 0, live.stderr)
  const liveResult = JSON.parse(live.stdout)
  t.equal(liveResult.planner.calls, 12, 'a decision at each batch\'s start hint too')
  t.ok(liveResult.cpuSeconds > result.cpuSeconds, `workers held from the hint and kept warm count (${liveResult.cpuSeconds} vs ${result.cpuSeconds})`)
  const slow = await simRewardCommand.run(context({ trace: file, policy: 'distrs', 'worker-start-ms': '60000', 'start-concurrency': '1' }))
  const slowDelayS = (slow.json as { avgExtraDelayS: number }).avgExtraDelayS
  t.ok(slowDelayS > result.avgExtraDelayS + 10, `workers that take a minute to start, one at a time, delay batches (${slowDelayS} vs ${result.avgExtraDelayS} s)`)
  const replayed = await simRewardCommand.run(context({ trace: file, policy: 'distrs', 'worker-start-ms': '5000', 'start-concurrency': '1', 'keep-warm-ms': '60000', 'replay-history': true }))
  const replayedResult = replayed.json as { batches: unknown[], planner: { calls: number } }
  t.equal(replayedResult.batches.length, 4, '--replay-history runs the first batches but does not report them')
  t.equal(replayedResult.planner.calls, 18, 'and plans them: three more decisions for each of the two first batches')
  const handOff = await simRewardCommand.run(context({ trace: file, policy: 'zq-dedicated', 'dispatch-ms': '2000' }))
  const plain = await simRewardCommand.run(context({ trace: file, policy: 'zq-dedicated' }))
  const completions = (r: typeof plain): number[] => (r.json as { batches: Array<{ completedS: number }> }).batches.map(b => b.completedS)
  const withS = completions(handOff)
  const withoutS = completions(plain)
  // A batch whose last request runs no stage (all stage times 0: done on arrival) ends at the same time either way.
  t.ok(withS.every((s, i) => s >= withoutS[i]!) && withS.some((s, i) => s >= withoutS[i]! + 2), `a 2 s hand-off at every stage finishes no batch earlier and some 2 s or more later (${withS.join(', ')} vs ${withoutS.join(', ')})`)

  const human = await simRewardCommand.run(context({ trace: file, policy: 'zq-dedicated' }))
  t.match(human.human, /policy\s+zq-dedicated\n/)
  t.match(human.human, /TASK\s+BATCH\s+EARLIEST_S\s+COMPLETED_S\s+EXTRA_DELAY_S\ntask-0\s+1\s/)
})

t.test('bad usage exits 2 with a hint', async t => {
  const typo = await runNode(agentctlMain, ['sim', 'reward', '--trace', 'x.json', '--policy', 'histroy'])
  t.equal(typo.code, 2)
  t.match(typo.stderr, /--policy must be one of distrs, zq-dedicated, history, ideal, got "histroy"; did you mean "history"\?/)
  await t.rejects(simRewardCommand.run(context({ trace: 'x.json' })), new UsageError('sim reward: --policy is required (one of distrs, zq-dedicated, history, ideal)'))
  await t.rejects(simRewardCommand.run(context({ policy: 'ideal' })), /--trace F is required/)
  await t.rejects(simRewardCommand.run(context({ trace: 'x.json', policy: 'ideal', 'worker-start-ms': '-5' })), /--worker-start-ms must be an integer >= 0, got "-5"/)
  await t.rejects(simRewardCommand.run(context({ trace: 'x.json', policy: 'ideal', 'keep-warm-ms': '1.5' })), /--keep-warm-ms must be an integer >= 0/)
  await t.rejects(simRewardCommand.run(context({ trace: 'x.json', policy: 'ideal', 'start-concurrency': '0' })), /--start-concurrency must be an integer >= 1, got "0"/)
  await t.rejects(simRewardCommand.run(context({ trace: 'x.json', policy: 'ideal', 'dispatch-ms': '-1' })), /--dispatch-ms must be an integer >= 0, got "-1"/)
  await t.rejects(simTraceRewardCommand.run(context({ tasks: '2', batch: '8', iterations: '1', seed: '1' })),
    /--iterations must be an integer >= 2, got "1"/)
  await t.rejects(simTraceRewardCommand.run(context({ tasks: 'two', batch: '8', iterations: '3', seed: '1' })), /--tasks must be an integer >= 1, got "two"/)
  await t.rejects(simTraceRewardCommand.run(context({ tasks: '2', iterations: '3', seed: '1' })), /--batch is required/)
})

t.test('a bad trace exits 1 with ERR_TRACE_INVALID naming the field', async t => {
  const dir = tempDir(t)
  const bad = join(dir, 'bad.json')
  writeFileSync(bad, JSON.stringify({ stages: [{ name: 'c', resource: 'tpu', cost: 1, timeoutS: 5 }], maxExtraDelayS: 1, tasks: [] }))
  const invalid = await runNode(agentctlMain, ['sim', 'reward', '--trace', bad, '--policy', 'distrs'])
  t.equal(invalid.code, 1)
  t.match(invalid.stderr, /ERR_TRACE_INVALID: .*bad\.json is not a valid reward trace:\n {2}stages\[0\]\.resource: Expected one of "cpu", "gpu", got "tpu"/)
  const missing = await runNode(agentctlMain, ['--json', 'sim', 'reward', '--trace', join(dir, 'none.json'), '--policy', 'distrs'])
  t.equal(missing.code, 1)
  t.equal(JSON.parse(missing.stdout).error.code, 'ERR_NOT_FOUND')
  writeFileSync(bad, '{ not json')
  await t.rejects(simRewardCommand.run(context({ trace: bad, policy: 'distrs' })), { code: 'ERR_TRACE_INVALID', message: /bad\.json is not JSON/ })
})
