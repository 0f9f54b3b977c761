/**
 * Writes one running step's journal (step-journal.ts): its progress every
 * intervalMs, skipping a tick while a write is under way, and once more when
 * it ends (with the answer, or the progress at the failure). Writes happen
 * one at a time, in order; a failed write is logged and the step goes on
 * (a resubmission would resume from the previous entry).
 */
import type { Logger } from 'pino'
import type { RolloutStep } from '../../mesh/control/rollout/rollout-step.ts'
import type { RolloutStepAnswer } from '../api/wire/rollout.ts'
import type { StepJournal } from './step-journal.ts'

export interface JournalWriter {
  /** Writes the progress now (with the answer once there is one); resolves when written or failed. */
  write(answer?: RolloutStepAnswer): Promise<void>
  stop(): void
}

export function startJournalWriter (o: { stepId: string, digest: string, intervalMs: number }, step: Pick<RolloutStep, 'progress'>, components: { journal: StepJournal, logger: Logger }): JournalWriter {
  let writes: Promise<void> = Promise.resolve()
  let busy = false
  const write = async (answer?: RolloutStepAnswer): Promise<void> => {
    const entry = { stepId: o.stepId, digest: o.digest, progress: step.progress(), ...(answer !== undefined ? { answer } : {}) }
    busy = true
    writes = writes.then(async () => await components.journal.write(entry))
      .catch((err: unknown) => components.logger.warn({ step: o.stepId, err }, 'rollout step journal not written; a resubmission would go on from an older one'))
      .finally(() => { busy = false })
    await writes
  }
  const timer = setInterval(() => { if (!busy) void write() }, o.intervalMs)
  return { write, stop: () => clearInterval(timer) }
}
