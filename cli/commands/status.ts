/** agentctl status: node, version, uptime, native capabilities and every subsystem. */
import type { StatusBody } from '../../agent/api/wire/status.ts'
import type { Capabilities } from '../../native/index.ts'
import type { Command } from './command.ts'
import { formatBytes, formatDuration, formatTable } from './table.ts'

export const statusCommand: Command = {
  summary: 'agent status: node, version, uptime and every subsystem (ok / skipped / failed)',
  examples: [
    { what: 'node, version, uptime and the subsystem table', run: 'agentctl status' },
    { what: 'the same as JSON, for scripts', run: 'agentctl status --json' },
  ],
  async run ({ client, signal }) {
    const status = await client.status({ signal })
    return { json: status, human: renderStatus(status) }
  },
}

export function renderStatus (status: StatusBody): string {
  const head = [
    `node     ${status.node.name} (${status.node.id})`,
    ...(status.state !== undefined && status.state !== 'ready' ? [`state    ${status.state}${status.state === 'starting' ? ' (subsystems still pending below; other requests answer ERR_STARTING)' : ''}`] : []),
    `version  ${status.version}${status.dev ? '  (dev mode)' : ''}`,
    `uptime   ${formatDuration(status.uptimeS)}`,
  ]
  const own = status.process
  if (own !== undefined) {
    head.push(`process  pid ${own.pid}, cpu ${own.cpuSeconds.toFixed(1)} s`)
    const heap = `V8 heap ${formatBytes(own.heapUsedBytes)} used (uncollected garbage included) of ${formatBytes(own.heapTotalBytes)} reserved, external ${formatBytes(own.externalBytes)}`
    // Shared memory the agent maps (clients' objects) is counted by its creators: shown apart, never as the agent's own.
    head.push(own.ownBytes !== undefined && own.fileBytes !== undefined && own.sharedMemoryBytes !== undefined
      ? `memory   own ${formatBytes(own.ownBytes)} (${heap}), mapped files ${formatBytes(own.fileBytes)}; ` +
        `shared memory mapped ${formatBytes(own.sharedMemoryBytes)} (clients' objects, weight regions: not own); rss ${formatBytes(own.rssBytes)} in all`
      : `memory   rss ${formatBytes(own.rssBytes)} (${heap})`)
  }
  const native = status.native as Capabilities | undefined
  if (native !== undefined) {
    const memlock = native.memlockLimitBytes === null || native.memlockLimitBytes === Infinity ? 'unlimited' : formatBytes(native.memlockLimitBytes)
    const ucx = native.ucx === undefined ? '' : native.ucx.compiled ? `, ucx ${native.ucx.version} (${[...new Set(native.ucx.transports.map(x => x.transport))].join(' ')})` : ', ucx not built'
    head.push(native.addon.loaded
      ? `native   cuda ${native.cuda.available ? `${native.cuda.devices.length} device(s)` : `unavailable (${native.cuda.reason ?? 'unknown'})`}, memlock ${memlock}, crc32c ${native.crc32c ?? '-'}${ucx}`
      : `native   not loaded: ${native.addon.error ?? 'unknown'}`)
  }
  const weights = status.weights
  if (weights !== undefined) {
    head.push(`weights  data ${weights.address}, serves ${(weights.transports ?? ['tcp']).join(' + ')}${weights.ucxUnavailable !== undefined ? ` (no ucx: ${weights.ucxUnavailable})` : ''}`)
  }
  const conflicts = status.leader?.otherVoterSets ?? []
  if (conflicts.length > 0) head.push(`DEGRADED another voter set on this mesh (${conflicts.map(c => `${c.voterSetId}: ${c.agents.length} agent(s)`).join('; ')}): see agentctl leader`)
  const rows = status.subsystems.map(s => [s.id, s.state, s.startMs !== undefined ? `${s.startMs}ms` : '-', s.reason ?? ''])
  return `${head.join('\n')}\n\n${formatTable(['SUBSYSTEM', 'STATE', 'START', 'REASON'], rows)}`
}
