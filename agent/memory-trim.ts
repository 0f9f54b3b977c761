/**
 * Gives the V8 heap's free pages back to the system after a burst of
 * allocation. A start-up and a mesh join (twenty handshakes, state syncs,
 * first compilations) commit heap pages that an idle agent then keeps: at 20
 * agents, an idle one held 54 MB of V8 heap for 33 MB in use, and V8's own
 * memory reducer did not shrink it. One compacting collection returns them
 * (RSS 133 → 116 MB there, test/bench/mesh.bench.ts).
 *
 * Contract: start() once the agent has started. The first trim runs settleMs
 * later; then every checkIntervalMs, a trim runs when the heap holds at least
 * minFreeBytes more than it uses and at least half as much again as it uses.
 * A trim is one full, compacting collection of the main heap (tens of ms on
 * the event loop for a heap of this size); each is logged at debug level
 * with the heap before and after.
 *
 * It needs `gc` exposed (--expose-gc, agent/node-flags.ts, which every way of
 * starting agentd passes). Without it, start() says so once (warn) and
 * nothing runs.
 */
import type { Logger } from 'pino'

export interface MemoryTrimOptions {
  /** Delay of the first trim after start(), ms. Default 10000. */
  settleMs?: number
  /** How often the heap is checked, ms. Default 60000. */
  checkIntervalMs?: number
  /** Free heap below this is never worth a collection, bytes. Default 16 MiB. */
  minFreeBytes?: number
}

export interface MemoryTrim {
  start(): void
  stop(): void
  /** Trims run so far. */
  trims(): number
}

type Collect = () => void

export interface MemoryTrimComponents {
  logger: Logger
  /** The collector; default the `gc` that --expose-gc puts on the global object. */
  gc?: Collect
  /** Default process.memoryUsage. */
  memoryUsage?: () => Pick<NodeJS.MemoryUsage, 'heapUsed' | 'heapTotal' | 'rss'>
}

export function createMemoryTrim (options: MemoryTrimOptions, components: MemoryTrimComponents): MemoryTrim {
  const settleMs = options.settleMs ?? 10_000
  const checkIntervalMs = options.checkIntervalMs ?? 60_000
  const minFreeBytes = options.minFreeBytes ?? 16 * 2 ** 20
  const { logger } = components
  const gc = components.gc ?? (globalThis as { gc?: Collect }).gc
  const memoryUsage = components.memoryUsage ?? (() => process.memoryUsage())
  let timer: NodeJS.Timeout | undefined
  let count = 0

  const trim = (): void => {
    const before = memoryUsage()
    const began = performance.now()
    gc!()
    count++
    const after = memoryUsage()
    const mib = (bytes: number): number => Math.round(bytes / 2 ** 17) / 8
    logger.debug({
      pauseMs: Math.round(performance.now() - began),
      heapMiB: { before: [mib(before.heapUsed), mib(before.heapTotal)], after: [mib(after.heapUsed), mib(after.heapTotal)] },
      rssMiB: { before: mib(before.rss), after: mib(after.rss) },
    }, 'heap trimmed')
  }
  const check = (): void => {
    const { heapUsed, heapTotal } = memoryUsage()
    const free = heapTotal - heapUsed
    if (free >= minFreeBytes && free >= heapUsed / 2) trim()
  }

  return {
    start () {
      if (gc === undefined) {
        logger.warn('heap trimming is off: Node.js runs without --expose-gc (start agentd with the flags of agent/node-flags.ts)')
        return
      }
      if (timer !== undefined) return
      timer = setTimeout(() => {
        trim()
        timer = setInterval(check, checkIntervalMs).unref()
      }, settleMs).unref()
    },
    stop () {
      clearTimeout(timer) // also clears an interval
    },
    trims: () => count,
  }
}
