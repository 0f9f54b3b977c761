// Body limits derived from a body schema: the size of its largest JSON, Infinity when unbounded.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { largestJsonBytes, schemaBodyLimit } from '../../core/schema-body-limit.ts'
import { OffloadBodySchema } from '../../agent/api/wire/state.ts'

t.test('the largest JSON a bounded schema admits, as JSON.stringify writes it with two-space indentation', async t => {
  const schema = Type.Object({
    items: Type.Array(Type.Object({
      name: Type.String({ maxLength: 7 }),
      count: Type.Integer({ minimum: 0, maximum: 1000 }),
      at: Type.Union([Type.Object({ kind: Type.Literal('a'), offset: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }), Type.Literal('elsewhere')]),
      flag: Type.Optional(Type.Boolean()),
      tags: Type.Array(Type.String({ maxLength: 2 }), { maxItems: 0 }),
    }, { additionalProperties: false }), { maxItems: 3 }),
    signed: Type.Integer(),
    mode: Type.Optional(Type.Union([Type.Literal('memory'), Type.Literal('nvme')])),
    none: Type.Null(),
  }, { additionalProperties: false })
  const item = { name: 'x'.repeat(7), count: 1000, at: { kind: 'a', offset: Number.MAX_SAFE_INTEGER }, flag: false, tags: [] }
  const largest = { items: [item, item, item], signed: Number.MIN_SAFE_INTEGER, mode: 'memory', none: null }
  t.equal(largestJsonBytes(schema), JSON.stringify(largest, null, 2).length)
  t.ok(JSON.stringify(largest).length < largestJsonBytes(schema), 'compact JSON fits too')
})

t.test('the offload body\'s limit is its largest batch: 65,536 items of the largest key and memory', async t => {
  const item = {
    key: 'k'.repeat(1024),
    source: { kind: 'cuda-ipc', device: Number.MAX_SAFE_INTEGER, handle: 'h'.repeat(128), offset: Number.MAX_SAFE_INTEGER, event: 'e'.repeat(128) },
    verify: false,
  }
  const largest = JSON.stringify({ tensors: Array<typeof item>(65_536).fill(item), durability: 'memory' }, null, 2)
  t.equal(largestJsonBytes(OffloadBodySchema), largest.length)
  t.equal(schemaBodyLimit(OffloadBodySchema, 1 << 20), largest.length, 'above api.bodyLimitBytes: the schema decides')
  t.equal(schemaBodyLimit(Type.Object({ a: Type.String({ maxLength: 4 }) }, { additionalProperties: false }), 1 << 20), 1 << 20, 'below it: api.bodyLimitBytes')
})

t.test('a schema that leaves any part of the body unbounded has no largest body: api.bodyLimitBytes applies', async t => {
  const unbounded = {
    'a string without maxLength': Type.Object({ s: Type.String() }, { additionalProperties: false }),
    'an array without maxItems': Type.Object({ a: Type.Array(Type.Integer()) }, { additionalProperties: false }),
    'an object open to more properties': Type.Object({ n: Type.Integer() }),
    'a value of any type': Type.Object({ v: Type.Unknown() }, { additionalProperties: false }),
    'one unbounded alternative': Type.Union([Type.Literal('x'), Type.String()]),
  }
  for (const [what, schema] of Object.entries(unbounded)) {
    t.equal(largestJsonBytes(schema), Infinity, what)
    t.equal(schemaBodyLimit(schema, 4096), 4096, `${what}: api.bodyLimitBytes`)
  }
})
