/**
 * Ordered subsystem lifecycle (containerd's plugin registry, Nomad's agent).
 * Subsystems are declared as a typed, ordered list of `{ id, requires, create }`;
 * the runner creates and starts them in order and stops them in reverse.
 * Each ends up `ok`, `skipped` (with the reason: its factory declined, e.g. no
 * hardware, or something it requires is not ok) or `failed` (with the error).
 * A failure of a `critical` subsystem aborts start-up: everything already
 * started is stopped again and `startAll` rejects.
 *
 * Each subsystem hands out a handle (the service others use), typed by the
 * runner's handle map `H` (id → handle type). The runner publishes a handle
 * when its subsystem is ok and withdraws it before stopping it: a subsystem
 * gets the handles of those it `requires` with `context.get` (guaranteed,
 * they are ok when it is created) and may look up any other with
 * `context.find` (undefined unless ok: for one started later, read it when
 * used, not when created). The daemon reads them with `runner.handle`.
 *
 * A stop during start-up (a signal while subsystems still start): no further
 * subsystem is started, the one starting finishes (its signal is aborted) or
 * fails, and then everything started is stopped; `startAll` resolves, since a
 * failure caused by the stop is not a start-up failure.
 */
import type { Logger } from 'pino'

/** The lifecycle the runner drives. `stop()` must be idempotent. */
export interface Subsystem {
  start?(options: { signal: AbortSignal }): Promise<void>
  stop(): Promise<void>
}

/**
 * What a factory creates: the lifecycle and the handle the runner publishes
 * while the subsystem is ok. The handle may be left out when its type admits
 * undefined (a subsystem nothing looks up).
 */
export type CreatedSubsystem<Handle> = Subsystem & (undefined extends Handle ? { handle?: Handle } : { handle: Handle })

/** A factory's way of saying "not on this node" — not an error. */
export interface SkipSubsystem {
  skip: string
}

/** Ids of the handle map H. */
export type SubsystemId<H> = keyof H & string

export interface SubsystemContext<H, Requires extends SubsystemId<H> = SubsystemId<H>> {
  logger: Logger
  signal: AbortSignal
  /** The handle of a subsystem listed in `requires` (they are ok when this one is created). */
  get<K extends Requires>(id: K): H[K]
  /** The handle of any subsystem while it is ok; undefined before it started, once it stops, or if it never did. */
  find<K extends SubsystemId<H>>(id: K): H[K] | undefined
}

export interface SubsystemSpec<H, Id extends SubsystemId<H> = SubsystemId<H>, Requires extends SubsystemId<H> = SubsystemId<H>> {
  id: Id
  /** Ids of earlier subsystems that must be ok for this one to start; the first that is not is the skip reason. */
  requires: readonly Requires[]
  /** A failure stops the agent instead of being reported. Default: false. */
  critical?: boolean
  create(context: SubsystemContext<H, Requires>): Promise<CreatedSubsystem<H[Id]> | SkipSubsystem>
}

/**
 * Checks a spec against the handle map H at compile time: `create` returns
 * the handle type of its `id`, and `context.get` accepts only ids listed in
 * `requires`. `const subsystem = subsystemSpecOf<Handles>()`, then
 * `subsystem({ id, requires, create })` for each entry of the list.
 */
export function subsystemSpecOf<H> () {
  return <Id extends SubsystemId<H>, Requires extends SubsystemId<H> = never>(spec: SubsystemSpec<H, Id, Requires>): SubsystemSpec<H> =>
    spec as unknown as SubsystemSpec<H>
}

/** The common case: the service is the handle and has its own start/stop (sync or async). */
export function serviceSubsystem<S extends { start?(options: { signal: AbortSignal }): unknown, stop(): unknown }> (service: S): Subsystem & { handle: S } {
  return {
    handle: service,
    async start (options) { await service.start?.(options) },
    async stop () { await service.stop() },
  }
}

/** A subsystem with nothing to start or stop, only a handle (e.g. a value read at start-up). */
export function constantSubsystem<Handle> (handle: Handle): Subsystem & { handle: Handle } {
  return { handle, stop: async () => {} }
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

export interface SubsystemRunner<H> {
  /** Starts every subsystem in order; rejects only when a critical one fails. */
  startAll(): Promise<void>
  /** Stops started subsystems in reverse order; idempotent; never rejects. */
  stopAll(): Promise<void>
  records(): SubsystemRecord[]
  /** The handle of a subsystem while it is ok (started, not stopping); undefined otherwise. */
  handle<K extends SubsystemId<H>>(id: K): H[K] | undefined
}

export interface SubsystemRunnerComponents {
  logger: Logger
}

export function createSubsystemRunner<H> (specs: ReadonlyArray<SubsystemSpec<H>>, components: SubsystemRunnerComponents): SubsystemRunner<H> {
  validateOrder(specs)
  const records = new Map<string, SubsystemRecord>(specs.map(s => [s.id, { id: s.id, state: 'pending' }]))
  /** Created subsystems, in creation order (a failed start is stopped too: it may hold resources). */
  const started: Array<{ id: string, subsystem: Subsystem }> = []
  /** Handles of the subsystems that are ok, by id. */
  const published = new Map<string, unknown>()
  const controller = new AbortController()
  const { logger } = components
  let stopping: Promise<void> | undefined
  let starting: Promise<void> | undefined

  const handle = <K extends SubsystemId<H>>(id: K): H[K] | undefined => published.get(id) as H[K] | undefined

  async function startOne (spec: SubsystemSpec<H>): Promise<void> {
    const record = records.get(spec.id)!
    const notOk = spec.requires.find(r => records.get(r)!.state !== 'ok')
    if (notOk !== undefined) {
      Object.assign(record, { state: 'skipped', reason: `requires ${notOk} (${records.get(notOk)!.state})` })
      logger.warn({ subsystem: spec.id, reason: record.reason }, 'subsystem skipped')
      return
    }
    const began = performance.now()
    const context: SubsystemContext<H> = {
      logger: logger.child({ component: spec.id }),
      signal: controller.signal,
      get: id => {
        if (!spec.requires.includes(id)) throw new Error(`subsystem ${spec.id} asked for ${id} without requiring it`)
        if (!published.has(id)) throw new Error(`subsystem ${spec.id} asked for ${id}, which is ${records.get(id)!.state}`)
        return published.get(id) as H[typeof id]
      },
      find: handle,
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
      published.set(spec.id, (created as { handle?: unknown }).handle)
      logger.info({ subsystem: spec.id, startMs: record.startMs }, 'subsystem started')
    } catch (err) {
      Object.assign(record, { state: 'failed', reason: (err as Error).message })
      logger.error({ subsystem: spec.id, err }, 'subsystem failed')
      if (spec.critical === true) throw err
    }
  }

  /** Stops what was started, in reverse order, once (stopping ??=); each handle is withdrawn before its stop. */
  const stopStarted = (): Promise<void> => {
    stopping ??= (async () => {
      for (const { id, subsystem } of started.reverse()) {
        published.delete(id)
        const t0 = performance.now()
        try {
          await subsystem.stop()
          logger.debug({ subsystem: id, stopMs: Math.round(performance.now() - t0) }, 'subsystem stopped')
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
    handle,
  }
}

function validateOrder<H> (specs: ReadonlyArray<SubsystemSpec<H>>): void {
  const seen = new Set<string>()
  for (const spec of specs) {
    if (seen.has(spec.id)) throw new Error(`duplicate subsystem id ${spec.id}`)
    for (const r of spec.requires) {
      if (!seen.has(r)) throw new Error(`subsystem ${spec.id} requires ${r}, which is not listed before it`)
    }
    seen.add(spec.id)
  }
}
