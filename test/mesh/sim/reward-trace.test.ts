// Trace validation: every problem names its field; consistency rules beyond the schema.
import t from 'tap'
import { parseRewardTrace, validateRewardTrace } from '../../../mesh/sim/reward-trace.ts'
import { AgentError } from '../../../core/errors.ts'

const valid = () => ({
  stages: [{ name: 'compile', resource: 'cpu', cost: 1, timeoutS: 120 }, { name: 'execute', resource: 'gpu', cost: 8, timeoutS: 60 }],
  maxExtraDelayS: 1,
  tasks: [{ id: 'a', batches: [0, 500].map(startS => ({ startS, requests: [{ arrivalS: startS + 10, stageS: [50, 3] }, { arrivalS: startS + 20, stageS: [0, 0] }] })) }],
})

function issues (value: unknown): string[] {
  try {
    validateRewardTrace(value)
  } catch (err) {
    if (!(err instanceof AgentError)) throw err
    if (err.code !== 'ERR_TRACE_INVALID') throw err
    return (err.details as Array<{ path: string, message: string }>).map(i => `${i.path}: ${i.message}`)
  }
  return []
}

t.test('a valid trace passes and keeps its values', async t => {
  t.same(validateRewardTrace(valid()), valid())
  t.same(parseRewardTrace(JSON.stringify(valid())), valid())
})

t.test('schema problems name the field, with hints for misspelt keys', async t => {
  const bad: any = valid()
  bad.stages[1].resource = 'tpu'
  bad.stages[0].timeoutS = 0
  bad.tasks[0].batches[1].requests[0].stageS[1] = -1
  bad.tasks[0].batches[0].requests[1].arrivalSec = 3
  delete bad.maxExtraDelayS
  const found = issues(bad)
  t.match(found.join('\n'), /stages\[1\]\.resource: Expected one of "cpu", "gpu", got "tpu"/)
  t.match(found.join('\n'), /stages\[0\]\.timeoutS: Expected number to be greater than 0, got 0/)
  t.match(found.join('\n'), /tasks\[0\]\.batches\[1\]\.requests\[0\]\.stageS\[1\]: Expected number to be greater or equal to 0, got -1/)
  t.match(found.join('\n'), /tasks\[0\]\.batches\[0\]\.requests\[1\]\.arrivalSec: Unexpected property, got 3; did you mean "arrivalS"\?/)
  t.match(found.join('\n'), /maxExtraDelayS: Expected required property/)
  t.match(issues({ ...valid(), tasks: [{ id: 'a', batches: [valid().tasks[0]!.batches[0]] }] }).join('\n'), /tasks\[0\]\.batches: Expected array length to be greater or equal to 2/, 'batch 0 is history: two batches at least')
  t.match(issues([]).join('\n'), /\(root\): Expected object/)
})

t.test('consistency: durations per stage, timeouts, arrival order, unique names', async t => {
  const bad: any = valid()
  bad.tasks[0].batches[0].requests[0].stageS = [50]
  bad.tasks[0].batches[1].requests[0].stageS = [121, 3]
  bad.tasks[0].batches[1].requests[1].arrivalS = 499
  bad.tasks.push({ ...valid().tasks[0], id: 'a' })
  bad.stages.push({ ...bad.stages[0] })
  t.same(issues(bad), [
    'stages[2].name: duplicate stage name "compile"',
    'tasks[0].batches[0].requests[0].stageS: has 1 durations, the trace has 3 stages',
    'tasks[0].batches[0].requests[1].stageS: has 2 durations, the trace has 3 stages',
    'tasks[0].batches[1].requests[0].stageS: has 2 durations, the trace has 3 stages',
    'tasks[0].batches[1].requests[1].arrivalS: arrives at 499, before its batch starts at 500',
    'tasks[0].batches[1].requests[1].stageS: has 2 durations, the trace has 3 stages',
    'tasks[1].id: duplicate task id "a"',
    'tasks[1].batches[0].requests[0].stageS: has 2 durations, the trace has 3 stages',
    'tasks[1].batches[0].requests[1].stageS: has 2 durations, the trace has 3 stages',
    'tasks[1].batches[1].requests[0].stageS: has 2 durations, the trace has 3 stages',
  ], 'at most 10 issues')
  const timeouts: any = valid()
  timeouts.tasks[0].batches[1].requests[0].stageS = [121, 3]
  t.same(issues(timeouts), ['tasks[0].batches[1].requests[0].stageS[0]: 121 s exceeds stage "compile" timeout 120 s'])
  const order: any = valid()
  order.tasks[0].batches[1].startS = 0
  order.tasks[0].batches[0].startS = 5
  order.tasks[0].batches[0].requests.forEach((r: any) => { r.arrivalS += 5 })
  order.tasks[0].batches[1].requests.forEach((r: any) => { r.arrivalS -= 500 })
  t.same(issues(order), ['tasks[0].batches[1].startS: batches must be in start order: 0 < previous batch\'s 5'])
})

t.test('text that is not JSON', async t => {
  t.throws(() => parseRewardTrace('{', 'f.json'), { code: 'ERR_TRACE_INVALID', message: /^f\.json is not JSON: / })
})
