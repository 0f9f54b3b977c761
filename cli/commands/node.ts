/** agentctl node: the node inventory. */
import type { NodeInventory } from '../../agent/inventory/schema.ts'
import type { Command } from './command.ts'
import { formatBytes, formatTable } from './table.ts'

export const nodeCommand: Command = {
  summary: 'node inventory: CPUs, memory, disks, network interfaces, GPUs',
  examples: [
    { what: 'CPUs, memory, disks, interfaces and GPUs of this node', run: 'agentctl node' },
    { what: 'the GPUs as JSON', run: 'agentctl --json node' },
  ],
  async run ({ client, signal }) {
    const node = await client.node({ signal })
    return { json: node, human: renderNode(node) }
  },
}

export function renderNode (node: NodeInventory): string {
  const parts = [
    `host     ${node.hostname}`,
    `cpu      ${node.cpu.model}, ${node.cpu.cores} cores (${node.cpu.physicalCores} physical, ${node.cpu.sockets} socket${node.cpu.sockets === 1 ? '' : 's'})`,
    `memory   ${formatBytes(node.memory.totalBytes)} total, ${formatBytes(node.memory.availableBytes)} available`,
    '',
    node.gpus.devices.length > 0
      ? formatTable(['GPU', 'MODEL', 'MEMORY', 'UUID', 'PCI BUS'], node.gpus.devices.map(g => [String(g.index), g.model, formatBytes(g.memoryBytes), g.uuid || '-', g.pciBus]))
      : `gpus     none (${node.gpus.reason ?? 'configured empty'})`,
    '',
    formatTable(['DISK', 'SIZE', 'NVME', 'MOUNTS'], node.disks.map(d => [d.device, formatBytes(d.sizeBytes), d.nvme ? 'yes' : 'no', d.mountPoints.join(',') || '-'])),
    '',
    formatTable(['FILESYSTEM', 'TYPE', 'SIZE', 'AVAILABLE'], node.filesystems.map(f => [f.mountPoint, f.fsType, formatBytes(f.sizeBytes), formatBytes(f.availableBytes)])),
    '',
    formatTable(['INTERFACE', 'STATE', 'IPV4', 'IPV6', 'SPEED', 'VIRTUAL'], node.network.map(n => [
      n.name, n.up ? 'up' : 'down', n.ipv4.join(',') || '-', n.ipv6.join(',') || '-', n.speedMbps !== null ? `${n.speedMbps}Mb/s` : '-', n.virtual ? 'yes' : 'no',
    ])),
  ]
  return parts.join('\n')
}
