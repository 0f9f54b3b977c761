// The heap trim (agent/memory-trim.ts): when it collects, and what it says without --expose-gc.
import t from 'tap'
import pino from 'pino'
import { setTimeout as sleep } from 'node:timers/promises'
import { createMemoryTrim } from '../../agent/memory-trim.ts'

const MiB = 2 ** 20

/** A logger whose lines the test can read. */
function recordingLogger (): { logger: pino.Logger, lines: Array<{ level: number, msg: string }> } {
  const lines: Array<{ level: number, msg: string }> = []
  const logger = pino({ level: 'debug' }, { write: (line: string) => { lines.push(JSON.parse(line)) } })
  return { logger, lines }
}

t.test('the first trim comes settleMs after start, whatever the heap; later ones only when enough of the heap is free', async t => {
  let heap = { heapUsed: 30 * MiB, heapTotal: 40 * MiB, rss: 100 * MiB }
  let collections = 0
  const { logger, lines } = recordingLogger()
  const trim = createMemoryTrim({ settleMs: 50, checkIntervalMs: 30 }, { logger, gc: () => { collections++ }, memoryUsage: () => heap })
  t.teardown(() => trim.stop())
  trim.start()
  t.equal(collections, 0, 'nothing at start')
  await sleep(150)
  t.equal(collections, 1, 'one trim after settling, although only 10 MiB are free')
  t.ok(lines.some(l => l.msg === 'heap trimmed' && l.level === 20), 'logged at debug')

  // 14 MiB free: under minFreeBytes (16 MiB).
  heap = { heapUsed: 30 * MiB, heapTotal: 44 * MiB, rss: 100 * MiB }
  await sleep(150)
  t.equal(collections, 1, '14 MiB free: no trim')
  // 18 MiB free over 40 in use: less than half of the use.
  heap = { heapUsed: 40 * MiB, heapTotal: 58 * MiB, rss: 100 * MiB }
  await sleep(150)
  t.equal(collections, 1, '18 MiB free for 40 in use: no trim')
  // 21 MiB free over 33 in use (what an idle agent of 20 held).
  heap = { heapUsed: 33 * MiB, heapTotal: 54 * MiB, rss: 133 * MiB }
  await sleep(100)
  t.ok(collections >= 2, `21 MiB free for 33 in use: trimmed (${collections} collections)`)
  trim.stop()
  const stoppedAt = collections
  await sleep(150)
  t.equal(collections, stoppedAt, 'nothing after stop')
  t.equal(trim.trims(), collections)
})

t.test('without gc exposed it warns once and never runs', async t => {
  const { logger, lines } = recordingLogger()
  const exposed = (globalThis as { gc?: unknown }).gc
  t.equal(exposed, undefined, 'tap runs tests without --expose-gc')
  const trim = createMemoryTrim({ settleMs: 10, checkIntervalMs: 10 }, { logger })
  trim.start()
  await sleep(60)
  trim.stop()
  t.equal(trim.trims(), 0)
  const warnings = lines.filter(l => l.level === 40)
  t.equal(warnings.length, 1)
  t.match(warnings[0]!.msg, /--expose-gc/)
})
