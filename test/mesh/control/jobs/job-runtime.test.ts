// The leader's runtime schedule on the wall clock (job-runtime.ts over wall-clock-queue.ts): a job whose
// log-prob, update and sync segments touch runs them as one block (task-executor.ts continueWith) while
// the clock moves between reading it and continuing, and completes.
import t from 'tap'
import { createJobRuntime } from '../../../../mesh/control/jobs/job-runtime.ts'
import { placeQueued, submitJob } from '../../../../mesh/control/jobs/job-scheduler.ts'
import { emptyJobTable } from '../../../../mesh/control/jobs/job-table.ts'
import { parseJobSpec } from '../../../../mesh/control/jobs/job-spec.ts'

t.test('touching segments on the wall clock: one block per period, the job completes', async t => {
  const spec = parseJobSpec({ id: 'blocks', nodes: 1, gpusPerNode: 0, periodS: 0.3, iterations: 4, segments: [{ offsetS: 0.1, durationS: 0.05 }, { offsetS: 0.15, durationS: 0.05 }, { offsetS: 0.2, durationS: 0.1 }], maxSlowdown: 2, switchS: 0.5 })
  const submitted = submitJob(emptyJobTable(0.05), spec, Date.now(), { contextSwitchS: 0.5, maxActiveJobs: 4, maxTableBytes: 1 << 20, completedRetained: 1 }).table
  const placed = placeQueued(submitted, [{ peerId: 'p1', name: 'n1', gpus: 0 }], Date.now(), { policy: 'isolated', maxJobsPerNode: 1 }).table
  const job = placed.jobs[0]!
  t.equal(job.state, 'RUNNING')
  const began = Date.now()
  const done = new Promise<number>(resolve => {
    const runtime = createJobRuntime({ scheduler: 'hrrs', slotS: 0.05 }, { onJobDone: () => { resolve(Date.now() - began); runtime.stop() } })
    runtime.sync([job])
  })
  const ms = await Promise.race([done, new Promise<number>((_, reject) => setTimeout(() => reject(new Error('the job never completed')), 10_000))])
  t.ok(ms >= 4 * 300 - 400, `four 0.3 s periods ran (${ms} ms)`)
})
