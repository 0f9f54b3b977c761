/** agentctl locks: the device lock of every GPU (holder, its processes, depth, since, waiters). */
import type { LocksBody } from '../../agent/state/device-lock-schema.ts'
import type { Command } from './command.ts'
import { formatDuration, formatTable } from './table.ts'

export const locksCommand: Command = {
  summary: 'device locks of the GPUs: holder, its processes, depth, how long held, waiters in grant order',
  examples: [
    { what: 'who holds each GPU and who waits', run: 'agentctl locks' },
  ],
  async run ({ client, signal }) {
    const locks = await client.locks({ signal })
    return { json: locks, human: renderLocks(locks, Date.now()) }
  },
}

/** One row per GPU; SINCE is how long the current hold has lasted at `nowMs`. */
export function renderLocks (body: LocksBody, nowMs: number): string {
  const rows = body.gpus.map(lock => [
    String(lock.gpu),
    lock.holder ?? '-',
    lock.pids.length > 0 ? lock.pids.join(',') : '-',
    String(lock.depth),
    lock.heldSinceMs !== null ? `${formatDuration(Math.max(0, nowMs - lock.heldSinceMs) / 1000)} ago` : '-',
    lock.waiters.length > 0 ? lock.waiters.map(w => w.holder).join(', ') : '-',
  ])
  return formatTable(['GPU', 'HOLDER', 'PID', 'DEPTH', 'SINCE', 'WAITERS'], rows)
}
