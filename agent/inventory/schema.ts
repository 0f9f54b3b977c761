/**
 * The node inventory's shape, declared once: the TypeScript types, the
 * /v1/node response validation/serialization and its OpenAPI entry all come
 * from these schemas.
 */
import { Type, type Static } from '@sinclair/typebox'

export const GpuDeviceSchema = Type.Object({
  index: Type.Integer({ minimum: 0 }),
  model: Type.String(),
  memoryBytes: Type.Integer({ minimum: 0 }),
  uuid: Type.String({ description: '"GPU-…" from the driver; "" when not reported' }),
  pciBus: Type.String({ description: 'PCI bus id, e.g. "00000000:17:00.0"' }),
})

export const GpuInventorySchema = Type.Object({
  detected: Type.Boolean({ description: 'true when at least one GPU is known (detected or configured)' }),
  source: Type.Union([Type.Literal('detected'), Type.Literal('config')]),
  reason: Type.Optional(Type.String({ description: 'why no GPU was detected' })),
  devices: Type.Array(GpuDeviceSchema),
})

export const DiskSchema = Type.Object({
  name: Type.String(),
  device: Type.String(),
  model: Type.String(),
  sizeBytes: Type.Integer({ minimum: 0 }),
  nvme: Type.Boolean(),
  rotational: Type.Boolean(),
  mountPoints: Type.Array(Type.String(), { description: 'mount points of the disk and its partitions' }),
})

export const FilesystemSchema = Type.Object({
  mountPoint: Type.String(),
  fsType: Type.String(),
  device: Type.String(),
  sizeBytes: Type.Integer({ minimum: 0 }),
  availableBytes: Type.Integer({ minimum: 0 }),
})

export const NetworkInterfaceSchema = Type.Object({
  name: Type.String(),
  mac: Type.String(),
  ipv4: Type.Array(Type.String()),
  ipv6: Type.Array(Type.String()),
  mtu: Type.Union([Type.Integer(), Type.Null()]),
  speedMbps: Type.Union([Type.Number(), Type.Null()]),
  virtual: Type.Boolean({ description: 'loopback, bridges, veth, docker: never announced to the mesh' }),
  up: Type.Boolean(),
})

export const NodeInventorySchema = Type.Object({
  hostname: Type.String(),
  cpu: Type.Object({ model: Type.String(), cores: Type.Integer(), physicalCores: Type.Integer(), sockets: Type.Integer() }),
  memory: Type.Object({ totalBytes: Type.Integer(), availableBytes: Type.Integer() }),
  disks: Type.Array(DiskSchema),
  filesystems: Type.Array(FilesystemSchema),
  network: Type.Array(NetworkInterfaceSchema),
  gpus: GpuInventorySchema,
  probedAtMs: Type.Integer({ description: 'when the inventory was taken, ms since the epoch' }),
})

export type GpuDevice = Static<typeof GpuDeviceSchema>
export type GpuInventory = Static<typeof GpuInventorySchema>
export type DiskInventory = Static<typeof DiskSchema>
export type FilesystemInventory = Static<typeof FilesystemSchema>
export type NetworkInterfaceInventory = Static<typeof NetworkInterfaceSchema>
export type NodeInventory = Static<typeof NodeInventorySchema>
