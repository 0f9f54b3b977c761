/**
 * One agent per state directory. Before anything reads or writes the state
 * directory, the agent takes an exclusive flock(2) on `<stateDir>/agentd.lock`
 * (native tryLockExclusive) and keeps the descriptor open for the life of the
 * process. The kernel drops the lock when the process dies, however it dies,
 * so a `kill -9`ed agent never blocks the next start, and no stale-lock
 * guesswork is needed.
 *
 * The file also holds the holder's record (`{"pid","startTicks","lock"}`, one
 * JSON line), written once the lock is held, so a refused agent can name the
 * running one. A refused agent only opens the file (O_CREAT without
 * truncation) and reads it: it changes no byte and no mtime in the directory.
 *
 * Without the native addon (a broken build the agent still runs with, see the
 * `native` subsystem) there is no flock: the record itself is the lock (`lock:
 * "pid"`), honoured while its process lives (pid and kernel start time from
 * /proc, so a reused pid is not mistaken for the holder). That check and the
 * write after it are not atomic; it keeps a second agent off a running one,
 * not two agents started in the same instant. A flock holder also refuses a
 * live "pid" holder, so the two kinds exclude each other.
 */
import { open, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { AgentError } from '../core/errors.ts'
import { mkdirDurably } from '../core/durable-file.ts'
import { capabilities, tryLockExclusive } from '../native/index.ts'

export const lockFileName = 'agentd.lock'

/** What the lock file says about its holder. */
export interface LockHolder {
  pid: number
  /** Field 22 of /proc/<pid>/stat (clock ticks after boot): tells a reused pid apart. */
  startTicks: string
  /** How the holder locks: flock (native addon) or its live pid alone. */
  lock: 'flock' | 'pid'
}

export interface StateDirLock {
  /** The lock file. */
  readonly path: string
  readonly holder: LockHolder
  /** Clears the record and closes the descriptor (drops the flock); idempotent. */
  release(): Promise<void>
}

export interface StateDirLockOptions {
  stateDir: string
  /** How long a refused agent waits for the holder's record to appear, ms. Default 500. */
  recordWaitMs?: number
}

export interface StateDirLockComponents {
  logger: Logger
  /** The flock; null = no native addon (the pid record is the lock). Default: the addon's when loaded. */
  tryLock?: ((fd: number) => boolean) | null
}

/**
 * Takes the state directory (creating it, mode 0750, when missing). Throws
 * ERR_STATE_DIR_LOCKED naming the directory and the running agent's pid when
 * another agent holds it.
 */
export async function lockStateDir (options: StateDirLockOptions, components: StateDirLockComponents): Promise<StateDirLock> {
  const { stateDir } = options
  const tryLock = components.tryLock !== undefined ? components.tryLock : (capabilities.addon.loaded ? tryLockExclusive : null)
  await mkdirDurably(stateDir, 0o750)
  const path = join(stateDir, lockFileName)
  const handle = await open(path, 'a+', 0o640)
  try {
    if (tryLock !== null && !tryLock(handle.fd)) {
      const holder = await waitForRecord(path, options.recordWaitMs ?? 500)
      throw lockedError(stateDir, holder)
    }
    const previous = parseRecord(await readFile(path, 'utf8'))
    if (previous !== undefined && previous.pid !== process.pid && (tryLock === null || previous.lock === 'pid') && await isRunning(previous)) {
      throw lockedError(stateDir, previous)
    }
    if (tryLock === null) {
      components.logger.warn({ stateDir }, 'no native addon: the state directory is guarded by a pid check, not a flock')
    }
    const holder: LockHolder = { pid: process.pid, startTicks: await startTicksOf(process.pid) ?? '', lock: tryLock !== null ? 'flock' : 'pid' }
    await handle.truncate(0)
    await handle.write(JSON.stringify(holder) + '\n', 0)
    let released: Promise<void> | undefined
    return {
      path,
      holder,
      release: () => released ??= (async () => {
        await handle.truncate(0).catch(() => {})
        await handle.close()
      })(),
    }
  } catch (err) {
    await handle.close()
    throw err
  }
}

function lockedError (stateDir: string, holder: LockHolder | undefined): AgentError {
  const who = holder !== undefined ? `agentd pid ${holder.pid}` : 'another agentd (its pid is not recorded yet)'
  return new AgentError('ERR_STATE_DIR_LOCKED',
    `state directory ${stateDir} is in use by ${who}; stop that agent first, or give this one another --state-dir`,
    { details: { stateDir, pid: holder?.pid } })
}

/** The holder's record; it may lag the flock by a moment (written after it is taken). */
async function waitForRecord (path: string, waitMs: number): Promise<LockHolder | undefined> {
  const deadline = performance.now() + waitMs
  for (;;) {
    const holder = parseRecord(await readFile(path, 'utf8').catch(() => ''))
    if (holder !== undefined || performance.now() >= deadline) return holder
    await new Promise(resolve => setTimeout(resolve, 20))
  }
}

function parseRecord (text: string): LockHolder | undefined {
  try {
    const record = JSON.parse(text) as Partial<LockHolder>
    if (Number.isSafeInteger(record.pid) && record.pid! > 0 && typeof record.startTicks === 'string' && (record.lock === 'flock' || record.lock === 'pid')) {
      return record as LockHolder
    }
  } catch {}
  return undefined
}

/** Whether the recorded process still runs: same pid, same kernel start time. */
async function isRunning (holder: LockHolder): Promise<boolean> {
  const ticks = await startTicksOf(holder.pid)
  return ticks !== undefined && ticks === holder.startTicks
}

async function startTicksOf (pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined)
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields resume after the last ')'.
  return stat?.slice(stat.lastIndexOf(')') + 2).split(' ')[19]
}
