/**
 * Which client process holds or waits for a device lock, and whether it still
 * runs. A pid alone is not an identity: the kernel reuses pids, so a process
 * is `(pid, start time)`, the start time being field 22 of /proc/<pid>/stat
 * (clock ticks since boot, fixed for the life of the process). A process is
 * gone when its stat file is missing, its start time differs (the pid was
 * reused), or it is a zombie (exited, not yet reaped by its parent).
 */
import { readFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'

export interface ProcessIdentity {
  pid: number
  /** Start time in clock ticks since boot, as the decimal string of /proc/<pid>/stat field 22. */
  startTicks: string
}

export interface ProcessTable {
  /**
   * The identity of a running process, or null when `pid` does not run (or
   * already exited). Synchronous so that a lock request is queued in the
   * order it arrived (FIFO) without an await in between.
   */
  identify(pid: number): ProcessIdentity | null
  /** True while the very process `identity` names still runs (not a reused pid, not a zombie). */
  isRunning(identity: ProcessIdentity): Promise<boolean>
}

interface StatFields { state: string, startTicks: string }

/**
 * Parses /proc/<pid>/stat. The command name (field 2) is in parentheses and
 * may itself contain spaces and parentheses, so fields are counted from the
 * last ')'. Returns null for text that is not a stat line.
 */
export function parseProcStat (text: string): StatFields | null {
  const close = text.lastIndexOf(')')
  if (close < 0) return null
  // After ") ": field 3 (state) is at index 0, field 22 (starttime) at index 19.
  const fields = text.slice(close + 2).trim().split(' ')
  const state = fields[0]
  const startTicks = fields[19]
  if (state === undefined || startTicks === undefined || !/^\d+$/.test(startTicks)) return null
  return { state, startTicks }
}

/** Zombie (Z) and dead (X, x) processes have exited; their pid only awaits reaping. */
function hasExited (state: string): boolean {
  return state === 'Z' || state === 'X' || state === 'x'
}

/** The process table of this machine, read from procfs. */
export function createProcfsProcessTable (procRoot = '/proc'): ProcessTable {
  return {
    identify (pid) {
      if (!Number.isSafeInteger(pid) || pid <= 0) return null
      let text: string
      try {
        text = readFileSync(`${procRoot}/${pid}/stat`, 'utf8')
      } catch {
        return null
      }
      const stat = parseProcStat(text)
      if (stat === null || hasExited(stat.state)) return null
      return { pid, startTicks: stat.startTicks }
    },
    async isRunning (identity) {
      let text: string
      try {
        text = await readFile(`${procRoot}/${identity.pid}/stat`, 'utf8')
      } catch {
        return false
      }
      const stat = parseProcStat(text)
      return stat !== null && !hasExited(stat.state) && stat.startTicks === identity.startTicks
    },
  }
}
