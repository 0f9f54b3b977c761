/**
 * Ordered subsystem lifecycle (containerd's plugin registry, Nomad's agent).
 * Subsystems are declared as a typed, ordered list of `{ id, requires, create }`;
 * the runner creates and starts them in order and stops them in reverse.
 * Each ends up `ok`, `skipped` (with the reason: its factory declined, e.g. no
 * hardware, or something it requires is not ok) or `failed` (with the error).
 * A failure of a `critical` subsystem aborts start-up: everything already
 * started is stopped again and `startAll` rejects.
 *
 * A stop during start-up (a signal while subsystems still start): no further
 * subsystem is started, the one starting finishes (its signal is aborted) or
 * fails, and then everything started is stopped; `startAll` resolves, since a
 * failure caused by the stop is not a start-up failure.
 */
import type { Logger } from 'pino'

/** A started subsystem. `stop()` must be idempotent. */
export interface Subsystem {
  start?(options: { signal: AbortSignal }): Promise<void>
  stop(): Promise<void>
}

/** A factory's way of saying "not on this node" — not an error. */
export interface SkipSubsystem {
  skip: string
}

export interface SubsystemContext {
  logger: Logger
  signal: AbortSignal
  /** A subsystem listed in `requires` (only those are guaranteed to be ok). */
  get<T extends Subsystem>(id: string): T
}

export interface SubsystemSpec {
  id: string
  /** Ids of earlier subsystems that must be ok for this one to start. */
  requires: readonly string[]
  /** A failure stops the agent instead of being reported. Default: false. */
  critical?: boolean
  create(context: SubsystemContext): Promise<Subsystem | SkipSubsystem>
}

export type SubsystemState = 'pending' | 'ok' | 'skipped' | 'failed' | 'stopped'

export interface SubsystemRecord {
  id: string
  state: SubsystemState
  /** Why it was skipped or failed; absent when ok. */
  reason?: string
  /** Time its create + start took, in milliseconds. */
  startMs?: number
}

export interface SubsystemRunner {
  /** Starts every subsystem in order; rejects only when a critical one fails. */
  startAll(): Promise<void>
  /** Stops started subsystems in reverse order; idempotent; never rejects. */
  stopAll(): Promise<void>
  records(): SubsystemRecord[]
  get<T extends Subsystem>(id: string): T | undefined
}

export interface SubsystemRunnerComponents {
  logger: Logger
}

export function createSubsystemRunner (specs: readonly SubsystemSpec[], components: SubsystemRunnerComponents): SubsystemRunner {
  validateOrder(specs)
  const records = new Map<string, SubsystemRecord>(specs.map(s => [s.id, { id: s.id, state: 'pending' }]))
  const started: Array<{ id: string, subsystem: Subsystem }> = []
  const controller = new AbortController()
  const { logger } = components
  let stopping: Promise<void> | undefined
  let starting: Promise<void> | undefined

  const instance = (id: string): Subsystem | undefined => started.find(s => s.id === id)?.subsystem

  async function startOne (spec: SubsystemSpec): Promise<void> {
    const record = records.get(spec.id)!
    const notOk = spec.requires.find(r => records.get(r)!.state !== 'ok')
    if (notOk !== undefined) {
      Object.assign(record, { state: 'skipped', reason: `requires ${notOk} (${records.get(notOk)!.state})` })
      logger.warn({ subsystem: spec.id, reason: record.reason }, 'subsystem skipped')
      return
    }
    const began = performance.now()
    const context: SubsystemContext = {
      logger: logger.child({ component: spec.id }),
      signal: controller.signal,
      get: <T extends Subsystem>(id: string): T => {
        if (!spec.requires.includes(id)) throw new Error(`subsystem ${spec.id} asked for ${id} without requiring it`)
        return instance(id) as T
      },
    }
    try {
      const created = await spec.create(context)
      if ('skip' in created) {
        Object.assign(record, { state: 'skipped', reason: created.skip })
        logger.info({ subsystem: spec.id, reason: created.skip }, 'subsystem skipped')
        return
      }
      started.push({ id: spec.id, subsystem: created })
      await created.start?.({ signal: controller.signal })
      record.state = 'ok'
      record.startMs = Math.round(performance.now() - began)
      logger.info({ subsystem: spec.id, startMs: record.startMs }, 'subsystem started')
    } catch (err) {
      Object.assign(record, { state: 'failed', reason: (err as Error).message })
      logger.error({ subsystem: spec.id, err }, 'subsystem failed')
      if (spec.critical === true) throw err
    }
  }

  /** Stops what was started, in reverse order, once (stopping ??=). */
  const stopStarted = (): Promise<void> => {
    stopping ??= (async () => {
      for (const { id, subsystem } of started.reverse()) {
        try {
          await subsystem.stop()
        } catch (err) {
          logger.error({ subsystem: id, err }, 'subsystem stop failed')
        }
        const record = records.get(id)!
        if (record.state === 'ok') record.state = 'stopped'
      }
    })()
    return stopping
  }

  return {
    startAll () {
      starting ??= (async () => {
        for (const spec of specs) {
          if (controller.signal.aborted) return
          try {
            await startOne(spec)
          } catch (err) {
            if (controller.signal.aborted) return
            controller.abort()
            await stopStarted()
            throw err
          }
        }
      })()
      return starting
    },
    async stopAll () {
      controller.abort()
      // A subsystem still starting is stopped with the others once its start has settled.
      await starting?.catch(() => {})
      await stopStarted()
    },
    records: () => specs.map(s => ({ ...records.get(s.id)! })),
    get: <T extends Subsystem>(id: string) => instance(id) as T | undefined,
  }
}

function validateOrder (specs: readonly SubsystemSpec[]): void {
  const seen = new Set<string>()
  for (const spec of specs) {
    if (seen.has(spec.id)) throw new Error(`duplicate subsystem id ${spec.id}`)
    for (const r of spec.requires) {
      if (!seen.has(r)) throw new Error(`subsystem ${spec.id} requires ${r}, which is not listed before it`)
    }
    seen.add(spec.id)
  }
}
