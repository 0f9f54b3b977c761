import t from 'tap'
import { effectiveServiceS, hrrsPriority, needsContextSwitch, nextTaskState, selectRunnable, startOperations, type NodeRuntimeState, type RuntimeTask } from '../../../../mesh/policies/runtime/hrrs.ts'

const task = (taskId: string, jobId: string, nodes: number[], readyS: number, execS = 10, setupS = 20): RuntimeTask => ({ taskId, jobId, nodes, readyS, execS, setupS })
const free = (residentJob?: string): NodeRuntimeState => ({ lockHolder: undefined, residentJob })

t.test('Eq. (3)-(4): effective service time and response ratio', async t => {
  const a = task('a1', 'a', [0], 0)
  t.equal(effectiveServiceS(a, false), 10)
  t.equal(effectiveServiceS(a, true), 30)
  t.equal(hrrsPriority(a, 0, false), 1, 'a fresh task has priority 1')
  t.equal(hrrsPriority(a, 20, false), 3)
  t.equal(hrrsPriority(a, 30, true), 2, 'a needed switch inflates the denominator')
  t.ok(needsContextSwitch(a, [free('b')]))
  t.notOk(needsContextSwitch(a, [free('a')]))
})

t.test('no starvation: a waiting task\'s priority grows without bound', async t => {
  const a = task('a1', 'a', [0], 0, 100, 500)
  let last = 0
  for (const now of [0, 1e3, 1e4, 1e5, 1e6]) {
    const p = hrrsPriority(a, now, true)
    t.ok(p > last)
    last = p
  }
  t.ok(last > 1000)
  // Against a stream of fresh resident tasks (priority 1), the old task eventually wins.
  const fresh = task('b9', 'b', [0], 5000, 100, 500)
  t.same(selectRunnable([fresh, a], [free('b')], 5000, 'hrrs').map(x => x.taskId), ['a1'])
})

t.test('HRRS batches the resident job where FCFS switches', async t => {
  const nodes = [free('a')]
  const resident = task('a2', 'a', [0], 5)
  const foreign = task('b1', 'b', [0], 0)
  t.same(selectRunnable([foreign, resident], nodes, 10, 'fcfs').map(x => x.taskId), ['b1'])
  t.same(selectRunnable([foreign, resident], nodes, 10, 'hrrs').map(x => x.taskId), ['a2'], '(5+10)/10 > (10+30)/30')
})

t.test('lock-gated dispatch: a gang starts only with every lock free; the top task claims its free nodes', async t => {
  const nodes: NodeRuntimeState[] = [{ lockHolder: 'x', residentJob: 'x' }, free(), free()]
  const wide = task('w1', 'w', [0, 1], 0)
  const narrow = task('n1', 'n', [1], 50)
  const other = task('o1', 'o', [2], 50)
  t.same(selectRunnable([wide, narrow, other], nodes, 100, 'fcfs').map(x => x.taskId), ['o1'], 'node 1 is claimed by the waiting gang')
  nodes[0] = free('x')
  t.same(selectRunnable([wide, narrow, other], nodes, 100, 'fcfs').map(x => x.taskId), ['w1', 'o1'])
})

t.test('backfill at the lock: a lower-priority task may use a claimed node only if it ends before the claimer can start', async t => {
  const nodes: NodeRuntimeState[] = [{ lockHolder: 'x', residentJob: 'x', expectedFreeS: 150 }, free('s'), free('l')]
  const wide = task('w1', 'w', [0, 1, 2], 0)
  const short = task('s1', 's', [1], 50, 40, 20) // resident: ends at 140 <= 150
  const long = task('l1', 'l', [2], 50, 60, 20) // resident: ends at 160 > 150
  t.same(selectRunnable([wide, short, long], nodes, 100, 'fcfs').map(x => x.taskId), ['s1'])
  t.same(selectRunnable([wide, short, long], nodes, 100, 'hrrs').map(x => x.taskId), ['s1'])
})

t.test('a context switch is offload + onload per node before the run; the FSM rejects bad transitions', async t => {
  const ops = startOperations(task('a1', 'a', [0, 1, 2], 0), [free('b'), free('a'), free()])
  t.same(ops, [
    { kind: 'offload', node: 0, jobId: 'b' },
    { kind: 'onload', node: 0, jobId: 'a' },
    { kind: 'onload', node: 2, jobId: 'a' },
    { kind: 'run', taskId: 'a1' },
  ])
  t.equal(nextTaskState('QUEUED', 'start'), 'RUNNING')
  t.equal(nextTaskState('RUNNING', 'complete'), 'COMPLETED')
  t.throws(() => nextTaskState('QUEUED', 'complete'), /cannot complete from QUEUED/)
  t.throws(() => nextTaskState('COMPLETED', 'start'), RangeError)
})
