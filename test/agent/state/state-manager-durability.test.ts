// The StateManager's durability paths against a real pool and real NVMe files: a stop during a long
// background spill ends at a group boundary, batch drops of durable keys, and what a restart finds.
import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pino } from 'pino'
import { createStateManager, type StateManager, type StateManagerOptions } from '../../../agent/state/state-manager.ts'
import { diskDir, makeShm, patternBytes } from '../../native/helpers.ts'
import { capabilities } from '../../../native/index.ts'

const MiB = 2 ** 20
const logger = pino({ level: 'silent' })

function createManager (dir: string, overrides: Partial<StateManagerOptions> = {}): StateManager {
  return createStateManager({
    hostPoolBytes: 16 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 1024 * MiB, directIo: true,
    spillHighWatermark: 0.9, spillLowWatermark: 0.5, namespaceQuotaBytes: {}, prefetchHorizonMs: 0, ...overrides,
  }, { logger })
}

async function started (t: Test, dir: string, overrides: Partial<StateManagerOptions> = {}): Promise<StateManager> {
  const sm = createManager(dir, overrides)
  await sm.start()
  t.teardown(() => sm.stop())
  return sm
}

const key = (ns: string, name: string, bytes: number): string => `${ns}/${name}:param@[0]/[${bytes}]:u8#v1`

/** Onloads `keys` (each `bytes` long) and returns those whose bytes differ from `data`. */
async function wrongBytes (t: Test, sm: StateManager, keys: string[], bytes: number, data: Buffer): Promise<string[]> {
  const dst = makeShm(t, bytes)
  const wrong: string[] = []
  for (const k of keys) {
    await sm.onload([{ key: k, target: { kind: 'shm', name: dst, offset: 0 } }])
    if (!readFileSync(`/dev/shm/${dst}`).equals(data)) wrong.push(k)
  }
  return wrong
}

if (!capabilities.addon.loaded) {
  t.comment(`skipped: the StateManager needs the native addon (${capabilities.addon.error})`)
} else {
  t.test('a stop during a long background spill ends it at the next group boundary, leaving the store consistent', async t => {
    const dir = diskDir(t)
    // Groups of 8 MiB (a sixteenth of the pool); spilling from 90% to 5% of 128 MiB takes 14 of them.
    const sm = createManager(dir, { hostPoolBytes: 128 * MiB, spillLowWatermark: 0.05 })
    await sm.start()
    const data = patternBytes(MiB, 5)
    const src = makeShm(t, data)
    const durable = Array.from({ length: 16 }, (_, i) => key('long/durable', `w${i}`, MiB))
    await sm.offload(durable.map(k => ({ key: k, source: { kind: 'shm' as const, name: src, offset: 0 } })), 'nvme')
    // The offload that takes the pool above the high watermark starts the background spill as it returns.
    const memory = Array.from({ length: 104 }, (_, i) => key('long/memory', `w${i}`, MiB))
    await sm.offload(memory.map(k => ({ key: k, source: { kind: 'shm' as const, name: src, offset: 0 } })))
    const atStop = sm.residency()
    const left = Math.floor((atStop.tiers.host.usedBytes - 0.05 * 128 * MiB) / MiB)
    t.ok(left > 4 * 8, `the spill had ${left} keys left to move when stop was called`)
    await sm.stop()
    const spilled = sm.residency().counters.spilled - atStop.counters.spilled
    t.ok(spilled <= 2 * 8, `it stopped after the two groups in flight (${spilled} keys spilled meanwhile)`)

    const again = await started(t, dir)
    t.match(again.recovery(), { recovered: durable.length, dropped: 0, tornLines: 0 }, 'the durable keys, nothing torn or missing')
    t.same(again.residency().keys.map(k => k.key).sort(), [...durable].sort(), 'no key of durability "memory" comes back')
    t.same(await wrongBytes(t, again, durable, MiB, data), [], 'every durable key reads back byte-identical')
  })

  t.test('a drop of many durable keys, concurrent with durable offloads and another drop: a restart finds exactly the keys left', async t => {
    const dir = diskDir(t)
    const sm = createManager(dir, { hostPoolBytes: 64 * MiB })
    await sm.start()
    const bytes = 4096
    const data = patternBytes(bytes, 9)
    const src = makeShm(t, data)
    const items = (ns: string, n: number) => Array.from({ length: n }, (_, i) => ({ key: key(ns, `w${i}`, bytes), source: { kind: 'shm' as const, name: src, offset: 0 } }))
    await sm.offload(items('drop/a', 2000), 'nvme')
    await sm.offload(items('drop/b', 1000), 'nvme')
    const [droppedA, droppedB] = await Promise.all([
      sm.drop({ prefix: 'drop/a/' }),
      sm.drop({ keys: items('drop/b', 500).map(i => i.key) }),
      sm.offload(items('drop/c', 300), 'nvme'),
    ])
    t.same([droppedA, droppedB], [2000, 500])
    await sm.stop()

    const again = await started(t, dir)
    const left = [...items('drop/b', 1000).slice(500), ...items('drop/c', 300)].map(i => i.key)
    t.match(again.recovery(), { recovered: left.length, dropped: 0, tornLines: 0 })
    t.same(again.residency().keys.map(k => k.key).sort(), [...left].sort())
    t.same(await wrongBytes(t, again, left.slice(0, 50), bytes, data), [])
  })
}
