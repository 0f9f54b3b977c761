// The journal writer: periodic writes spaced by how long a write takes (a large step's journal does
// not eat the event loop), the final write always made, and a failed write logged, not fatal.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { startJournalWriter } from '../../../agent/rollout/journal-writer.ts'
import type { JournalEntry, StepJournal } from '../../../agent/rollout/step-journal.ts'

const logger = pino({ level: 'silent' })
const step = { progress: () => ({ r0: { text: 'a', tokens: 1 } }) }

function slowJournal (ms: number, fail = false): StepJournal & { written: JournalEntry[] } {
  const written: JournalEntry[] = []
  return {
    written,
    read: async () => undefined,
    prune: async () => {},
    write: async entry => { await sleep(ms); if (fail) throw new Error('disk full'); written.push(entry) },
  }
}

t.test('a write that takes 100 ms spaces the next ones 2 s apart, whatever the interval', async t => {
  const journal = slowJournal(100)
  const writer = startJournalWriter({ stepId: 's', digest: 'd', intervalMs: 10 }, step, { journal, logger })
  await sleep(1500)
  writer.stop()
  t.ok(journal.written.length >= 1 && journal.written.length <= 2, `one periodic write in 1.5 s (an interval of 10 ms would give over 10): ${journal.written.length}`)
  await writer.write({ responses: [], stepMs: 1, moves: { lost: 0, pending: 0, executing: 0 }, removed: [], generatedTokens: 0, instances: [] })
  t.ok(journal.written.at(-1)?.answer !== undefined, 'the final write, with the answer, is made regardless')
})

t.test('fast writes follow the interval', async t => {
  const journal = slowJournal(0)
  const writer = startJournalWriter({ stepId: 's', digest: 'd', intervalMs: 20 }, step, { journal, logger })
  // Five writes take about 100 ms at a 20 ms interval; spaced like slow writes they would take 8 s.
  // Waiting for them (not counting them in a fixed window) keeps a loaded machine from failing this.
  const began = performance.now()
  while (journal.written.length < 5 && performance.now() - began < 8000) await sleep(10)
  const tookMs = performance.now() - began
  writer.stop()
  t.ok(journal.written.length >= 5 && tookMs < 2000, `5 writes at a 20 ms interval took ${Math.round(tookMs)} ms (spaced as slow writes: 8 s)`)
})

t.test('a failed write is not fatal', async t => {
  const writer = startJournalWriter({ stepId: 's', digest: 'd', intervalMs: 1000 }, step, { journal: slowJournal(0, true), logger })
  await t.resolves(writer.write())
  writer.stop()
})
