import t from 'tap'
import { createEventQueue } from '../../../mesh/sim/event-queue.ts'
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
