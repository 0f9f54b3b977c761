// The root logger: plain pino JSON lines, or each line prefixed with its syslog priority for journald.
import t from 'tap'
import { closeSync, fstatSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { createRootLogger, isJournalStream, journalPriorityPrefix } from '../../core/logger.ts'

function tempFile (t: { teardown: (fn: () => void) => void }, name: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-logger-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return join(dir, name)
}

/** Logs one line per level through a synchronous file destination; returns the file's lines. */
function logEveryLevel (file: string, priorityPrefix: boolean | undefined): string[] {
  const logger = createRootLogger('trace', { destination: pino.destination({ dest: file, sync: true }), ...(priorityPrefix !== undefined ? { priorityPrefix } : {}) })
  logger.trace('t')
  logger.debug('d')
  logger.info({ n: 1 }, 'i')
  logger.child({ component: 'c' }).warn('w')
  logger.error({ err: new Error('boom') }, 'e')
  logger.fatal('f')
  return readFileSync(file, 'utf8').split('\n').filter(line => line !== '')
}

t.test('with priorityPrefix every line starts with its sd-daemon priority, then the same JSON', async t => {
  const lines = logEveryLevel(tempFile(t, 'log'), true)
  t.same(lines.map(l => l.slice(0, 3)), ['<7>', '<7>', '<6>', '<4>', '<3>', '<2>'])
  const records = lines.map(l => JSON.parse(l.slice(3)) as { level: number, msg: string })
  t.same(records.map(r => [r.level, r.msg]), [[10, 't'], [20, 'd'], [30, 'i'], [40, 'w'], [50, 'e'], [60, 'f']])
})

t.test('without it (and by default when stdout is not the journal) lines are plain JSON', async t => {
  for (const priorityPrefix of [false, undefined]) {
    const lines = logEveryLevel(tempFile(t, 'log'), priorityPrefix)
    t.equal(lines.length, 6)
    t.ok(lines.every(l => l.startsWith('{"level":')), `plain JSON lines (priorityPrefix: ${priorityPrefix})`)
  }
})

t.test('journalPriorityPrefix maps pino levels to syslog priorities', async t => {
  t.same([10, 20, 30, 35, 40, 50, 60, 70].map(journalPriorityPrefix), ['<7>', '<7>', '<6>', '<6>', '<4>', '<3>', '<2>', '<2>'])
})

t.test('isJournalStream: JOURNAL_STREAM must name the very file the descriptor refers to', async t => {
  const file = tempFile(t, 'journal')
  const other = tempFile(t, 'other')
  const fd = openSync(file, 'w')
  const otherFd = openSync(other, 'w')
  t.teardown(() => { closeSync(fd); closeSync(otherFd) })
  const st = fstatSync(fd, { bigint: true })
  const stream = `${st.dev}:${st.ino}`
  t.equal(isJournalStream(fd, { JOURNAL_STREAM: stream }), true, 'device and inode match')
  t.equal(isJournalStream(otherFd, { JOURNAL_STREAM: stream }), false, 'inherited by a process whose output goes elsewhere')
  t.equal(isJournalStream(fd, {}), false, 'not set')
  for (const bad of ['', `${st.dev}`, `${st.dev}:`, `x:${st.ino}`, `${st.dev}:${st.ino}:1`, ` ${stream}`]) {
    t.equal(isJournalStream(fd, { JOURNAL_STREAM: bad }), false, `malformed ${JSON.stringify(bad)}`)
  }
  const closed = openSync(file, 'r')
  closeSync(closed)
  t.equal(isJournalStream(closed, { JOURNAL_STREAM: stream }), false, 'a closed descriptor is not the journal')
})
