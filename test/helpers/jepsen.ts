/**
 * A Jepsen-style run against real agents in network namespaces
 * (netns-lab.ts), shared by the CI test (test/mesh/election/jepsen.test.ts,
 * a short seeded schedule) and the benchmark (test/bench/jepsen.bench.ts, a
 * long one):
 *
 * - clients: one loop per agent submits new jobs through that agent
 *   (POST /v1/jobs, each id once, a bounded wait per call) and records what
 *   was acknowledged (2xx), refused with a code, or left unanswered;
 * - nemesis: a seeded schedule of faults, each held for a while and then
 *   healed — partitions 2|3, 1|4, 2|2|1 with the leader on the small side,
 *   flapping (cut / heal every flapMs), shifting majorities (three different
 *   2|3 cuts in a row without a heal), and kill -9 of the leader while
 *   submissions are in flight (restarted on its state dir);
 * - after each heal: the time until every agent names the same leader and has
 *   applied the leader's commit index as of the heal (convergence);
 * - checker, after the final heal: every acknowledged job is in every agent's
 *   job table; no agent holds a job nobody submitted; all job tables are
 *   identical at the same applied index; the decision logs satisfy the
 *   invariants (one leader per epoch, no fork, nothing stale).
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { createSeededRandom } from '../../core/seeded-random.ts'
import type { InvariantViolation } from '../../mesh/election/decision-invariants.ts'
import type { LeaderViewBody } from '../../mesh/election/leader-views.ts'
import type { JobsView } from '../../mesh/control/jobs/job-table.ts'
import type { MeshAgent } from './test-mesh.ts'
import { createNetnsLab, type NetnsLab } from './netns-lab.ts'
import { decisionViolations, startElectionCluster, waitForLeader, type ElectionCluster } from './test-election.ts'

interface Teardown { teardown(fn: () => unknown): void }

export type NemesisKind = 'split-2-3' | 'split-1-4' | 'split-2-2-1' | 'flap' | 'shift' | 'kill-leader'
export const nemesisKinds: readonly NemesisKind[] = ['split-2-3', 'split-1-4', 'split-2-2-1', 'flap', 'shift', 'kill-leader']

export interface JepsenOptions {
  seed: number
  /** Election servers, one per namespace. Default 5 (the cuts above assume 5). */
  servers?: number
  /** The faults, in order. */
  schedule: readonly NemesisKind[]
  /** How long a cut is held, ms (uniform in the range). Default [1500, 3000]. */
  holdMs?: [number, number]
  /** Flapping: total time and the cut / heal period, ms. Default 8000 and 2000. */
  flapForMs?: number
  flapMs?: number
  /** Pause between one client's submissions, ms. Default 150. */
  submitPauseMs?: number
  /** Longest a client waits for one submission, ms. Default 4000. */
  submitTimeoutMs?: number
  /** Stop submitting after this many attempts in all (the job table must fit in a mesh message). Default 150. */
  maxSubmissions?: number
}

export interface JepsenResult {
  seed: number
  faults: string[]
  partitions: number
  attempted: number
  acknowledged: number
  /** Refusals by error code (ERR_NOT_COMMITTED, ERR_LEADER_UNAVAILABLE, …) and unanswered calls ('timeout'). */
  refused: Record<string, number>
  /** Acknowledged jobs missing from some agent's table after the final heal: agent → ids. */
  lost: Record<string, string[]>
  /** Jobs in some agent's table that no client submitted. */
  phantom: string[]
  tablesIdentical: boolean
  /** Per heal: ms until every agent followed one leader and applied its commit index as of the heal. */
  convergenceMs: number[]
  leaderChanges: number
  violations: InvariantViolation[]
  /** Submit latency of acknowledged submissions, ms. */
  submitMs: number[]
}

/** A job that stays in the table: placeable on CPU-only nodes, long enough never to finish during a run. */
export function jepsenJob (id: string): Record<string, unknown> {
  return { id, nodes: 1, gpusPerNode: 0, periodS: 60, iterations: 100_000, segments: [{ offsetS: 0, durationS: 10 }], maxSlowdown: 2 }
}

/** The flags every agent of a run gets: room for the run's jobs in one table and one mesh message. */
export const jepsenAgentArgs = ['--set', 'placement.maxActiveJobs=1000', '--set', 'mesh.maxRecordBytes=262144']

export async function startJepsenCluster (t: Teardown, servers: number): Promise<{ lab: NetnsLab, cluster: ElectionCluster }> {
  const lab = await createNetnsLab(t, servers)
  const cluster = await startElectionCluster(t, { servers, hosts: lab.hosts, args: jepsenAgentArgs })
  return { lab, cluster }
}

export async function runJepsen (lab: NetnsLab, cluster: ElectionCluster, options: JepsenOptions): Promise<JepsenResult> {
  const random = createSeededRandom(options.seed)
  const agents = [...cluster.agents]
  const holdMs = options.holdMs ?? [1500, 3000]
  const result: JepsenResult = {
    seed: options.seed, faults: [], partitions: 0, attempted: 0, acknowledged: 0, refused: {}, lost: {}, phantom: [],
    tablesIdentical: false, convergenceMs: [], leaderChanges: 0, violations: [], submitMs: [],
  }
  const attempted = new Set<string>()
  const acknowledged = new Set<string>()
  const indexOf = (a: MeshAgent): number => agents.indexOf(a)
  const hold = (): Promise<void> => sleep(random.uniform(holdMs[0], holdMs[1]))

  // Leader changes, sampled from one agent's view of the epoch while the run lasts.
  let watching = true
  const epochs = new Set<number>()
  const watcher = (async () => {
    while (watching) {
      await Promise.all(agents.map(a => a.client.leader({ signal: AbortSignal.timeout(500) }).then(v => { if (v.acting) epochs.add(v.epoch) }).catch(() => {})))
      await sleep(100)
    }
  })()

  let submitting = true
  let next = 0
  const clients = agents.map(async (_, i) => {
    while (submitting && result.attempted < (options.maxSubmissions ?? 150)) {
      const id = `j${options.seed}-${next++}`
      attempted.add(id)
      result.attempted++
      const began = performance.now()
      try {
        await agents[i]!.client.submitJob(jepsenJob(id), { signal: AbortSignal.timeout(options.submitTimeoutMs ?? 4000) })
        acknowledged.add(id)
        result.acknowledged++
        result.submitMs.push(performance.now() - began)
      } catch (err) {
        const code = (err as { code?: string }).code ?? ((err as Error).name === 'TimeoutError' || (err as Error).name === 'AbortError' ? 'timeout' : 'other')
        result.refused[code] = (result.refused[code] ?? 0) + 1
      }
      await sleep(options.submitPauseMs ?? 150)
    }
  })

  /** The agent acting as leader now (during a cut: the majority's), waiting up to 30 s for one. */
  const leader = async (): Promise<MeshAgent> => {
    const until = performance.now() + 30_000
    for (;;) {
      const views = await Promise.all(agents.map(a => a.client.leader({ signal: AbortSignal.timeout(500) }).catch(() => undefined)))
      const i = views.findIndex(v => v?.acting === true)
      if (i >= 0) return agents[i]!
      if (performance.now() > until) throw new Error(`no agent acts as leader after 30 s\n${agents.map(a => `--- ${a.name}:\n${a.output().slice(-3000)}`).join('\n')}`)
      await sleep(50)
    }
  }
  /** Heals, then measures convergence: one leader everywhere, its commit index as of the heal applied everywhere. */
  const healAndConverge = async (): Promise<void> => {
    await lab.heal()
    const began = performance.now()
    let target: number | undefined
    let targetFrom = ''
    for (;;) {
      const views = await Promise.all(agents.map(a => a.client.leader({ signal: AbortSignal.timeout(1000) }).catch(() => undefined)))
      const acting = views.find(v => v?.acting === true)
      if (target === undefined && acting !== undefined) {
        target = acting.commitSeq ?? undefined
        targetFrom = `commit index ${target} of ${acting.selfId.slice(-6)} acting in epoch ${acting.epoch}, ${Math.round(performance.now() - began)} ms after the heal`
      }
      const ok = (v: LeaderViewBody | undefined): boolean => v !== undefined && acting !== undefined && v.leaderId === acting.leaderId && v.epoch === acting.epoch && target !== undefined && v.applied.seq >= target
      if (views.every(ok)) { result.convergenceMs.push(performance.now() - began); return }
      if (performance.now() - began > 30_000) {
        // An agent that does not answer: whether it still runs, and the end of its log.
        const silent = agents.filter((_, i) => views[i] === undefined).map(a => `--- ${a.name} (${a.proc.exitCode === null && a.proc.signalCode === null ? 'running' : `exited ${a.proc.exitCode ?? a.proc.signalCode}`}):\n${a.output().slice(-3000)}`)
        // The named leader's own account: when it acted, stopped acting and why (the last 40 such lines).
        const named = agents.find(a => views.some(v => v?.leaderId !== undefined && v.leaderId === a.peerId))
        if (named !== undefined) silent.push(`--- ${named.name}, named leader, its leadership log:\n${named.output().split('\n').filter(line => /"msg":"(leader|election)[^"]*"/.test(line)).slice(-40).join('\n')}`)
        throw new Error(`no convergence 30 s after a heal (target: ${targetFrom || 'no agent acting'}): ${views.map(v => v === undefined ? 'no answer' : `${v.selfId.slice(-6)} ${v.self}${v.acting ? ' acting' : ''} commit ${v.commitSeq ?? '-'} leader ${v.leaderId?.slice(-6)} e${v.epoch} applied ${v.applied.epoch}/${v.applied.seq}`).join('; ')}\n${silent.join('\n')}`)
      }
      await sleep(25)
    }
  }
  /** Indexes of the current leader and `others` more, then the rest. */
  const leaderSide = async (others: number): Promise<{ small: number[], rest: number[] }> => {
    const l = indexOf(await leader())
    const shuffled = random.shuffled(agents.map((_, i) => i).filter(i => i !== l))
    return { small: [l, ...shuffled.slice(0, others)], rest: shuffled.slice(others) }
  }

  try {
    for (const kind of options.schedule) {
      await waitForLeader(agents, agents, 30_000)
      if (kind === 'split-2-3' || kind === 'split-1-4') {
        const { small, rest } = await leaderSide(kind === 'split-2-3' ? 1 : 0)
        result.faults.push(`${kind}: ${small.join(',')} | ${rest.join(',')}`)
        await lab.partition([small, rest])
        result.partitions++
        await hold()
      } else if (kind === 'split-2-2-1') {
        const { small, rest } = await leaderSide(1)
        const groups = [small, rest.slice(0, 2), rest.slice(2)]
        result.faults.push(`${kind}: ${groups.map(g => g.join(',')).join(' | ')}`)
        await lab.partition(groups)
        result.partitions++
        await hold()
      } else if (kind === 'flap') {
        const { small, rest } = await leaderSide(1)
        const until = performance.now() + (options.flapForMs ?? 8000)
        let cuts = 0
        while (performance.now() < until) {
          await lab.partition([small, rest])
          cuts++
          await sleep(options.flapMs ?? 2000)
          await lab.heal()
          await sleep(options.flapMs ?? 2000)
        }
        result.partitions += cuts
        result.faults.push(`flap: ${small.join(',')} | ${rest.join(',')} x${cuts}`)
      } else if (kind === 'shift') {
        const cuts: string[] = []
        for (let k = 0; k < 3; k++) {
          // Each cut puts the leader the previous majority elected on the small side.
          const { small, rest } = await leaderSide(1)
          cuts.push(`${small.join(',')} | ${rest.join(',')}`)
          await lab.partition([small, rest])
          result.partitions++
          await hold()
        }
        result.faults.push(`shift: ${cuts.join(' -> ')}`)
      } else {
        const victim = await leader()
        result.faults.push(`kill-leader: ${indexOf(victim)}`)
        // Mid-commit: submissions are in flight through every agent, the victim's among them.
        victim.proc.kill('SIGKILL')
        await victim.exited
        await hold()
        const again = await cluster.addAgent({ name: victim.name, stateDir: victim.stateDir, host: victim.host!, args: ['--set', 'election.server=true'] })
        agents[agents.indexOf(victim)] = again
      }
      await healAndConverge()
    }
  } finally {
    submitting = false
    await Promise.all(clients)
    watching = false
    await watcher
  }
  result.leaderChanges = Math.max(0, epochs.size - 1)
  await check(agents, attempted, acknowledged, result)
  return result
}

/** The checker over the acknowledged set (see the header). */
async function check (agents: MeshAgent[], attempted: Set<string>, acknowledged: Set<string>, result: JepsenResult): Promise<void> {
  // Quiesced: wait until everyone applied the same index, then read every table.
  const began = performance.now()
  let tables: JobsView[] = []
  for (;;) {
    const views = await Promise.all(agents.map(a => a.client.leader()))
    const acting = views.find(v => v.acting)
    if (acting !== undefined && views.every(v => v.applied.seq === acting.commitSeq && v.leaderId === acting.leaderId)) {
      tables = await Promise.all(agents.map(a => a.client.jobs()))
      const again = await Promise.all(agents.map(a => a.client.leader()))
      if (again.every(v => v.applied.seq === acting.commitSeq)) break
    }
    if (performance.now() - began > 30_000) throw new Error(`agents did not settle on one applied index: ${views.map(v => v.applied.seq).join(', ')}`)
    await sleep(100)
  }
  const jobSets = tables.map(v => new Set(v.jobs.map(j => j.id)))
  agents.forEach((a, i) => {
    const missing = [...acknowledged].filter(id => !jobSets[i]!.has(id))
    if (missing.length > 0) result.lost[a.name] = missing
  })
  result.phantom = [...new Set(tables.flatMap(v => v.jobs.map(j => j.id)))].filter(id => !attempted.has(id))
  // The desired state itself (not `local`, which differs per node by design).
  const canonical = tables.map(v => JSON.stringify({ slotS: v.slotS, revision: v.revision, contextSwitches: v.contextSwitches, jobs: v.jobs }))
  result.tablesIdentical = canonical.every(c => c === canonical[0])
  result.violations = decisionViolations(agents)
}
