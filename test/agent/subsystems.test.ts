import t from 'tap'
import { pino } from 'pino'
import { constantSubsystem, createSubsystemRunner, serviceSubsystem, subsystemSpecOf, type SubsystemSpec, type Subsystem } from '../../agent/subsystems.ts'

/** Untyped ids for the lifecycle tests; the handle tests below use a typed map. */
type AnyHandles = Record<string, unknown>

const logger = pino({ level: 'silent' })

/** A spec that records start/stop into `events`. */
function recorded (events: string[], id: string, requires: string[] = [], behaviour: { failStart?: boolean, skip?: string, critical?: boolean, failStop?: boolean } = {}): SubsystemSpec<AnyHandles> {
  return {
    id,
    requires,
    critical: behaviour.critical ?? false,
    async create () {
      if (behaviour.skip !== undefined) return { skip: behaviour.skip }
      const subsystem: Subsystem = {
        async start () {
          if (behaviour.failStart === true) throw new Error(`${id} cannot start`)
          events.push(`start ${id}`)
        },
        async stop () {
          events.push(`stop ${id}`)
          if (behaviour.failStop === true) throw new Error(`${id} cannot stop`)
        },
      }
      return subsystem
    },
  }
}

t.test('starts in order, stops in reverse, records ok', async t => {
  const events: string[] = []
  const runner = createSubsystemRunner([recorded(events, 'a'), recorded(events, 'b', ['a']), recorded(events, 'c', ['b'])], { logger })
  await runner.startAll()
  t.same(runner.records().map(r => [r.id, r.state]), [['a', 'ok'], ['b', 'ok'], ['c', 'ok']])
  t.ok(runner.records().every(r => typeof r.startMs === 'number'), 'start time recorded')
  await runner.stopAll()
  await runner.stopAll()
  t.same(events, ['start a', 'start b', 'start c', 'stop c', 'stop b', 'stop a'], 'stop is idempotent')
  t.same(runner.records().map(r => r.state), ['stopped', 'stopped', 'stopped'])
})

t.test('skipped and failed subsystems are reported; dependents are skipped with the reason', async t => {
  const events: string[] = []
  const runner = createSubsystemRunner([
    recorded(events, 'gpu', [], { skip: 'no CUDA device' }),
    recorded(events, 'lock', ['gpu']),
    recorded(events, 'flaky', [], { failStart: true }),
    recorded(events, 'user', ['flaky']),
    recorded(events, 'api'),
  ], { logger })
  await runner.startAll()
  t.same(runner.records(), [
    { id: 'gpu', state: 'skipped', reason: 'no CUDA device' },
    { id: 'lock', state: 'skipped', reason: 'requires gpu (skipped)' },
    { id: 'flaky', state: 'failed', reason: 'flaky cannot start' },
    { id: 'user', state: 'skipped', reason: 'requires flaky (failed)' },
    { id: 'api', state: 'ok', startMs: runner.records()[4]!.startMs },
  ])
  await runner.stopAll()
  t.same(events, ['start api', 'stop api', 'stop flaky'], 'a subsystem whose start failed is still stopped (it may hold resources)')
})

t.test('a critical failure stops what started and rejects', async t => {
  const events: string[] = []
  const runner = createSubsystemRunner([
    recorded(events, 'a'),
    recorded(events, 'api', ['a'], { failStart: true, critical: true }),
    recorded(events, 'later'),
  ], { logger })
  await t.rejects(runner.startAll(), /api cannot start/)
  t.same(events, ['start a', 'stop api', 'stop a'])
  t.equal(runner.records()[2]!.state, 'pending', 'nothing after the failure was started')
})

t.test('a stop that throws does not prevent the others from stopping', async t => {
  const events: string[] = []
  const runner = createSubsystemRunner([recorded(events, 'a'), recorded(events, 'b', [], { failStop: true })], { logger })
  await runner.startAll()
  await runner.stopAll()
  t.same(events, ['start a', 'start b', 'stop b', 'stop a'])
})

t.test('the list is validated: unique ids, requires point backwards, get only what is required', async t => {
  const events: string[] = []
  t.throws(() => createSubsystemRunner([recorded(events, 'a'), recorded(events, 'a')], { logger }), /duplicate subsystem id a/)
  t.throws(() => createSubsystemRunner([recorded(events, 'a', ['b']), recorded(events, 'b')], { logger }), /requires b, which is not listed before it/)
  const runner = createSubsystemRunner<AnyHandles>([
    recorded(events, 'a'),
    { id: 'b', requires: [], async create (ctx) { ctx.get('a'); return { stop: async () => {} } } },
  ], { logger })
  await runner.startAll()
  t.match(runner.records()[1], { state: 'failed', reason: /asked for a without requiring it/ })
  await runner.stopAll()
})

t.test('subsystems get an abort signal that fires on stop', async t => {
  let seen: AbortSignal | undefined
  const runner = createSubsystemRunner<AnyHandles>([{ id: 'loop', requires: [], async create (ctx) { seen = ctx.signal; return { stop: async () => {} } } }], { logger })
  await runner.startAll()
  t.equal(seen?.aborted, false)
  await runner.stopAll()
  t.equal(seen?.aborted, true)
})

t.test('a stop during start-up: the starting subsystem finishes, nothing later starts, all started ones stop, startAll resolves', async t => {
  const events: string[] = []
  const slow = Promise.withResolvers<void>()
  const runner = createSubsystemRunner<AnyHandles>([
    recorded(events, 'api'),
    {
      id: 'mesh',
      requires: [],
      critical: true,
      async create () {
        return {
          async start ({ signal }) {
            events.push('mesh starting')
            await slow.promise
            // What a real subsystem does when stopped mid-start: its start fails.
            if (signal.aborted) throw new Error('mesh start aborted')
          },
          async stop () { events.push('stop mesh') },
        }
      },
    },
    recorded(events, 'later', [], { critical: true }),
  ], { logger })
  const starting = runner.startAll()
  while (!events.includes('mesh starting')) await new Promise(resolve => setImmediate(resolve))
  const stopping = runner.stopAll()
  slow.resolve()
  await stopping
  await t.resolves(starting, 'a failure caused by the stop is not a start-up failure')
  t.same(events, ['start api', 'mesh starting', 'stop mesh', 'stop api'], 'the subsystem that was starting is stopped too; nothing later starts')
  t.equal(runner.records()[2]!.state, 'pending')
})

interface Handles {
  config: { port: number }
  clock: { now(): number, stop(): void }
  server: { port: number }
  metrics: { count: number }
}
const subsystem = subsystemSpecOf<Handles>()

t.test('handles: required ones through get, later ones through find, published while ok and withdrawn before stop', async t => {
  const seen: string[] = []
  let findLater: (() => Handles['metrics'] | undefined) | undefined
  let clockPublished: (() => boolean) | undefined
  const clock: Handles['clock'] = { now: () => 42, stop () { seen.push(`clock stops, published: ${clockPublished?.()}`) } }
  const runner = createSubsystemRunner<Handles>([
    subsystem({ id: 'config', requires: [], create: async () => constantSubsystem({ port: 7 }) }),
    subsystem({
      id: 'clock',
      requires: [],
      create: async () => serviceSubsystem(clock),
    }),
    subsystem({
      id: 'server',
      requires: ['config', 'clock'],
      async create (context) {
        seen.push(`server sees port ${context.get('config').port} at ${context.get('clock').now()}`)
        seen.push(`metrics before start: ${context.find('metrics') === undefined ? 'none' : 'some'}`)
        findLater = () => context.find('metrics')
        // @ts-expect-error metrics is not in requires: a compile-time error, and a runtime one
        t.throws(() => context.get('metrics'), /asked for metrics without requiring it/)
        return { handle: { port: context.get('config').port + 1 }, stop: async () => {} }
      },
    }),
    subsystem({ id: 'metrics', requires: [], create: async () => constantSubsystem({ count: 3 }) }),
  ], { logger })
  clockPublished = () => runner.handle('clock') !== undefined
  t.equal(runner.handle('config'), undefined, 'nothing published before start')
  await runner.startAll()
  t.same(runner.handle('server'), { port: 8 })
  t.same(findLater?.(), { count: 3 }, 'a later subsystem is found once it is ok')
  await runner.stopAll()
  t.same(seen, ['server sees port 7 at 42', 'metrics before start: none', 'clock stops, published: false'])
  t.equal(findLater?.(), undefined, 'withdrawn once stopped')
  t.equal(runner.handle('config'), undefined)
})

t.test('handles: a skipped or failed subsystem publishes none', async t => {
  const runner = createSubsystemRunner<Handles>([
    subsystem({ id: 'config', requires: [], create: async () => ({ skip: 'no config here' }) }),
    subsystem({ id: 'metrics', requires: [], create: async () => ({ handle: { count: 1 }, async start () { throw new Error('no metrics') }, stop: async () => {} }) }),
  ], { logger })
  await runner.startAll()
  t.equal(runner.handle('config'), undefined)
  t.equal(runner.handle('metrics'), undefined, 'created but its start failed')
  await runner.stopAll()
})
