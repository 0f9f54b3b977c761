/**
 * Faults against an election cluster of real agents, shared by the CI fault
 * test and the benchmark (test/bench/election.bench.ts):
 *
 * - failover(kind): SIGKILL or SIGSTOP the acting leader and measure the time
 *   from the fault to the first decision of the new epoch applied on every
 *   surviving agent (read from their decisions.jsonl, one wall clock), then
 *   repair the fault (restart / SIGCONT) and wait for one agreed leader again;
 * - publishStaleUntilRejected: what a leader frozen between its lease check
 *   and its publish would send after it resumes, until everyone rejected it;
 * - randomFaultRun(seed): a seeded sequence of faults (leader or follower
 *   SIGKILL + restart, leader SIGSTOP + SIGCONT, minority|majority partition +
 *   heal; on the etcd backend also etcd SIGKILL + restart) under a steady flow
 *   of decisions, then the invariants over every agent's decision log.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { createSeededRandom } from '../../core/seeded-random.ts'
import type { InvariantViolation } from '../../mesh/election/decision-invariants.ts'
import type { MeshAgent } from './test-mesh.ts'
import type { EtcdProcess } from './etcd-process.ts'
import { decisionLoad, decisionViolations, faultInjectionArgs, readDecisionLogs, waitForLeader, type ElectionCluster } from './test-election.ts'

export type FailoverFault = 'SIGKILL' | 'SIGSTOP'

export interface FailoverResult {
  fault: FailoverFault
  oldEpoch: number
  newEpoch: number
  /** Fault → first decision of the new epoch applied on every survivor, ms. */
  failoverMs: number
}

/** The live agents: replaced in place when an agent is restarted. */
export interface LiveCluster {
  cluster: ElectionCluster
  agents: MeshAgent[]
}

export function liveCluster (cluster: ElectionCluster): LiveCluster {
  return { cluster, agents: [...cluster.agents] }
}

const portOf = (a: MeshAgent): string => /\/tcp\/(\d+)/.exec(a.meshAddress)![1]!

/** Restarts a killed agent with the same state dir, port (so seeds stay valid) and role (server or client). */
export async function restartAgent (live: LiveCluster, agent: MeshAgent): Promise<MeshAgent> {
  const server = !live.cluster.clients.some(c => c.name === agent.name)
  const again = await live.cluster.addAgent({ name: agent.name, stateDir: agent.stateDir, args: ['--mesh-listen', `/ip4/127.0.0.1/tcp/${portOf(agent)}`, ...faultInjectionArgs, '--set', `election.server=${server}`] })
  live.agents[live.agents.indexOf(agent)] = again
  return again
}

export async function failover (live: LiveCluster, fault: FailoverFault, timeoutMs = 30_000): Promise<FailoverResult> {
  const before = await waitForLeader(live.agents, live.agents, timeoutMs)
  const leader = before.leader!
  const survivors = live.agents.filter(a => a !== leader)
  const faultAt = Date.now()
  leader.proc.kill(fault)
  try {
    await waitForLeader(live.agents, survivors, timeoutMs, before.epoch)
    const firstApplied = survivors.map(a => readDecisionLogs([a]).get(a.name)!.find(e => e.epoch > before.epoch && e.outcome !== 'rejected' && e.atMs >= faultAt))
    if (firstApplied.some(e => e === undefined)) throw new Error('a survivor has no decision of the new epoch in its log')
    return { fault, oldEpoch: before.epoch, newEpoch: Math.min(...firstApplied.map(e => e!.epoch)), failoverMs: Math.max(...firstApplied.map(e => e!.atMs)) - faultAt }
  } finally {
    if (fault === 'SIGSTOP') leader.proc.kill('SIGCONT')
    else { await leader.exited; await restartAgent(live, leader) }
    await waitForLeader(live.agents, live.agents, timeoutMs)
  }
}

export interface RandomFaultRun {
  seed: number
  faults: string[]
  decisions: number
  epochs: number
  violations: InvariantViolation[]
}

/**
 * `steps` seeded faults under decision load; every fault is repaired before the next.
 * With `etcd` (the cluster's, etcd backend) one fault in six is an etcd outage:
 * SIGKILL of etcd for 0.5–3 s, then a restart on the same data dir.
 */
export async function randomFaultRun (live: LiveCluster, seed: number, steps: number, etcd?: EtcdProcess): Promise<RandomFaultRun> {
  const random = createSeededRandom(seed)
  const faults: string[] = []
  const load = decisionLoad(() => live.agents, 'load', 100)
  try {
    for (let step = 0; step < steps; step++) {
      const { leader } = await waitForLeader(live.agents, live.agents, 30_000)
      const r = random.next()
      const followers = live.agents.filter(a => a !== leader)
      if (etcd !== undefined && random.next() < 1 / 6) {
        const outageMs = random.uniform(500, 3000)
        faults.push(`SIGKILL etcd ${Math.round(outageMs)} ms`)
        await etcd.kill()
        await sleep(outageMs)
        await etcd.restart()
      } else if (r < 0.3) {
        faults.push(`SIGKILL leader ${leader!.name}`)
        leader!.proc.kill('SIGKILL'); await leader!.exited
        await sleep(random.uniform(500, 3000))
        await restartAgent(live, leader!)
      } else if (r < 0.55) {
        const pauseMs = random.uniform(300, 4000)
        faults.push(`SIGSTOP leader ${leader!.name} ${Math.round(pauseMs)} ms`)
        leader!.proc.kill('SIGSTOP')
        await sleep(pauseMs)
        leader!.proc.kill('SIGCONT')
      } else if (r < 0.8) {
        const minoritySize = Math.floor((live.agents.length - 1) / 2)
        const minority = random.shuffled(live.agents).slice(0, Math.max(1, minoritySize))
        const majority = live.agents.filter(a => !minority.includes(a))
        faults.push(`partition ${minority.map(a => a.name).join(',')} | ${majority.map(a => a.name).join(',')}`)
        await partition(minority, majority)
        await sleep(random.uniform(1000, 4000))
        await partition([], [], live.agents)
      } else {
        const victim = random.pick(followers)
        faults.push(`SIGKILL follower ${victim.name}`)
        victim.proc.kill('SIGKILL'); await victim.exited
        await sleep(random.uniform(200, 2000))
        await restartAgent(live, victim)
      }
    }
    await waitForLeader(live.agents, live.agents, 30_000)
  } finally {
    await load.stop().then(made => faults.push(`decisions made: ${made.made}`))
  }
  await sleep(300)
  const logs = readDecisionLogs(live.agents)
  const epochs = new Set([...logs.values()].flat().filter(e => e.outcome === 'applied').map(e => e.epoch)).size
  const decisions = Math.max(...[...logs.values()].map(l => l.filter(e => e.outcome === 'applied').length))
  return { seed, faults, decisions, epochs, violations: decisionViolations(live.agents) }
}

/** Cuts every connection between `a` and `b` (both directions); `heal` agents refuse nobody again. */
export async function partition (a: MeshAgent[], b: MeshAgent[], heal: MeshAgent[] = []): Promise<void> {
  const deny = (who: MeshAgent, peers: MeshAgent[]): Promise<unknown> => who.client.call('PUT', '/v1/fault/partition', { deny: peers.map(p => p.peerId) })
  await Promise.all([...a.map(x => deny(x, b)), ...b.map(x => deny(x, a)), ...heal.map(x => deny(x, []))])
}

/**
 * Makes `old` publish decisions of `epoch` (an epoch it led, now superseded) through the
 * fault route until every agent in `others` logged one of them as rejected; returns their
 * seqs. One publish may go to nobody while gossip connections come back, so it repeats.
 */
export async function publishStaleUntilRejected (old: MeshAgent, others: MeshAgent[], epoch: number, timeoutMs = 20_000): Promise<number[]> {
  const seqs: number[] = []
  const rejected = (a: MeshAgent): boolean =>
    readDecisionLogs([a]).get(a.name)!.some(e => e.epoch === epoch && e.leader === old.peerId && seqs.includes(e.seq) && e.outcome === 'rejected')
  const deadline = performance.now() + timeoutMs
  while (!others.every(rejected)) {
    if (performance.now() > deadline) throw new Error(`stale decisions ${seqs.join(',')} of epoch ${epoch} not rejected by every other agent`)
    const stale = await old.client.call<{ epoch: number, seq: number }>('POST', '/v1/fault/stale-decision', { kind: 'test', payload: { stale: true } })
    if (stale.epoch !== epoch) throw new Error(`the stale decision went out in epoch ${stale.epoch}, not ${epoch}`)
    seqs.push(stale.seq)
    await sleep(500)
  }
  return seqs
}
