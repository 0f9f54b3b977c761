// agentctl's progress bar: bytes, rate and time left on a terminal; nothing on a pipe or with --quiet.
import t from 'tap'
import { createProgressBar, type ProgressStream } from '../../../cli/commands/progress-bar.ts'

const MiB = 2 ** 20

/** A stand-in for stderr that records what is written. */
function stream (isTTY: boolean, columns = 120): ProgressStream & { text: () => string, lines: () => string[] } {
  const writes: string[] = []
  return {
    isTTY,
    columns,
    write: (s: string) => { writes.push(s); return true },
    text: () => writes.join(''),
    // What each redraw shows: the text between a carriage return and the erase-to-end.
    lines: () => writes.filter(w => w.startsWith('\r') && w.endsWith('\x1b[K')).map(w => w.slice(1, -3)).filter(l => l !== ''),
  }
}

t.test('on a terminal: bytes done of the total, the rate over the window and the time left at that rate', async t => {
  let now = 0
  const out = stream(true)
  const bar = createProgressBar({ label: 'pulling m', quiet: false, stream: out, now: () => now })
  t.ok(bar.visible)
  bar.update(0, 100 * MiB)
  t.match(out.lines().at(-1), /^pulling m {2}\[\.{20}\] {2}0 B \/ 100 MiB$/, 'no rate before half a second of samples')
  now = 1000
  bar.update(10 * MiB, 100 * MiB)
  t.equal(out.lines().at(-1), 'pulling m  [##..................]  10.0 MiB / 100 MiB  10.0 MiB/s  ETA 9.0s')
  now = 2000
  bar.update(30 * MiB, 100 * MiB)
  t.equal(out.lines().at(-1), 'pulling m  [######..............]  30.0 MiB / 100 MiB  15.0 MiB/s  ETA 4.7s', 'the rate of the last 2 s')
  now = 5000
  bar.update(30 * MiB, 100 * MiB)
  t.match(out.lines().at(-1), /0 B\/s {2}ETA -$/, 'a stall shows once it fills the 3 s window')
  now = 6000
  bar.update(100 * MiB, 100 * MiB)
  t.notMatch(out.lines().at(-1), /ETA/, 'no time left once done')
  bar.stop()
  t.ok(out.text().endsWith('\r\x1b[K'), 'stop erases the line')
  const written = out.text().length
  bar.stop()
  bar.update(1, 2)
  t.equal(out.text().length, written, 'nothing after stop; stop is idempotent')
})

t.test('a new stage (label) measures its rate from scratch; an unknown total shows bytes only', async t => {
  let now = 0
  const out = stream(true)
  const bar = createProgressBar({ label: 'reading m', quiet: false, stream: out, now: () => now })
  bar.update(0, 8 * MiB)
  now = 1000
  bar.update(8 * MiB, 8 * MiB)
  t.match(out.lines().at(-1), /^reading m .* 8\.0 MiB\/s$/)
  bar.update(0, 8 * MiB, 'checksumming m')
  t.match(out.lines().at(-1), /^checksumming m {2}\[\.{20}\] {2}0 B \/ 8\.0 MiB$/, 'no rate carried over')
  const unknown = createProgressBar({ label: 'pulling m', quiet: false, stream: out, now: () => now })
  unknown.update(0, 0)
  t.equal(out.lines().at(-1), 'pulling m  0 B')
})

t.test('the line is cut to the terminal width, so redrawing in place works', async t => {
  const out = stream(true, 30)
  createProgressBar({ label: 'pulling a-model-with-a-long-name', quiet: false, stream: out, now: () => 0 }).update(1, 2)
  t.equal(out.lines().at(-1)!.length, 29)
})

t.test('not a terminal, or --quiet: nothing is written', async t => {
  for (const [what, out, quiet] of [['a pipe', stream(false), false], ['--quiet on a terminal', stream(true), true]] as const) {
    const bar = createProgressBar({ label: 'pulling m', quiet, stream: out, now: () => 0 })
    t.notOk(bar.visible, what)
    bar.update(1, 2)
    bar.stop()
    t.equal(out.text(), '', what)
  }
})
