/**
 * agentctl commands. Each takes the typed client and returns what to print:
 * the raw API object for --json, a human rendering otherwise.
 */
import type { AgentClient } from '../agent/client/client.ts'
import type { StatusBody } from '../agent/api/schemas.ts'
import type { NodeInventory } from '../agent/inventory/inventory.ts'
import type { Capabilities } from '../native/index.ts'
import { agentVersion } from '../agent/version.ts'
import { formatBytes, formatDuration, formatTable } from './table.ts'

export interface CommandResult {
  json: unknown
  human: string
}

export interface Command {
  summary: string
  run(client: AgentClient, options: { signal: AbortSignal }): Promise<CommandResult>
}

export const commands: Record<string, Command> = {
  status: {
    summary: 'agent status: node, version, uptime and every subsystem (ok / skipped / failed)',
    async run (client, { signal }) {
      const status = await client.status({ signal })
      return { json: status, human: renderStatus(status) }
    },
  },
  node: {
    summary: 'node inventory: CPUs, memory, disks, network interfaces, GPUs',
    async run (client, { signal }) {
      const node = await client.node({ signal })
      return { json: node, human: renderNode(node) }
    },
  },
  version: {
    summary: 'versions of agentctl and of the agent answering at the socket',
    async run (client, { signal }) {
      let agent: string | null = null
      let agentError = ''
      try {
        agent = (await client.status({ signal })).version
      } catch (err) {
        agentError = (err as Error).message
      }
      const human = `agentctl ${agentVersion}\nagentd   ${agent ?? `unknown (${agentError})`}`
      return { json: { agentctl: agentVersion, agentd: agent }, human }
    },
  },
}

export function renderStatus (status: StatusBody): string {
  const head = [
    `node     ${status.node.name} (${status.node.id})`,
    `version  ${status.version}${status.dev ? '  (dev mode)' : ''}`,
    `uptime   ${formatDuration(status.uptimeS)}`,
  ]
  const native = status.native as Capabilities | undefined
  if (native !== undefined) {
    head.push(native.addon.loaded
      ? `native   cuda ${native.cuda.available ? `${native.cuda.devices.length} device(s)` : `unavailable (${native.cuda.reason ?? 'unknown'})`}, ` +
        `memlock ${native.memlockLimitBytes === null || native.memlockLimitBytes === Infinity ? 'unlimited' : formatBytes(native.memlockLimitBytes)}, ` +
        `crc32c ${native.crc32c ?? '-'}`
      : `native   not loaded: ${native.addon.error ?? 'unknown'}`)
  }
  const rows = status.subsystems.map(s => [s.id, s.state, s.startMs !== undefined ? `${s.startMs}ms` : '-', s.reason ?? ''])
  return `${head.join('\n')}\n\n${formatTable(['SUBSYSTEM', 'STATE', 'START', 'REASON'], rows)}`
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
