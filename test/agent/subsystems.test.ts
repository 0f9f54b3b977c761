import t from 'tap'
import { pino } from 'pino'
import { createSubsystemRunner, type SubsystemSpec, type Subsystem } from '../../agent/subsystems.ts'

const logger = pino({ level: 'silent' })

/** A spec that records start/stop into `events`. */
function recorded (events: string[], id: string, requires: string[] = [], behaviour: { failStart?: boolean, skip?: string, critical?: boolean, failStop?: boolean } = {}): SubsystemSpec {
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
  const runner = createSubsystemRunner([
    recorded(events, 'a'),
    { id: 'b', requires: [], async create (ctx) { ctx.get('a'); return { stop: async () => {} } } },
  ], { logger })
  await runner.startAll()
  t.match(runner.records()[1], { state: 'failed', reason: /asked for a without requiring it/ })
  await runner.stopAll()
})

t.test('subsystems get an abort signal that fires on stop', async t => {
  let seen: AbortSignal | undefined
  const runner = createSubsystemRunner([{ id: 'loop', requires: [], async create (ctx) { seen = ctx.signal; return { stop: async () => {} } } }], { logger })
  await runner.startAll()
  t.equal(seen?.aborted, false)
  await runner.stopAll()
  t.equal(seen?.aborted, true)
})

t.test('a stop during start-up: the starting subsystem finishes, nothing later starts, all started ones stop, startAll resolves', async t => {
  const events: string[] = []
  const slow = Promise.withResolvers<void>()
  const runner = createSubsystemRunner([
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
