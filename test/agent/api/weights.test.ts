// The /v1/weights routes over fastify inject, against a real in-process weights service (real pool, real TCP on loopback).
import t from 'tap'
import { join } from 'node:path'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { buildApiApp } from '../../../agent/api/server.ts'
import { logger, sharedKey, tensor, weightsNode, writeSafetensors } from '../weights/weights-fixtures.ts'
import type { WeightsService } from '../../../agent/weights/weights-service.ts'

async function app (weights: WeightsService | { unavailable: string }) {
  // In process (inject() has no SO_PEERCRED): the caller is trusted as an admin (publish and retire check the model's owner).
  return await buildApiApp({ bodyLimitBytes: 1 << 20, version: 'test', pathRoots: [tmpdir(), '/var/tmp'], trustUnidentifiedCallers: true }, {
    logger, status: { status: () => ({}) as never }, inventory: { inventory: () => undefined }, weights: { weights: () => weights },
  })
}

t.test('without the subsystem every weights route answers 503 ERR_UNAVAILABLE with the reason', async t => {
  const api = await app({ unavailable: 'requires state (skipped)' })
  const res = await api.inject({ method: 'GET', url: '/v1/weights' })
  t.equal(res.statusCode, 503)
  t.match(res.json(), { error: { code: 'ERR_UNAVAILABLE', message: /requires state \(skipped\)/ } })
})

t.test('publish, list, manifest, pull with a layout, retire; bad input answers 4xx with a stable code', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const b = await weightsNode(t, key)
  const apiA = await app(a.weights)
  const apiB = await app(b.weights)
  const file = join(a.dir, 'w.safetensors')
  const w = tensor('model.layers.0.mlp.up_proj.weight', 'bf16', [64, 32], 1)
  writeSafetensors(file, [w])
  const published = await apiA.inject({ method: 'POST', url: '/v1/weights/publish', payload: { model: 'm', source: { kind: 'safetensors', path: file } } })
  t.equal(published.statusCode, 200, published.body)
  t.match(published.json(), { model: 'm', version: 0, totalBytes: w.data.length })
  const list = (await apiA.inject({ method: 'GET', url: '/v1/weights' })).json()
  t.match(list, { address: a.weights.address(), versions: [{ model: 'm', version: 0, tensors: 1, bytes: w.data.length }], pulls: [], pulling: [] })
  t.match((await apiA.inject({ method: 'GET', url: '/v1/weights/m/latest/manifest' })).json(), { version: 0, tensors: [{ name: w.name, shape: [64, 32] }] })

  const pulled = await apiB.inject({ method: 'POST', url: '/v1/weights/pull', payload: { from: a.weights.address(), model: 'm', version: 'latest', layout: { tp: 4, rank: 2, rules: [{ pattern: 'up_proj', dim: 0 }] } } })
  t.equal(pulled.statusCode, 200, pulled.body)
  t.match(pulled.json(), { version: 0, bytes: w.data.length / 4, bytesReceived: w.data.length / 4, keys: ['weights/m/model.layers.0.mlp.up_proj.weight:param@[32,0]/[16,32]:bf16#v0'] })

  const bad = async (api: typeof apiA, url: string, payload: unknown): Promise<{ status: number, code: string }> => {
    const res = await api.inject({ method: 'POST', url, payload: payload as Record<string, unknown> })
    return { status: res.statusCode, code: res.json().error?.code }
  }
  t.same(await bad(apiA, '/v1/weights/publish', { model: '../etc', source: { kind: 'keys', prefix: 'x/' } }), { status: 400, code: 'ERR_BAD_REQUEST' })
  t.same(await bad(apiA, '/v1/weights/publish', { model: 'm', version: 0, source: { kind: 'safetensors', path: file } }), { status: 409, code: 'ERR_WEIGHTS_VERSION_EXISTS' })
  t.same(await bad(apiB, '/v1/weights/pull', { from: a.weights.address(), model: 'm', version: 0, layout: { tp: 2, rank: 0, rules: [{ pattern: 'x', dim: 3 }] } }), { status: 400, code: 'ERR_LAYOUT_INVALID' })
  t.same(await bad(apiB, '/v1/weights/pull', { from: a.weights.address(), model: 'nope', version: 'latest' }), { status: 404, code: 'ERR_WEIGHTS_NOT_FOUND' })
  t.same(await bad(apiB, '/v1/weights/pull', { from: 'not-an-address', model: 'm', version: 'latest' }), { status: 400, code: 'ERR_BAD_REQUEST' })
  t.same(await bad(apiA, '/v1/weights/retire', { model: 'm', version: 9 }), { status: 404, code: 'ERR_WEIGHTS_NOT_FOUND' })
  t.same(await bad(apiA, '/v1/weights/retire', { model: 'm', version: 0 }), { status: 200, code: undefined })
  t.same(await bad(apiB, '/v1/weights/pull', { from: a.weights.address(), model: 'm', version: 0 }), { status: 410, code: 'ERR_WEIGHTS_RETIRED' })
})

t.test('POST /v1/weights/regions refuses what the publish could not take, with a code and no object left in /dev/shm', async t => {
  const { readdirSync, statfsSync } = await import('node:fs')
  const a = await weightsNode(t, sharedKey())
  const api = await app(a.weights)
  const objects = (): string[] => readdirSync('/dev/shm').filter(n => n.startsWith('agentd-weights-'))
  const before = new Set(objects())
  const fs = statfsSync('/dev/shm')
  const cases: Array<[unknown, number, string, RegExp]> = [
    [[{ name: 'huge.weight', dtype: 'u8', shape: [2 * fs.bavail * fs.bsize] }], 507, 'ERR_TIER_FULL', /does not fit in \/dev\/shm/],
    [[{ name: 'a', dtype: 'f32', shape: [0] }], 400, 'ERR_BAD_REQUEST', /positive integers/],
    [[{ name: 'a', dtype: 'f32', shape: [-1] }], 400, 'ERR_BAD_REQUEST', /shape/],
    [[{ name: 'a', dtype: 'f99', shape: [4] }], 400, 'ERR_BAD_REQUEST', /unknown dtype/],
    [[{ name: 'a', dtype: 'f32', shape: [4] }, { name: 'a', dtype: 'f32', shape: [4] }], 400, 'ERR_BAD_REQUEST', /appears twice/],
    [[], 400, 'ERR_BAD_REQUEST', /tensors/],
  ]
  for (const [tensors, status, code, message] of cases) {
    const res = await api.inject({ method: 'POST', url: '/v1/weights/regions', payload: { model: 'r', tensors } })
    t.equal(res.statusCode, status, JSON.stringify(tensors).slice(0, 80))
    t.match(res.json(), { error: { code, message } })
  }
  t.same(objects().filter(n => !before.has(n)), [], 'no object left in /dev/shm')
})

t.test('model names that would be paths ("." and "..") are refused before anything is written; a stray entry in the weights directory does not stop the service', async t => {
  const key = sharedKey()
  const a = await weightsNode(t, key)
  const api = await app(a.weights)
  const file = join(a.dir, 'w.safetensors')
  writeSafetensors(file, [tensor('w', 'f32', [4], 1)])
  for (const model of ['.', '..']) {
    const res = await api.inject({ method: 'POST', url: '/v1/weights/publish', payload: { model, source: { kind: 'safetensors', path: file } } })
    t.equal(res.statusCode, 400, `model ${JSON.stringify(model)}: 400`)
    t.match(res.json(), { error: { code: 'ERR_BAD_REQUEST' } })
    await t.rejects(a.weights.publish({ model, source: { kind: 'safetensors', path: file } }), { code: 'ERR_BAD_REQUEST', message: /may not be "\." or "\.\."/ }, `the service itself refuses ${JSON.stringify(model)}`)
  }
  t.same(a.weights.list().versions, [], 'nothing published')

  // What "." once left behind (a manifest at the top of weights/) and any other stray file: skipped, reported.
  const dir = mkdtempSync(join(tmpdir(), 'agentd-wstray-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  mkdirSync(join(dir, 'weights'), { recursive: true })
  writeFileSync(join(dir, 'weights', 'v0.json'), '{}')
  writeFileSync(join(dir, 'weights', 'junk'), 'x')
  const b = await weightsNode(t, key, {}, dir)
  t.same(b.weights.list().versions, [], 'the service started over a weights directory with stray files')
})
