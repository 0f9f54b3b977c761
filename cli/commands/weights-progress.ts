/** The progress bar of `weights publish` and `weights pull`, fed from the agent's GET /v1/weights. */
import type { AgentClient } from '../../agent/client/client.ts'
import type { VersionList } from '../../agent/api/wire/weights.ts'
import { createProgressBar, type ProgressStream } from './progress-bar.ts'

/** Where the transfer stands in the agent's list; undefined while it is not listed (not started, or done). */
export type FindTransfer = (list: VersionList) => { doneBytes: number, totalBytes: number, label: string } | undefined

export interface WeightsProgressOptions {
  label: string
  /** --quiet or --json. */
  quiet: boolean
  /** Default process.stderr (a bar only when it is a terminal). */
  stream?: ProgressStream | undefined
  /** How often the agent is asked, ms. Default 200. */
  intervalMs?: number
}

/**
 * Draws the transfer `find` picks out of GET /v1/weights until `stop()`,
 * which erases the bar. When no bar is drawn (not a terminal, --quiet,
 * --json) the agent is not asked at all.
 */
export function followWeightsProgress (client: AgentClient, find: FindTransfer, options: WeightsProgressOptions): { stop(): void } {
  const bar = createProgressBar({ label: options.label, quiet: options.quiet, ...(options.stream !== undefined ? { stream: options.stream } : {}) })
  if (!bar.visible) return { stop: () => {} }
  const stopped = new AbortController()
  const intervalMs = options.intervalMs ?? 200
  const loop = async (): Promise<void> => {
    while (!stopped.signal.aborted) {
      const list = await client.weights({ signal: stopped.signal }).catch(() => undefined)
      const transfer = list !== undefined ? find(list) : undefined
      if (transfer !== undefined && !stopped.signal.aborted) bar.update(transfer.doneBytes, transfer.totalBytes, transfer.label)
      await new Promise(resolve => setTimeout(resolve, intervalMs))
    }
  }
  void loop()
  return { stop: () => { stopped.abort(); bar.stop() } }
}
