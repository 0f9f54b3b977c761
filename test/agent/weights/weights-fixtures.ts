/**
 * Fixtures of the weight tests: a safetensors writer (independent of the
 * agent's reader), in-process weight services over real StateManagers and
 * real TCP on loopback, and a TCP proxy that can cut or corrupt a connection.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { createServer, connect, type Server, type Socket } from 'node:net'
import { join } from 'node:path'
import type { Test } from 'tap'
import { pino } from 'pino'
import { createStateManager, type StateManager } from '../../../agent/state/state-manager.ts'
import { createWeightsService, type WeightsService } from '../../../agent/weights/weights-service.ts'
import { devWeightsConfig, type WeightsConfig } from '../../../agent/weights/weights-config.ts'
import { createVersionStore, type VersionStore } from '../../../agent/weights/version-store.ts'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import type { PeerView } from '../../../mesh/membership/mesh-views.ts'
import { diskDir } from '../../native/helpers.ts'

export const MiB = 2 ** 20
export const logger = pino({ level: 'silent' })

/** A new cluster key in `dir`/`name`, mode 0600 as the agent requires; its path. */
export function clusterKeyFile (dir: string, name = 'cluster.key'): string {
  const path = join(dir, name)
  writeFileSync(path, generateClusterKey(), { mode: 0o600 })
  return path
}

export interface FixtureTensor { name: string, dtype: 'f32' | 'bf16' | 'u8', shape: number[], data: Buffer }
const stDtype = { f32: 'F32', bf16: 'BF16', u8: 'U8' } as const
const elementBytes = { f32: 4, bf16: 2, u8: 1 } as const

/** Deterministic bytes of a tensor (seeded xorshift), so any slice can be checked. */
export function tensor (name: string, dtype: FixtureTensor['dtype'], shape: number[], seed: number): FixtureTensor {
  const bytes = shape.reduce((a, b) => a * b, 1) * elementBytes[dtype]
  const data = Buffer.alloc(bytes)
  let x = (seed * 2654435761) >>> 0 || 1
  for (let i = 0; i < bytes; i++) { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; data[i] = x & 0xff }
  return { name, dtype, shape, data }
}

export function writeSafetensors (path: string, tensors: FixtureTensor[], metadata: Record<string, string> = {}): void {
  const header: Record<string, unknown> = { __metadata__: metadata }
  let offset = 0
  for (const t of tensors) { header[t.name] = { dtype: stDtype[t.dtype], shape: t.shape, data_offsets: [offset, offset + t.data.length] }; offset += t.data.length }
  let json = Buffer.from(JSON.stringify(header))
  json = Buffer.concat([json, Buffer.alloc((8 - json.length % 8) % 8, 0x20)])
  const len = Buffer.alloc(8)
  len.writeBigUInt64LE(BigInt(json.length))
  writeFileSync(path, Buffer.concat([len, json, ...tensors.map(t => t.data)]))
}

export const sharedKey = (): Uint8Array => parseClusterKey(generateClusterKey(), 'test key')

export interface NodeFixture { sm: StateManager, weights: WeightsService, dir: string }

/** A small StateManager (8 MiB pool, 64 MiB NVMe) and a loaded version store, for tests that drive the publisher directly; stopped at teardown. */
export async function versionStoreNode (t: Test, namespaceQuotaBytes: Record<string, number> = {}, dir = diskDir(t)): Promise<{ sm: StateManager, versions: VersionStore, dir: string }> {
  const sm = createStateManager({
    hostPoolBytes: 8 * MiB, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: 64 * MiB, directIo: true,
    spillHighWatermark: 0.95, spillLowWatermark: 0.8, namespaceQuotaBytes, prefetchHorizonMs: 1000,
  }, { logger })
  await sm.start()
  t.teardown(() => sm.stop())
  const versions = createVersionStore({ dir: join(dir, 'weights'), retainVersions: 2 }, { stateManager: sm, logger })
  await versions.load()
  return { sm, versions, dir }
}

/** A StateManager plus a weights service on 127.0.0.1:0, stopped at teardown; `meshPeers`: the mesh view its pulls without `from` pick a holder from. */
export async function weightsNode (t: Test, clusterKey: Uint8Array, overrides: Partial<WeightsConfig> = {}, dir = diskDir(t), poolBytes = 64 * MiB, meshPeers?: () => PeerView[], nvmeBytes = 256 * MiB): Promise<NodeFixture> {
  const sm = createStateManager({
    hostPoolBytes: poolBytes, lockHostPool: false, nvmeDir: join(dir, 'nvme'), nvmeCapacityBytes: nvmeBytes, directIo: true,
    spillHighWatermark: 0.95, spillLowWatermark: 0.8, namespaceQuotaBytes: {}, prefetchHorizonMs: 1000,
  }, { logger })
  await sm.start()
  const weights = createWeightsService({ ...devWeightsConfig, chunkBytes: 256 * 1024, ...overrides, manifestDir: join(dir, 'weights') }, { stateManager: sm, clusterKey, logger, ...(meshPeers !== undefined ? { meshPeers } : {}) })
  await weights.start()
  t.teardown(async () => { await weights.stop(); await sm.stop() })
  return { sm, weights, dir }
}

/** Bytes of a stored key (through readHost, then a copy for the assertion). */
export async function keyBytes (sm: StateManager, key: string): Promise<Buffer> {
  const { viewHostRange } = await import('../../../native/index.ts')
  const pinned = await sm.readHost(key)
  try { return Buffer.from(viewHostRange(pinned.range)) } finally { pinned.release() }
}

export interface Proxy {
  address: string
  /** Server → client bytes forwarded so far (all connections). */
  forwarded(): number
  close(): Promise<void>
}

/**
 * Forwards connections to `target`. `tamper` sees each server→client chunk
 * with the running byte count of its connection and may return a changed
 * chunk or 'cut' (the connection is destroyed, both sides).
 * `uplinkBytesPerSecond`: server→client bytes of all connections together
 * are paced to this rate (the server's uplink).
 */
export async function tcpProxy (t: Test, target: string, tamper: (chunk: Buffer, connectionBytes: number, connection: number) => Buffer | 'cut' = c => c,
  /** Connection n reaches the server only after the returned promise settles (undefined: at once). */
  hold: (connection: number) => Promise<unknown> | undefined = () => undefined,
  uplinkBytesPerSecond?: number): Promise<Proxy> {
  /** When the paced uplink is free again, ms (performance.now()). */
  let uplinkFreeAt = 0
  const [host, port] = target.split(':') as [string, string]
  let total = 0
  let connections = 0
  const sockets = new Set<Socket>()
  const server: Server = createServer(client => {
    const id = connections++
    client.pause()
    const held = hold(id)
    if (held === undefined) forward(client, id)
    else void held.finally(() => { if (!client.destroyed) forward(client, id) })
  })
  function forward (client: Socket, id: number): void {
    let seen = 0
    const upstream = connect({ host, port: Number(port) })
    sockets.add(client); sockets.add(upstream)
    client.on('error', () => upstream.destroy())
    upstream.on('error', () => client.destroy())
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
    client.pipe(upstream)
    upstream.on('data', (chunk: Buffer) => {
      const out = tamper(chunk, seen, id)
      seen += chunk.length
      if (out === 'cut') { client.destroy(); upstream.destroy(); return }
      total += out.length
      if (uplinkBytesPerSecond !== undefined) {
        const now = performance.now()
        uplinkFreeAt = Math.max(uplinkFreeAt, now) + out.length / uplinkBytesPerSecond * 1000
        upstream.pause()
        setTimeout(() => { if (!client.destroyed) client.write(out); upstream.resume() }, uplinkFreeAt - now)
        return
      }
      if (!client.write(out)) { upstream.pause(); client.once('drain', () => upstream.resume()) }
    })
    client.resume()
  }
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const proxy: Proxy = {
    address: `127.0.0.1:${(server.address() as { port: number }).port}`,
    forwarded: () => total,
    close: async () => { for (const s of sockets) s.destroy(); await new Promise<void>(resolve => server.close(() => resolve())) },
  }
  t.teardown(() => proxy.close())
  return proxy
}

/**
 * A safetensors file's header, read as the format defines it (readSafetensorsHeader, which publish
 * uses, refuses tensors of no elements: they cannot become StateManager keys).
 */
export function rawSafetensorsHeader (file: string): { metadata: Record<string, string>, tensors: Array<{ name: string, shape: number[], start: number, end: number }>, dataStart: number } {
  const bytes = readFileSync(file)
  const length = Number(bytes.readBigUInt64LE(0))
  const json = JSON.parse(bytes.subarray(8, 8 + length).toString()) as Record<string, { shape: number[], data_offsets: [number, number] } | Record<string, string>>
  const { __metadata__: metadata, ...entries } = json
  const tensors = Object.entries(entries as Record<string, { shape: number[], data_offsets: [number, number] }>).map(([name, e]) => ({ name, shape: e.shape, start: e.data_offsets[0], end: e.data_offsets[1] }))
  return { metadata: (metadata ?? {}) as Record<string, string>, tensors, dataStart: 8 + length }
}
