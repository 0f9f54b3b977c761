/**
 * Processes of this machine, from procfs: which client process holds or waits
 * for a device lock, whether it still runs, and whose child it is (a reward
 * worker's requests may come from a process it started). A pid alone is not an identity: the kernel reuses pids, so a process
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
  /** True when `pid` is `ancestor` or one of its descendants (its parent chain, at most 32 steps, reaches it). */
  descendsFrom(pid: number, ancestor: number): boolean
}

interface StatFields { state: string, parent: number, startTicks: string }

/**
 * Parses /proc/<pid>/stat. The command name (field 2) is in parentheses and
 * may itself contain spaces and parentheses, so fields are counted from the
 * last ')'. Returns null for text that is not a stat line.
 */
export function parseProcStat (text: string): StatFields | null {
  const close = text.lastIndexOf(')')
  if (close < 0) return null
  // After ") ": field 3 (state) is at index 0, field 4 (ppid) at 1, field 22 (starttime) at index 19.
  const fields = text.slice(close + 2).trim().split(' ')
  const state = fields[0]
  const parent = fields[1]
  const startTicks = fields[19]
  if (state === undefined || parent === undefined || !/^\d+$/.test(parent) || startTicks === undefined || !/^\d+$/.test(startTicks)) return null
  return { state, parent: Number(parent), startTicks }
}

/** Zombie (Z) and dead (X, x) processes have exited; their pid only awaits reaping. */
function hasExited (state: string): boolean {
  return state === 'Z' || state === 'X' || state === 'x'
}

/** The process table of this machine, read from procfs. */
export function createProcfsProcessTable (procRoot = '/proc'): ProcessTable {
  const statOf = (pid: number): StatFields | null => {
    try {
      return parseProcStat(readFileSync(`${procRoot}/${pid}/stat`, 'utf8'))
    } catch {
      return null
    }
  }
  return {
    descendsFrom (pid, ancestor) {
      for (let p = pid, steps = 0; p > 1 && steps <= 32; steps++) {
        if (p === ancestor) return true
        const stat = statOf(p)
        if (stat === null) return false
        p = stat.parent
      }
      return false
    },
    identify (pid) {
      if (!Number.isSafeInteger(pid) || pid <= 0) return null
      const stat = statOf(pid)
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
