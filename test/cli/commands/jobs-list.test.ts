// agentctl jobs list/show/submit render a placement in time, not in absolute slot numbers
// ("shared slot 1795555515" meant nothing to an operator).
import t from 'tap'
import { renderJobs } from '../../../cli/commands/jobs-list.ts'
import type { JobRecord } from '../../../mesh/control/jobs/job-table.ts'

const startSlot = Date.UTC(2026, 10, 26, 12, 3, 5) / 1000 / 2 // slotS 2
const job: JobRecord = {
  id: 'j1', state: 'RUNNING', nodes: ['p1'], nodeNames: ['gpu-01'], submittedAtMs: startSlot * 2000 - 4000, startedAtMs: startSlot * 2000, completedAtMs: null, completedBy: null, requeues: 0,
  placement: { mode: 'shared', startSlot, periodSlots: 45, periods: 10, busy: [[0, 5]], shiftSlots: [0], predictedSlowdown: 1.1, strict: true },
  spec: { id: 'j1', nodes: 1, gpusPerNode: 8, periodS: 80, iterations: 10, segments: [{ offsetS: 0, durationS: 10 }], maxSlowdown: 1.25, profiled: true, switchS: 8 },
}

t.test('a placement is its mode, its start (UTC) and its period as a duration', async t => {
  const out = renderJobs([job], new Set(['j1']), 2)
  t.match(out, /\*j1\s+RUNNING\s+1x8\s+gpu-01\s+shared from 12:03:05Z\s+1m30s/, out)
  t.notMatch(out, /slot/, 'no slot numbers')
  t.match(renderJobs([{ ...job, state: 'QUEUED', placement: null, nodes: [], nodeNames: [], startedAtMs: null }]), /j1\s+QUEUED\s+1x8\s+-\s+-\s+-/, 'no placement: dashes')
})
