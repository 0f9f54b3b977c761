/**
 * The root logger: pino JSON lines on stdout (journald keeps them under
 * systemd). Subsystems get `logger.child({ component })` from the runner.
 *
 * Under systemd each line starts with its syslog priority in the sd-daemon
 * form (`<3>{"level":50,...}`), which journald strips and stores as the
 * entry's PRIORITY, so `journalctl -p err -u agentd` shows errors and worse.
 * Anywhere else (a terminal, a file, a pipe, tests) lines are plain JSON.
 */
import { fstatSync } from 'node:fs'
import { pino, type Logger, type DestinationStream } from 'pino'

export type { Logger }

export interface RootLoggerOptions {
  /** Where lines go. Default: file descriptor 1 through pino's synchronous destination. */
  destination?: DestinationStream
  /**
   * Start every line with its syslog priority (`<3>` error, see
   * `journalPriorityPrefix`). Default: `isJournalStream(1)`, i.e. only when
   * stdout is the journal stream systemd connected it to.
   */
  priorityPrefix?: boolean
}

export function createRootLogger (level: string, options: RootLoggerOptions = {}): Logger {
  const destination = options.destination ?? pino.destination({ fd: 1, sync: true })
  const prefixed = options.priorityPrefix ?? isJournalStream(1)
  return pino({ level, base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime }, prefixed ? withPriorityPrefix(destination) : destination)
}

/**
 * True when file descriptor `fd` is the stream systemd connected to the
 * journal: `JOURNAL_STREAM` ("<device>:<inode>", decimal, set by systemd for
 * StandardOutput=/StandardError=journal) names the file `fd` refers to. The
 * variable alone is not enough (systemd.exec(5)): a service's children inherit
 * it with their output redirected elsewhere, e.g. an agent a test or a reward
 * worker starts with its stdout on a pipe.
 */
export function isJournalStream (fd: number, env: NodeJS.ProcessEnv = process.env): boolean {
  const match = /^(\d+):(\d+)$/.exec(env.JOURNAL_STREAM ?? '')
  if (match === null) return false
  try {
    const stat = fstatSync(fd, { bigint: true })
    return stat.dev === BigInt(match[1]!) && stat.ino === BigInt(match[2]!)
  } catch {
    return false // fd closed
  }
}

/**
 * The sd-daemon(3) prefix of a pino level: fatal `<2>` (crit), error `<3>`,
 * warn `<4>`, info `<6>`, debug and trace `<7>`. journald parses it on stream
 * connections with SyslogLevelPrefix=yes (its default).
 */
export function journalPriorityPrefix (level: number): string {
  if (level >= 60) return '<2>'
  if (level >= 50) return '<3>'
  if (level >= 40) return '<4>'
  if (level >= 30) return '<6>'
  return '<7>'
}

/**
 * Wraps a destination so that each line starts with its priority. pino hands
 * a stream that sets its metadata symbol the line's numeric level in
 * `lastLevel` just before `write` (as for pino.multistream), so the level is
 * not parsed back out of the JSON. Per line that costs pino's metadata
 * assignments and the prefix's concatenation; the line stays one write.
 */
function withPriorityPrefix (destination: DestinationStream): DestinationStream {
  const flush = (destination as { flush?: (cb: (err?: Error) => void) => void }).flush
  // Every field pino sets is declared here, so the object keeps one shape.
  const stream = {
    [pino.symbols.needsMetadataGsym]: true as const,
    lastLevel: 30,
    lastTime: '',
    lastMsg: '',
    lastObj: {} as object,
    lastLogger: undefined as Logger | undefined,
    write (line: string): void {
      destination.write(journalPriorityPrefix(stream.lastLevel) + line)
    },
    flush (cb: (err?: Error) => void): void {
      if (flush !== undefined) flush.call(destination, cb)
      else cb()
    },
  }
  return stream
}
