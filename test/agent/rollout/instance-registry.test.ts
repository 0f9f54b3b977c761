// The registry of this node's rollout instances: probed before it takes one, advertised only while
// the engine answers, durable across a restart (each instance down until it answers again), a
// corrupt file set aside instead of failing the agent.
import t, { type Test } from 'tap'
import { readFileSync, writeFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { startEngineDouble } from '../../helpers/engine-double.ts'
import { tempDir } from '../../helpers/agent-process.ts'
import { createInstanceRegistry, type InstanceRegistry } from '../../../agent/rollout/instance-registry.ts'

const logger = pino({ level: 'silent' })

async function started (t: Test, stateDir: string): Promise<{ registry: InstanceRegistry, changes: () => number }> {
  let changes = 0
  const registry = createInstanceRegistry({ stateDir, probeIntervalMs: 50, probeTimeoutMs: 500, downAfterFailures: 2 }, { logger, changed: () => { changes++ } })
  const abort = new AbortController()
  await registry.start({ signal: abort.signal })
  t.teardown(() => abort.abort())
  return { registry, changes: () => changes }
}

async function until (what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  for (const deadline = performance.now() + timeoutMs; !check(); await sleep(20)) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`)
  }
}

t.test('an engine that stops answering is not advertised; it comes back when it answers again', async t => {
  const engine = await startEngineDouble({ model: 'm' })
  t.teardown(() => engine.close())
  const { registry, changes } = await started(t, tempDir(t))
  t.match(await registry.register({ id: 'e0', url: engine.url, model: 'm', gpus: [0, 1] }), { id: 'e0', state: 'up' })
  t.same(registry.advert(), [{ id: 'e0', url: engine.url, model: 'm', gpus: [0, 1] }])
  const port = Number(new URL(engine.url).port)
  await engine.close()
  await until('down', () => registry.list()[0]!.state === 'down')
  t.match(registry.list()[0]!.reason, /v1\/models failed/, 'with the probe\'s failure as the reason')
  t.same(registry.advert(), [], 'not advertised while down')
  const again = await startEngineDouble({ model: 'm' }, { port })
  t.teardown(() => again.close())
  await until('up again', () => registry.list()[0]!.state === 'up')
  t.equal(registry.advert().length, 1)
  t.ok(changes() >= 3, 'each change announced (register, down, up)')
})

t.test('registrations survive a restart; each is down until its first probe answers', async t => {
  const engine = await startEngineDouble({ model: 'm' })
  t.teardown(() => engine.close())
  const dir = tempDir(t)
  const first = await started(t, dir)
  await first.registry.register({ id: 'e0', url: engine.url, model: 'm', weightVersion: 3 })
  await first.registry.register({ id: 'e1', url: engine.url, model: 'm' })
  await first.registry.deregister('e1')
  first.registry.stop()
  const second = await started(t, dir)
  t.match(second.registry.list(), [{ id: 'e0', weightVersion: 3 }], 'the registration is back, the deregistered one is not')
  await until('probed up', () => second.registry.list()[0]?.state === 'up')
  await second.registry.terminate({ reason: 'reclaim' })
  t.same(second.registry.advert(), [{ id: 'e0', url: engine.url, model: 'm', weightVersion: 3, terminating: true }], 'a notice is advertised')
  await sleep(200)
  t.equal(second.registry.list()[0]!.state, 'terminating', 'and stays, whatever the probes say, until deregistered')
})

t.test('a corrupt registrations file is set aside; the registry starts empty', async t => {
  const dir = tempDir(t)
  writeFileSync(join(dir, 'rollout-instances.json'), '[{"id": "e0", "url": ')
  const { registry } = await started(t, dir)
  t.same(registry.list(), [])
  t.ok(existsSync(join(dir, 'rollout-instances.json.corrupt')), 'kept for the operator')
  t.equal(readFileSync(join(dir, 'rollout-instances.json.corrupt'), 'utf8'), '[{"id": "e0", "url": ')
})

t.test('a registration that cannot be stored leaves nothing behind', async t => {
  const engine = await startEngineDouble({ model: 'm' })
  t.teardown(() => engine.close())
  const { registry } = await started(t, join(tempDir(t), 'missing-dir'))
  await t.rejects(registry.register({ id: 'e0', url: engine.url, model: 'm' }), { code: 'ENOENT' })
  t.same(registry.list(), [], 'not registered in memory either')
  t.same(registry.advert(), [])
})

t.test('registrations at the same moment are all stored', async t => {
  const engine = await startEngineDouble({ model: 'm' })
  t.teardown(() => engine.close())
  const dir = tempDir(t)
  const { registry } = await started(t, dir)
  await Promise.all(Array.from({ length: 8 }, async (_, i) => await registry.register({ id: `e${i}`, url: engine.url, model: 'm' })))
  registry.stop()
  const again = await started(t, dir)
  t.same(again.registry.list().map(i => i.id).sort(), ['e0', 'e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7'])
})
