/**
 * agentctl inspect residency: where every key lives. Per-tier and
 * per-namespace totals with each namespace's owner (a uid, or "agent"), the
 * dedup ratio (logical / stored), pool fragmentation and the key list; and
 * the live jobs' workers on this node: whether each one's state is on its
 * device or only stored (which version).
 * --watch redraws every second until Ctrl-C.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Residency } from '../../agent/state/state-manager.ts'
import type { NamespaceOwnersBody } from '../../agent/api/wire/state.ts'
import type { WorkerView } from '../../agent/api/wire/workers.ts'
import { UsageError, type Command, type CommandContext } from './command.ts'
import { formatBytes, formatTable } from './table.ts'

const tiers = ['device', 'host', 'nvme'] as const

export const inspectResidencyCommand: Command = {
  summary: 'where each state key lives: tier totals, namespaces, dedup ratio, pool fragmentation, keys',
  usage: '[--prefix P] [--tier host|nvme] [--watch]',
  options: {
    prefix: { type: 'string', value: 'P', description: 'only keys that start with P (a namespace: job42/actor/); default: every key' },
    tier: { type: 'string', description: 'only keys on this tier; default: every tier', complete: ['host', 'nvme'] },
    watch: { type: 'boolean', description: 'redraw every second until Ctrl-C (not with --json)' },
  },
  examples: [
    { what: 'the keys of one job on NVMe', run: 'agentctl inspect residency --prefix job42/ --tier nvme' },
    { what: 'watch keys move between tiers', run: 'agentctl inspect residency --watch' },
  ],
  async run (context) {
    const tier = context.values.tier as string | undefined
    if (tier !== undefined && tier !== 'host' && tier !== 'nvme') throw new UsageError(`--tier must be host or nvme, got "${tier}"`)
    if (context.values.watch === true && !context.json) {
      for (;;) {
        const text = renderResidency(await fetchResidency(context, tier), await fetchWorkers(context))
        process.stdout.write(`\x1b[2J\x1b[H${text}\n`)
        try { await sleep(1000, undefined, { signal: context.signal }) } catch { return { json: null, human: '' } }
      }
    }
    const residency = await fetchResidency(context, tier)
    const workers = await fetchWorkers(context)
    return { json: { ...residency, workers }, human: renderResidency(residency, workers) }
  },
}

/** This node's workers of live jobs; [] when the agent runs none (live workers unavailable). */
async function fetchWorkers ({ client, signal }: CommandContext): Promise<WorkerView[]> {
  try {
    return (await client.workers({ signal })).workers
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_UNAVAILABLE') return []
    throw err
  }
}

/** Residency with each namespace's owner (GET /v1/state/owners; none from an agent older than that route). */
export type ResidencyWithOwners = Residency & { namespaceOwners: NamespaceOwnersBody['namespaces'] }

async function fetchResidency ({ client, values, signal }: CommandContext, tier: string | undefined): Promise<ResidencyWithOwners> {
  const prefix = values.prefix as string | undefined
  const query = prefix !== undefined ? `?prefix=${encodeURIComponent(prefix)}` : ''
  const [residency, owners] = await Promise.all([
    client.call<Residency>('GET', `/v1/state/residency${query}`, undefined, { signal }),
    client.call<NamespaceOwnersBody>('GET', `/v1/state/owners${query}`, undefined, { signal }).catch((err: { code?: string }) => {
      if (err.code === 'ERR_NOT_FOUND') return { namespaces: [] }
      throw err
    }),
  ])
  const keys = tier === undefined ? residency.keys : residency.keys.filter(k => k.tier === tier)
  return { ...residency, keys, namespaceOwners: owners.namespaces }
}

export function renderResidency (r: ResidencyWithOwners, workers: readonly WorkerView[] = []): string {
  const ratio = r.storedBytes > 0 ? (r.logicalBytes / r.storedBytes).toFixed(2) : '-'
  const tierRows = tiers.map(t => {
    const { capacityBytes, usedBytes } = r.tiers[t]
    return [t, formatBytes(usedBytes), formatBytes(capacityBytes), capacityBytes > 0 ? `${(100 * usedBytes / capacityBytes).toFixed(1)}%` : '-']
  })
  // OWNER is last, so scripts that read the earlier columns by position keep working: a uid, or "agent".
  const owners = new Map(r.namespaceOwners.map(o => [o.namespace, String(o.owner)]))
  const nsRows = r.namespaces.map(n => [n.namespace, String(n.keys), formatBytes(n.logicalBytes), formatBytes(n.storedBytes), n.quotaBytes !== null ? formatBytes(n.quotaBytes) : '-', owners.get(n.namespace) ?? '-'])
  const keyRows = r.keys.map(k => [k.key, formatBytes(k.bytes), k.region !== undefined ? `host (shm ${k.region})` : k.tier, String(k.replicas), k.durable ? 'yes' : 'no'])
  return [
    formatTable(['TIER', 'USED', 'CAPACITY', 'USE'], tierRows),
    '',
    `logical ${formatBytes(r.logicalBytes)}, stored ${formatBytes(r.storedBytes)}, dedup ratio ${ratio}; ` +
      `host pool ${formatBytes(r.hostPool.freeBytes)} free, largest free extent ${formatBytes(r.hostPool.largestFreeBytes)}, fragmentation ${(100 * r.hostPool.fragmentation).toFixed(1)}%` +
      (r.shm !== undefined && r.shm.regions > 0 ? `; ${r.shm.regions} adopted shm region(s) outside the pool, ${formatBytes(r.shm.bytes)}` : ''),
    `copies ${r.counters.offloadCopies} in / ${r.counters.onloadCopies} out, deduplicated ${r.counters.deduplicated}, spilled ${r.counters.spilled}, promoted ${r.counters.promoted}`,
    '',
    nsRows.length > 0 ? formatTable(['NAMESPACE', 'KEYS', 'LOGICAL', 'STORED', 'QUOTA', 'OWNER'], nsRows) : 'no namespaces',
    '',
    keyRows.length > 0 ? formatTable(['KEY', 'BYTES', 'TIER', 'REPLICAS', 'DURABLE'], keyRows) : 'no keys',
    ...(workers.length > 0
      ? ['', formatTable(['JOB', 'RANK', 'GPU', 'PID', 'STATE', 'STORED VERSIONS', 'BYTES'], workers.map(w => [
          w.job, String(w.rank), w.gpu === null ? '-' : String(w.gpu), w.pid === null ? '-' : String(w.pid),
          w.onDevice ? 'on device' : 'offloaded', w.storedVersions.join(',') || '-', formatBytes(w.stateBytes),
        ]))]
      : []),
  ].join('\n')
}
