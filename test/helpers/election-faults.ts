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
 *
 * Partitions are real: the cluster runs in network namespaces (netns-lab.ts,
 * startLabCluster) and a cut moves links between bridges. Nothing in the
 * agent can be told to refuse its peers or to publish past its lease.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { privateKeyFromProtobuf } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { createSeededRandom } from '../../core/seeded-random.ts'
import type { InvariantViolation } from '../../mesh/election/decision-invariants.ts'
import { parseClusterKey } from '../../mesh/membership/cluster-key.ts'
import { meshTopic } from '../../mesh/membership/mesh-messages.ts'
import { encodeEnvelope } from '../../mesh/membership/signed-envelope.ts'
import type { MeshAgent, TestMesh } from './test-mesh.ts'
import { startEtcd, type EtcdProcess } from './etcd-process.ts'
import { startMeshNode } from './mesh-node.ts'
import { createNetnsLab, type NetnsLab } from './netns-lab.ts'
import { decisionLoad, decisionViolations, readDecisionLogs, startElectionCluster, waitForLeader, type ElectionCluster, type ElectionClusterOptions, type TestBackend } from './test-election.ts'

interface Teardown { teardown(fn: () => unknown): void }

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
  /** The lab the agents (and etcd) run in, when they do: partitions need one. */
  lab?: NetnsLab
  /** The cluster's etcd, on the etcd backend. */
  etcd?: EtcdProcess
}

export function liveCluster (cluster: ElectionCluster & { etcd?: EtcdProcess }, lab?: NetnsLab): LiveCluster {
  return { cluster, agents: [...cluster.agents], ...(lab !== undefined ? { lab } : {}), ...(cluster.etcd !== undefined ? { etcd: cluster.etcd } : {}) }
}

/**
 * An election cluster on `backend` whose agents run in a network-namespace lab, one host each,
 * and, on etcd, the etcd in the host after theirs: partitionLab can cut it. Root only
 * (netnsSkipReason says why not).
 */
export async function startLabCluster (t: Teardown, backend: TestBackend, options: Omit<ElectionClusterOptions, 'etcd' | 'hosts'>): Promise<LiveCluster> {
  const agents = options.servers + (options.clients ?? 0)
  const lab = await createNetnsLab(t, agents + (backend === 'etcd' ? 1 : 0))
  const etcd = backend === 'etcd' ? await startEtcd(t, { host: lab.hosts[agents]! }) : undefined
  const cluster = await startElectionCluster(t, { ...options, hosts: lab.hosts.slice(0, agents), ...(etcd !== undefined ? { etcd: { endpoint: etcd.endpoint } } : {}) })
  return liveCluster(Object.assign(cluster, etcd !== undefined ? { etcd } : {}), lab)
}

/**
 * Cuts the lab in two: `side` alone on one side, every other host (the other agents, and etcd
 * when it runs in the lab) on the other. Packets across the cut are dropped, connections are not
 * reset, as when a switch fails. lab.heal() joins them again.
 */
export async function partitionLab (live: LiveCluster, side: readonly MeshAgent[]): Promise<void> {
  const lab = live.lab
  if (lab === undefined) throw new Error('a partition needs the cluster in a network-namespace lab (startLabCluster)')
  const hostOf = (a: MeshAgent): number => lab.hosts.findIndex(h => h.ns === a.host?.ns)
  const cut = side.map(hostOf)
  if (cut.includes(-1)) throw new Error(`not every agent of ${side.map(a => a.name).join(', ')} runs in the lab`)
  await lab.partition([cut, lab.hosts.map((_, i) => i).filter(i => !cut.includes(i))])
}

const portOf = (a: MeshAgent): string => /\/tcp\/(\d+)/.exec(a.meshAddress)![1]!

/** Restarts a killed agent with the same state dir, address (so seeds stay valid) and role (server or client). */
export async function restartAgent (live: LiveCluster, agent: MeshAgent): Promise<MeshAgent> {
  const server = !live.cluster.clients.some(c => c.name === agent.name)
  const role = ['--set', `election.server=${server}`]
  // In a lab, addAgent listens on the host's address again; on loopback, the same port.
  const again = await live.cluster.addAgent(agent.host !== undefined
    ? { name: agent.name, stateDir: agent.stateDir, host: agent.host, args: role }
    : { name: agent.name, stateDir: agent.stateDir, args: ['--mesh-listen', `/ip4/127.0.0.1/tcp/${portOf(agent)}`, ...role] })
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
 * On the etcd backend (live.etcd) one fault in six is an etcd outage:
 * SIGKILL of etcd for 0.5–3 s, then a restart on the same data dir.
 */
export async function randomFaultRun (live: LiveCluster, seed: number, steps: number): Promise<RandomFaultRun> {
  const { etcd } = live
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
        faults.push(`partition ${minority.map(a => a.name).join(',')} | ${majority.map(a => a.name).join(',')}${etcd !== undefined ? ',etcd' : ''}`)
        await partitionLab(live, minority)
        await sleep(random.uniform(1000, 4000))
        await live.lab!.heal()
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

/**
 * What a leader frozen between its lease check and its publish sends after it resumes: decisions
 * of `epoch` (which `old` led, now superseded), signed with `old`'s identity key (read from its
 * state dir) and published on the mesh topic by a node of the test process connected to every
 * agent in `others` (so on loopback, not in a lab), once every 500 ms until each of them logged
 * one as rejected; returns their seqs. The signature is old's, as a relayed message would be.
 */
export async function publishStaleUntilRejected (cluster: TestMesh, old: MeshAgent, others: MeshAgent[], epoch: number, timeoutMs = 20_000): Promise<number[]> {
  const key = privateKeyFromProtobuf(readFileSync(join(old.stateDir, 'mesh.key')))
  if (peerIdFromPrivateKey(key).toString() !== old.peerId) throw new Error(`${old.name}'s mesh.key is not the key of its peer id`)
  const { voterSetId } = await others[0]!.client.leader()
  // The next seq after every decision of the epoch anyone logged, so none of them is a duplicate.
  let seq = Math.max(0, ...[...readDecisionLogs([old, ...others]).values()].flat().filter(e => e.epoch === epoch).map(e => e.seq))
  const seqs: number[] = []
  const rejected = (a: MeshAgent): boolean =>
    readDecisionLogs([a]).get(a.name)!.some(e => e.epoch === epoch && e.leader === old.peerId && seqs.includes(e.seq) && e.outcome === 'rejected')
  const stops: Array<() => unknown> = []
  try {
    const node = await startMeshNode({ teardown: fn => { stops.push(fn) } }, parseClusterKey(readFileSync(cluster.clusterKeyFile, 'utf8'), 'test key'))
    node.services.pubsub.subscribe(meshTopic)
    await Promise.all(others.map(a => node.dial(multiaddr(a.meshAddress))))
    const deadline = performance.now() + timeoutMs
    // A publication before an agent's subscription is known does not reach it.
    while (!others.every(a => node.services.pubsub.getSubscribers(meshTopic).some(p => p.toString() === a.peerId))) {
      if (performance.now() > deadline) throw new Error('the agents never subscribed to the mesh topic at the test node')
      await sleep(50)
    }
    while (!others.every(rejected)) {
      if (performance.now() > deadline) throw new Error(`stale decisions ${seqs.join(',')} of epoch ${epoch} not rejected by every other agent`)
      seqs.push(++seq)
      const batch = { kind: 'decisions' as const, from: old.peerId, voterSetId, epoch, decisions: [{ seq, kind: 'test', payload: { stale: true } }], sentAtMs: Date.now() }
      await node.services.pubsub.publish(meshTopic, await encodeEnvelope(batch, key))
      await sleep(500)
    }
    return seqs
  } finally {
    for (const stop of stops.reverse()) await stop()
  }
}
