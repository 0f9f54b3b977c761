// A publish reports how far it is, stage by stage (publisher.ts PublishStage), and the weights service lists the
// publishes in flight (GET /v1/weights "publishing"), which agentctl's progress bar follows.
import { join } from 'node:path'
import t from 'tap'
import { createPublisher, type PublishStage } from '../../../agent/weights/publisher.ts'
import { logger, sharedKey, tensor, versionStoreNode, weightsNode, writeSafetensors } from './weights-fixtures.ts'

const tensors = [tensor('a', 'f32', [256, 256], 1), tensor('b', 'bf16', [512, 128], 2), tensor('c', 'u8', [4096], 3)]
const totalBytes = tensors.reduce((a, x) => a + x.data.length, 0)

t.test('a durable safetensors publish goes reading, checksumming, persisting; each stage counts up to the total', async t => {
  const { sm, versions, dir } = await versionStoreNode(t)
  const publisher = createPublisher({ chunkBytes: 65536, durable: true, owner: join(dir, 'weights') }, { stateManager: sm, versions, logger })
  const file = join(dir, 'm.safetensors')
  writeSafetensors(file, tensors)
  const seen: Array<[PublishStage, number, number]> = []
  await publisher.publish({ model: 'm', source: { kind: 'safetensors', path: file } }, { onProgress: (stage, done, total) => { seen.push([stage, done, total]) } })
  t.same([...new Set(seen.map(([stage]) => stage))], ['reading', 'checksumming', 'persisting'], 'the stages, in order')
  for (const stage of ['reading', 'checksumming', 'persisting'] as const) {
    const steps = seen.filter(s => s[0] === stage)
    t.ok(steps.every(([, , total]) => total === totalBytes), `${stage}: the total is the version's bytes`)
    t.ok(steps.every(([, done], i) => i === 0 || done >= steps[i - 1]![1]), `${stage}: never goes back`)
    t.equal(steps.at(-1)![1], totalBytes, `${stage}: ends at the total`)
  }
  t.same(seen.filter(s => s[0] === 'reading').map(s => s[1]), [tensors[0]!.data.length, tensors[0]!.data.length + tensors[1]!.data.length, totalBytes], 'reading: one step per tensor')
})

t.test('the weights service lists a publish while it runs, and not after', async t => {
  const node = await weightsNode(t, sharedKey())
  const file = join(node.dir, 'm.safetensors')
  writeSafetensors(file, tensors)
  // publish() registers the publish before its first await, so the list shows it at once.
  const publishing = node.weights.publish({ model: 'm', version: 4, source: { kind: 'safetensors', path: file } })
  t.same(node.weights.list().publishing, [{ model: 'm', version: 4, stage: 'reading', doneBytes: 0, totalBytes: 0 }])
  await publishing
  t.same(node.weights.list().publishing, [], 'gone once committed')
  await t.rejects(node.weights.publish({ model: 'm', source: { kind: 'safetensors', path: join(node.dir, 'missing.safetensors') } }), { code: 'ERR_SOURCE_NOT_FOUND' })
  t.same(node.weights.list().publishing, [], 'gone after a failure too')
})
