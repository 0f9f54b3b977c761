import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { capabilities, copyHost, createHostPool } from '../../native/index.ts'

t.test('capabilities describe this machine', (t) => {
  t.equal(capabilities.addon.loaded, true, 'the addon is built')
  t.type(capabilities.cuda.available, 'boolean')
  if (capabilities.cuda.available) {
    t.ok(capabilities.cuda.devices.length > 0, 'devices listed')
    t.equal(capabilities.cuda.reason, null)
  } else {
    t.match(capabilities.cuda.reason, /\S/, `unavailable with a reason: ${capabilities.cuda.reason}`)
    t.same(capabilities.cuda.devices, [])
    if (capabilities.cuda.compiled) t.match(capabilities.cuda.reason, /^cuda[A-Za-z]+: /, 'a CUDA error name')
  }
  t.equal(capabilities.directIo.available, true)
  t.ok(capabilities.memlockLimitBytes > 0)
  t.ok(capabilities.cpuThreads >= 1)
  t.ok(['always', 'madvise', 'never', 'unknown'].includes(capabilities.hugePages.transparent))
  t.ok(Object.isFrozen(capabilities))
  t.end()
})

t.test('a missing addon becomes one actionable error', (t) => {
  const index = fileURLToPath(new URL('../../native/index.ts', import.meta.url))
  const script = `
    const native = await import(${JSON.stringify(index)})
    let error
    try { await native.createHostPool({ sizeBytes: 4096 }) } catch (err) { error = err }
    console.log(JSON.stringify({ loaded: native.capabilities.addon.loaded, code: error?.code, message: error?.message }))`
  const result = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8',
    env: { ...process.env, AGENTD_NATIVE_ADDON: '/nonexistent/agentd_native.node' },
  })
  t.equal(result.status, 0, result.stderr)
  const report = JSON.parse(result.stdout) as { loaded: boolean, code: string, message: string }
  t.equal(report.loaded, false)
  t.equal(report.code, 'ERR_NATIVE_UNAVAILABLE')
  t.match(report.message, /npm run build:native/)
  t.end()
})

t.test('bulk work runs off the event loop', async (t) => {
  // Were the copy done on the main thread, its promise would already be
  // settled and its callback would run before the setImmediate callback.
  const pool = await createHostPool({ sizeBytes: 64 * 2 ** 20 })
  t.teardown(() => pool.close())
  const src = pool.allocate(32 * 2 ** 20)
  const dst = pool.allocate(32 * 2 ** 20)
  const order: string[] = []
  const copy = copyHost(pool.range(dst), pool.range(src)).then(() => order.push('copy'))
  setImmediate(() => order.push('immediate'))
  await copy
  t.same(order, ['immediate', 'copy'])
})
