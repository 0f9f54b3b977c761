// Model ownership in the version store (version-store.ts "Ownership"): claimed by the first reservation,
// forgotten when that reservation ends with nothing committed, kept on disk for a uid, the agent's otherwise.
import t from 'tap'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createVersionStore, type VersionStore, type WeightsManifest } from '../../../agent/weights/version-store.ts'
import type { StateManager } from '../../../agent/state/state-manager.ts'
import { tempDir } from '../../helpers/agent-process.ts'
import { logger } from './weights-fixtures.ts'

/** The StateManager as a store of versions without tensors needs it: nothing stored. */
const stateManager = { storedKeys: () => [], drop: async () => 0 } as unknown as StateManager

const storeIn = async (dir: string): Promise<VersionStore> => {
  const store = createVersionStore({ dir, retainVersions: 2 }, { stateManager, logger })
  await store.load()
  return store
}
const manifest = (model: string, version: number, durable: boolean): WeightsManifest =>
  ({ model, version, chunkBytes: 4096, totalBytes: 0, committedAtMs: 0, metadata: {}, ownsKeys: false, durable, tensors: [] })

t.test('the first reservation claims a model; one that ends with nothing committed leaves it unowned', async t => {
  const store = await storeIn(tempDir(t))
  t.equal(store.ownerOf('m'), undefined)
  const first = store.reserve('m', 0, 1001)
  const second = store.reserve('m', 1, 1002)
  t.equal(store.ownerOf('m'), 1001, 'a later reservation keeps the owner')
  first.release()
  t.equal(store.ownerOf('m'), 1001, 'while a reservation is held')
  second.release()
  t.equal(store.ownerOf('m'), undefined, 'nothing committed: nobody\'s again')
  store.reserve('p', 0).release()
  const pulled = store.reserve('p', 0)
  t.equal(store.ownerOf('p'), 'agent', 'a reservation without a uid (a pull) claims for the agent')
  await store.commit(manifest('p', 0, false))
  pulled.release()
  t.equal(store.ownerOf('p'), 'agent')
})

t.test('a uid owner is written before the first manifest and found by the next start, even after every version was retired', async t => {
  const dir = tempDir(t)
  const store = await storeIn(dir)
  store.reserve('kept', 0, 1001)
  await store.commit(manifest('kept', 0, true))
  store.reserve('memory', 0, 1002)
  await store.commit(manifest('memory', 0, false))
  await store.retire('memory', 0)
  store.reserve('agents', 0)
  await store.commit(manifest('agents', 0, true))
  t.same(JSON.parse(readFileSync(join(dir, 'kept', 'owner.json'), 'utf8')), { uid: 1001 })
  t.notOk(existsSync(join(dir, 'agents', 'owner.json')), 'the agent\'s ownership is the absence of the file')
  const again = await storeIn(dir)
  t.equal(again.ownerOf('kept'), 1001)
  t.equal(again.ownerOf('memory'), 1002, 'a model whose versions were not durable, all retired, is still its owner\'s')
  t.equal(again.ownerOf('agents'), 'agent')
  t.throws(() => again.reserve('memory', 0, 1002), { code: 'ERR_WEIGHTS_VERSION_EXISTS' })
})

t.test('a model directory without an owner, or with an unreadable one, is the agent\'s; loading goes on', async t => {
  const dir = tempDir(t)
  mkdirSync(join(dir, 'legacy'))
  writeFileSync(join(dir, 'legacy', 'retired.json'), JSON.stringify({ retiredUpTo: 3 }))
  mkdirSync(join(dir, 'garbled'))
  writeFileSync(join(dir, 'garbled', 'owner.json'), '{"uid": "root"')
  mkdirSync(join(dir, 'negative'))
  writeFileSync(join(dir, 'negative', 'owner.json'), JSON.stringify({ uid: -1 }))
  const store = await storeIn(dir)
  t.equal(store.ownerOf('legacy'), 'agent')
  t.equal(store.ownerOf('garbled'), 'agent')
  t.equal(store.ownerOf('negative'), 'agent')
  store.reserve('legacy', 4, 1001).release()
  t.equal(store.ownerOf('legacy'), 'agent', 'a reservation does not take over an owned model')
})
