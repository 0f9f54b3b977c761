/**
 * Writes one running step's journal (step-journal.ts): its progress every
 * intervalMs, and once more when it ends (with the answer, or the progress
 * at the failure). Writes happen one at a time, in order; a failed write is
 * logged and the step goes on (a resubmission would resume from the
 * previous entry).
 *
 * A periodic write is the whole progress as JSON (every response's text so
 * far) plus an fsync: for a large step it is not free. A tick is skipped
 * while a write is under way or until busyFactor times the last write's
 * duration has passed since it began, so journaling takes at most about
 * 1/busyFactor of the time however large the step (a step whose journal
 * takes 100 ms to write is journaled every 2 s, not every second).
 */
import type { Logger } from 'pino'
import type { RolloutStep } from '../../mesh/control/rollout/rollout-step.ts'
import type { RolloutStepAnswer } from '../api/wire/rollout.ts'
import type { StepJournal } from './step-journal.ts'

/** Journal writes take at most about 1/busyFactor of a step's time. */
const busyFactor = 20

export interface JournalWriter {
  /** Writes the progress now (with the answer once there is one); resolves when written or failed. */
  write(answer?: RolloutStepAnswer): Promise<void>
  stop(): void
}

export function startJournalWriter (o: { stepId: string, digest: string, intervalMs: number }, step: Pick<RolloutStep, 'progress'>, components: { journal: StepJournal, logger: Logger }): JournalWriter {
  let writes: Promise<void> = Promise.resolve()
  let busy = false
  let lastBeganAt = 0
  let lastTookMs = 0
  const write = async (answer?: RolloutStepAnswer): Promise<void> => {
    const entry = { stepId: o.stepId, digest: o.digest, progress: step.progress(), ...(answer !== undefined ? { answer } : {}) }
    busy = true
    writes = writes.then(async () => {
      lastBeganAt = performance.now()
      try {
        await components.journal.write(entry)
      } finally {
        lastTookMs = performance.now() - lastBeganAt
      }
    }).catch((err: unknown) => components.logger.warn({ step: o.stepId, err }, 'rollout step journal not written; a resubmission would go on from an older one'))
      .finally(() => { busy = false })
    await writes
  }
  const timer = setInterval(() => {
    if (!busy && performance.now() - lastBeganAt >= busyFactor * lastTookMs) void write()
  }, o.intervalMs)
  return { write, stop: () => clearInterval(timer) }
}
