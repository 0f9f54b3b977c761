import t from 'tap'
import { createEventQueue } from '../../../core/event-queue.ts'
import { createTaskExecutor, type TaskRun } from '../../../mesh/sim/task-executor.ts'

/** Job a runs [0, 10) on node 0; job b's task becomes ready at `readyS`. Returns b's run. */
function switchAfterGap (readyS: number, prefetch: boolean, admitB = true): TaskRun {
  const q = createEventQueue()
  const executor = createTaskExecutor({ queue: q, nodes: 1, scheduler: 'hrrs', isFinished: () => false, prefetch })
  let run: TaskRun | undefined
  q.at(0, () => {
    executor.submit({ taskId: 'a#0', jobId: 'a', nodes: [0], readyS: 0, execS: 10, setupS: 0 }, 10, () => {})
    if (admitB) executor.admit('b')
  })
  q.at(readyS, () => executor.submit({ taskId: 'b#0', jobId: 'b', nodes: [0], readyS, execS: 5, setupS: 6 }, 5, r => { run = r }))
  q.runUntil()
  return run!
}

t.test('prefetch: a switch overlaps the node\'s idle time before the task', async t => {
  t.same(switchAfterGap(20, true), { startedS: 20, setupS: 0 }, 'idle 10 s >= C: the switch is hidden')
  t.same(switchAfterGap(14, true), { startedS: 14, setupS: 2 }, 'idle 4 s: pays the remaining 2 s')
  t.same(switchAfterGap(5, true), { startedS: 10, setupS: 6 }, 'waited for the lock: no idle time, pays C')
  t.same(switchAfterGap(20, false), { startedS: 20, setupS: 6 }, 'without prefetch the switch is always paid')
  t.same(switchAfterGap(20, true, false), { startedS: 20, setupS: 6 }, 'a job never admitted has no state to prefetch before its first task')
})

t.test('a block: the job\'s next task within the switch cost keeps the locks through the gap', async t => {
  /** a runs [0, 10) then its next task 1 s later; b waits from t=2. Returns the start order and runs. */
  function block (continued: boolean) {
    const q = createEventQueue()
    const executor = createTaskExecutor({ queue: q, nodes: 1, scheduler: 'hrrs', isFinished: () => false })
    const runs: Array<[string, TaskRun]> = []
    const second = { taskId: 'a#1', jobId: 'a', nodes: [0], readyS: 11, execS: 10, setupS: 6 }
    q.at(0, () => executor.submit({ taskId: 'a#0', jobId: 'a', nodes: [0], readyS: 0, execS: 10, setupS: 0 }, 10, r => {
      runs.push(['a#0', r])
      if (continued) executor.continueWith(second, 10, r2 => runs.push(['a#1', r2]))
      else q.at(11, () => executor.submit(second, 10, r2 => runs.push(['a#1', r2])))
    }))
    q.at(2, () => executor.submit({ taskId: 'b#0', jobId: 'b', nodes: [0], readyS: 2, execS: 10, setupS: 6 }, 10, r => runs.push(['b#0', r])))
    q.runUntil()
    return { runs, switches: executor.stats.contextSwitches }
  }
  const held = block(true)
  t.same(held.runs, [['a#0', { startedS: 0, setupS: 0 }], ['a#1', { startedS: 11, setupS: 0 }], ['b#0', { startedS: 21, setupS: 6 }]], 'a keeps the node through the 1 s gap; b switches in once')
  t.equal(held.switches, 1, 'one switch: a to b')
  const released = block(false)
  t.same(released.runs.map(([id]) => id), ['a#0', 'b#0', 'a#1'], 'released, the waiting job takes the node for the gap')
  t.equal(released.runs[2]![1].setupS, 6, 'and a pays a switch back')
  t.equal(released.switches, 2, 'two switches: a to b and back')

  const q = createEventQueue()
  const executor = createTaskExecutor({ queue: q, nodes: 2, scheduler: 'hrrs', isFinished: () => false })
  const errors: string[] = []
  const tryContinue = (task: { taskId: string, jobId: string, nodes: number[], readyS: number }) => {
    try {
      executor.continueWith({ ...task, execS: 1, setupS: 1 }, 1, () => {})
    } catch (err) {
      errors.push((err as Error).message)
    }
  }
  q.at(0, () => executor.submit({ taskId: 'a#0', jobId: 'a', nodes: [0], readyS: 0, execS: 1, setupS: 1 }, 1, () => {
    tryContinue({ taskId: 'b#9', jobId: 'b', nodes: [0], readyS: 2 })
    tryContinue({ taskId: 'a#8', jobId: 'a', nodes: [1], readyS: 2 })
  }))
  q.at(5, () => tryContinue({ taskId: 'a#6', jobId: 'a', nodes: [0], readyS: 5 }))
  q.runUntil()
  t.match(errors, [/continues no task of job b/, /continues a#0 on other nodes/, /continues no task of job a completing now/])
})
