/**
 * The root logger: pino JSON lines on stdout (journald keeps them under
 * systemd). Subsystems get `logger.child({ component })` from the runner.
 */
import { pino, type Logger, type DestinationStream } from 'pino'

export type { Logger }

export function createRootLogger (level: string, destination?: DestinationStream): Logger {
  return pino({ level, base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime }, destination ?? pino.destination({ fd: 1, sync: true }))
}
