/**
 * agentctl inspect residency: where state keys live. Per-tier and
 * per-namespace totals with each namespace's owner (a uid, or "agent"), the
 * dedup ratio (logical / stored) and pool fragmentation of the keys the
 * filters select, then the first page of those keys (--limit, in key order;
 * --cursor goes on from a page, --all walks every page); and the live jobs'
 * workers on this node: whether each one's state is on its device or only
 * stored (which version). The filters are applied by the agent.
 * --watch redraws the totals (no keys) every second until Ctrl-C.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { NamespaceOwnersBody, ResidencyBody, ResidencyQuery } from '../../agent/api/wire/state.ts'
import type { WorkerView } from '../../agent/api/wire/workers.ts'
import { UsageError, type Command, type CommandContext } from './command.ts'
import { choiceFlag, integerFlag } from './flags.ts'
import { formatBytes, formatTable } from './table.ts'

const tiers = ['device', 'host', 'nvme'] as const
const storedTiers = ['host', 'nvme'] as const
const name = 'inspect residency'
/** Keys a page shows unless --limit says; the agent's own default (1000) fills a screen many times. */
const shownKeys = 100
/** Keys per request when --all walks the pages: the agent's largest page. */
const allPageKeys = 2000

export const inspectResidencyCommand: Command = {
  summary: 'where state keys live: tier totals, namespaces, dedup ratio, pool fragmentation, a page of keys',
  usage: '[--prefix P] [--namespace NS] [--job J] [--tier host|nvme] [--limit N] [--cursor C | --all] [--watch]',
  options: {
    prefix: { type: 'string', value: 'P', description: 'only keys that start with P (job42/actor/model.layers.3); default: every key' },
    namespace: { type: 'string', value: 'NS', description: 'only keys of exactly this namespace (job42/actor, not job42/actor/x); default: every namespace' },
    job: { type: 'string', value: 'J', description: 'only keys of the namespace J and those under it (J/...): a live job\'s keys' },
    tier: { type: 'string', description: 'only keys on this tier; default: every tier', complete: storedTiers },
    limit: { type: 'string', value: 'N', description: `keys in the page, 1..${allPageKeys}; default ${shownKeys}` },
    cursor: { type: 'string', value: 'C', description: 'the page after the one that printed this cursor' },
    all: { type: 'boolean', description: 'every selected key (walks the pages; can be long at many keys)' },
    watch: { type: 'boolean', description: 'redraw the totals every second until Ctrl-C, without keys (not with --json)' },
  },
  examples: [
    { what: 'totals and the first 100 keys', run: 'agentctl inspect residency' },
    { what: 'the keys of one job on NVMe', run: 'agentctl inspect residency --job job42 --tier nvme' },
    { what: 'every key of a namespace, as JSON', run: 'agentctl inspect residency --namespace job42/actor --all --json' },
    { what: 'watch keys move between tiers', run: 'agentctl inspect residency --watch' },
  ],
  async run (context) {
    const { values } = context
    const filter: ResidencyQuery = {}
    for (const field of ['prefix', 'namespace', 'job'] as const) {
      if (typeof values[field] === 'string') filter[field] = values[field]
    }
    if (values.tier !== undefined) filter.tier = choiceFlag(name, values.tier, 'tier', storedTiers)
    const limit = values.limit !== undefined ? integerFlag(name, values.limit, 'limit', 1) : undefined
    if (limit !== undefined && limit > allPageKeys) throw new UsageError(`${name}: --limit must be at most ${allPageKeys}, got ${limit}`)
    const cursor = values.cursor as string | undefined
    const all = values.all === true
    const watch = values.watch === true && !context.json
    if (all && (limit !== undefined || cursor !== undefined)) throw new UsageError(`${name}: --all lists every key: not with --limit or --cursor`)
    if (watch && (all || limit !== undefined || cursor !== undefined)) throw new UsageError(`${name}: --watch redraws the totals only: not with --all, --limit or --cursor`)

    if (watch) {
      for (;;) {
        const [residency, workers] = await Promise.all([fetchResidency(context, { ...filter, summary: true }), fetchWorkers(context)])
        process.stdout.write(`\x1b[2J\x1b[H${renderResidency(residency, workers)}\n`)
        try { await sleep(1000, undefined, { signal: context.signal }) } catch { return { json: null, human: '' } }
      }
    }
    const residency = all
      ? await fetchEveryKey(context, filter)
      : await fetchResidency(context, { ...filter, limit: limit ?? shownKeys, ...(cursor !== undefined ? { cursor } : {}) })
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
export type ResidencyWithOwners = ResidencyBody & { namespaceOwners: NamespaceOwnersBody['namespaces'] }

const queryOf = (query: ResidencyQuery): string => {
  const params = new URLSearchParams(Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]))
  return params.size > 0 ? `?${params}` : ''
}

async function fetchResidency ({ client, signal }: Pick<CommandContext, 'client' | 'signal'>, query: ResidencyQuery): Promise<ResidencyWithOwners> {
  const [residency, owners] = await Promise.all([
    client.call<ResidencyBody>('GET', `/v1/state/residency${queryOf(query)}`, undefined, { signal }),
    client.call<NamespaceOwnersBody>('GET', `/v1/state/owners${queryOf(query.prefix !== undefined ? { prefix: query.prefix } : {})}`, undefined, { signal }).catch((err: { code?: string }) => {
      if (err.code === 'ERR_NOT_FOUND') return { namespaces: [] }
      throw err
    }),
  ])
  return { ...residency, namespaceOwners: owners.namespaces }
}

/** The totals of the last page and every key of every page (each request is one page: the agent's loop is never held long). */
export async function fetchEveryKey (context: Pick<CommandContext, 'client' | 'signal'>, filter: ResidencyQuery): Promise<ResidencyWithOwners> {
  let page = await fetchResidency(context, { ...filter, limit: allPageKeys })
  const keys = [...page.keys ?? []]
  while (typeof page.nextCursor === 'string') {
    page = await fetchResidency(context, { ...filter, limit: allPageKeys, cursor: page.nextCursor })
    keys.push(...page.keys ?? [])
  }
  return { ...page, keys, nextCursor: null }
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
  return [
    formatTable(['TIER', 'USED', 'CAPACITY', 'USE'], tierRows),
    '',
    `logical ${formatBytes(r.logicalBytes)}, stored ${formatBytes(r.storedBytes)}, dedup ratio ${ratio}; ` +
      `host pool ${formatBytes(r.hostPool.freeBytes)} free, largest free extent ${formatBytes(r.hostPool.largestFreeBytes)}, fragmentation ${(100 * r.hostPool.fragmentation).toFixed(1)}%` +
      (r.shm !== undefined && r.shm.regions > 0 ? `; ${r.shm.regions} adopted shm region(s) outside the pool, ${formatBytes(r.shm.bytes)}` : ''),
    `copies ${r.counters.offloadCopies} in / ${r.counters.onloadCopies} out, deduplicated ${r.counters.deduplicated}, spilled ${r.counters.spilled}, promoted ${r.counters.promoted}`,
    '',
    nsRows.length > 0 ? formatTable(['NAMESPACE', 'KEYS', 'LOGICAL', 'STORED', 'QUOTA', 'OWNER'], nsRows) : 'no namespaces',
    ...(r.keys !== undefined ? ['', ...renderKeys(r)] : []),
    ...(workers.length > 0
      ? ['', formatTable(['JOB', 'RANK', 'GPU', 'PID', 'STATE', 'STORED VERSIONS', 'BYTES'], workers.map(w => [
          w.job, String(w.rank), w.gpu === null ? '-' : String(w.gpu), w.pid === null ? '-' : String(w.pid),
          w.onDevice ? 'on device' : 'offloaded', w.storedVersions.join(',') || '-', formatBytes(w.stateBytes),
        ]))]
      : []),
  ].join('\n')
}

/** The page's key table and a line saying how many keys were selected and how to see the others. */
function renderKeys (r: ResidencyWithOwners): string[] {
  const keys = r.keys ?? []
  const selected = r.keyCounts !== undefined ? r.keyCounts.host + r.keyCounts.nvme : undefined
  const rows = keys.map(k => [k.key, formatBytes(k.bytes), k.region !== undefined ? `host (shm ${k.region})` : k.tier, String(k.replicas), k.durable ? 'yes' : 'no'])
  const lines = [rows.length > 0 ? formatTable(['KEY', 'BYTES', 'TIER', 'REPLICAS', 'DURABLE'], rows) : 'no keys']
  if (typeof r.nextCursor === 'string') {
    lines.push(`${keys.length} key(s) shown${selected !== undefined ? ` of ${selected}` : ''}; the next page: --cursor ${r.nextCursor}; every key: --all`)
  }
  return lines
}
