/** Wire schema of GET /v1/node: the inventory schema declared once in agent/inventory/schema.ts. */
export {
  DiskSchema, FilesystemSchema, GpuDeviceSchema, GpuInventorySchema, NetworkInterfaceSchema, NodeInventorySchema,
  type DiskInventory, type FilesystemInventory, type GpuDevice, type GpuInventory, type NetworkInterfaceInventory, type NodeInventory,
} from '../../inventory/schema.ts'
