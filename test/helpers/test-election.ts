/**
 * Election clusters of real agents on loopback (startTestMesh with
 * --bootstrap-expect, or on the etcd backend with a test etcd), and what the election tests ask of them: wait for one
 * leader that acts, make decisions, read every agent's decision log and check
 * the invariants (mesh/election/decision-invariants.ts).
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestMesh, type MeshAgent, type TestMesh, type TestMeshOptions } from './test-mesh.ts'
import { checkDecisionInvariants, parseDecisionLog, type InvariantViolation } from '../../mesh/election/decision-invariants.ts'
import type { DecisionLogEntry } from '../../mesh/election/decision-log.ts'
import type { LeaderViewBody } from '../../mesh/election/leader-views.ts'
import { etcdSkipReason, startEtcd, type EtcdProcess } from './etcd-process.ts'

interface Teardown { teardown(fn: () => unknown): void }

export interface ElectionClusterOptions {
  servers: number
  /** Agents that follow but never vote. Default 0. */
  clients?: number
  /** Extra flags for every agent. */
  args?: string[]
  /** Extra flags for the clients only, after `args`; a function gives client i (0-based among clients) its own. */
  clientArgs?: string[] | ((client: number) => string[])
  /** Elect through this etcd (test/helpers/etcd-process.ts) instead of the embedded backend. */
  etcd?: { endpoint: string, leaseTtlS?: number }
  /** Run agent i in hosts[i] (network namespaces, netns-lab.ts). */
  hosts?: TestMeshOptions['hosts']
  /** Which build of the agent runs (TestMeshOptions.built). Default: the sources. */
  built?: TestMeshOptions['built']
}

/** The flags that put an agent on the etcd backend (test timing: 1 s lease, 50 ms polls). */
export function etcdBackendArgs (etcd: { endpoint: string, leaseTtlS?: number }): string[] {
  return ['--set', 'election.backend=etcd', '--set', `election.etcdEndpoints=${JSON.stringify([etcd.endpoint])}`,
    '--set', `election.etcdLeaseTtlS=${etcd.leaseTtlS ?? 1}`, '--set', 'election.etcdRequestTimeoutMs=250', '--set', 'election.etcdPollIntervalMs=50']
}

export interface ElectionCluster extends TestMesh {
  servers: MeshAgent[]
  clients: MeshAgent[]
}

export async function startElectionCluster (t: Teardown, options: ElectionClusterOptions): Promise<ElectionCluster> {
  const clients = options.clients ?? 0
  const mesh = await startTestMesh(t, {
    nodes: options.servers + clients,
    args: [...(options.etcd !== undefined ? etcdBackendArgs(options.etcd) : ['--bootstrap-expect', String(options.servers)]), ...(options.args ?? [])],
    nodeArgs: i => i < options.servers ? [] : ['--set', 'election.server=false', ...(typeof options.clientArgs === 'function' ? options.clientArgs(i - options.servers) : options.clientArgs ?? [])],
    ...(options.hosts !== undefined ? { hosts: options.hosts } : {}),
    ...(options.built !== undefined ? { built: options.built } : {}),
  })
  return Object.assign(mesh, { servers: mesh.agents.slice(0, options.servers), clients: mesh.agents.slice(options.servers) })
}

export type TestBackend = 'embedded' | 'etcd'
/** The backends the kill, freeze and restart tests run against. */
export const testBackends: readonly TestBackend[] = ['embedded', 'etcd']

/** tap's `skip` option for a test on `backend`: the reason it cannot run here, or false. */
export function backendSkip (backend: TestBackend): string | false {
  return backend === 'etcd' ? etcdSkipReason() ?? false : false
}

/** startElectionCluster on `backend`; for etcd, first a test etcd (killed at teardown). */
export async function startBackendCluster (t: Teardown, backend: TestBackend, options: Omit<ElectionClusterOptions, 'etcd'>): Promise<ElectionCluster & { etcd?: EtcdProcess }> {
  if (backend === 'embedded') return startElectionCluster(t, options)
  const etcd = await startEtcd(t)
  return Object.assign(await startElectionCluster(t, { ...options, etcd: { endpoint: etcd.endpoint } }), { etcd })
}

export interface Agreement {
  leader: MeshAgent | undefined
  leaderId: string
  epoch: number
  /** Time it took, ms. */
  ms: number
}

/**
 * Polls until every agent in `agents` names the same leader in the same epoch
 * (> `aboveEpoch`) and has applied that epoch's first decision (the leader is
 * acting and its decisions reach everyone).
 */
export async function waitForLeader (all: MeshAgent[], agents: MeshAgent[], timeoutMs: number, aboveEpoch = 0): Promise<Agreement> {
  const began = performance.now()
  let last = ''
  for (;;) {
    const views = await Promise.all(agents.map(a => a.client.leader().catch((err: Error) => err)))
    const ok = views.filter((v): v is LeaderViewBody => !(v instanceof Error))
    const first = ok[0]
    if (ok.length === agents.length && first !== undefined && first.leaderId !== null && first.epoch > aboveEpoch &&
      ok.every(v => v.leaderId === first.leaderId && v.epoch === first.epoch && v.applied.epoch === first.epoch && v.applied.seq >= 1)) {
      return { leader: all.find(a => a.peerId === first.leaderId), leaderId: first.leaderId, epoch: first.epoch, ms: performance.now() - began }
    }
    last = views.map((v, i) => v instanceof Error ? `${agents[i]!.name}: ${v.message}` : `${agents[i]!.name}: ${v.self} leader=${v.leaderId?.slice(-6) ?? '-'} epoch=${v.epoch} applied=${v.applied.epoch}/${v.applied.seq}`).join('; ')
    if (performance.now() - began > timeoutMs) throw new Error(`no agreed leader above epoch ${aboveEpoch} after ${timeoutMs} ms: ${last}`)
    await sleep(25)
  }
}

/** Each agent's decision log, read from its state dir (works for killed agents too). */
export function readDecisionLogs (agents: MeshAgent[]): Map<string, DecisionLogEntry[]> {
  const logs = new Map<string, DecisionLogEntry[]>()
  for (const a of agents) {
    let text = ''
    try { text = readFileSync(join(a.stateDir, 'decisions.jsonl'), 'utf8') } catch { /* nothing logged yet */ }
    logs.set(a.name, parseDecisionLog(text))
  }
  return logs
}

export function decisionViolations (agents: MeshAgent[]): InvariantViolation[] {
  return checkDecisionInvariants(readDecisionLogs(agents))
}

/**
 * Keeps asking whoever says it leads to decide `kind` with a counter, until
 * stop() — a steady flow of decisions across faults. Refusals (not the leader,
 * lease lost) are expected and counted.
 */
export function decisionLoad (agents: () => MeshAgent[], kind: string, intervalMs = 100): { stop(): Promise<{ made: number, refused: number }> } {
  let running = true
  let made = 0
  let refused = 0
  const loop = (async () => {
    let n = 0
    while (running) {
      await Promise.all(agents().map(async a => {
        try {
          const v = await a.client.leader({ signal: AbortSignal.timeout(1000) })
          if (!v.acting) return
          await a.client.decide(kind, { n: n++, by: a.name }, { signal: AbortSignal.timeout(1000) })
          made++
        } catch { refused++ }
      }))
      await sleep(intervalMs)
    }
  })()
  return { async stop () { running = false; await loop; return { made, refused } } }
}
