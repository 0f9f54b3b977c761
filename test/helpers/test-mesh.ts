/**
 * startTestMesh(t, { nodes }): N real agents (separate processes, from source)
 * on loopback, each with its own temp state dir, one cluster key, and the
 * first agent as every other agent's seed; resolves once every agent sees
 * every other one's record (and none of them dead). Everything is killed at teardown.
 * The leader-election tests reuse it.
 *
 * Agents run `--dev` with the StateManager off (no 256 MiB pinned host pool per
 * agent; pass `args` to change that) and log at info level, so `output()`
 * holds the "member state" lines. A `--dev` agent is an election server that
 * leads a voter set of its own; `clusterServers: K` makes it a cluster as
 * deployed instead: the first K agents bootstrap one voter set of K, the
 * others are clients.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { generateClusterKey } from '../../mesh/membership/cluster-key.ts'
import type { PeerView } from '../../mesh/membership/mesh-views.ts'
import type { NetnsHost } from './netns-lab.ts'
import { spawnAgent, tempDir, waitReady, type AgentProcess, type SpawnOptions } from './agent-process.ts'

interface Teardown { teardown(fn: () => unknown): void }

export interface TestMeshOptions {
  nodes: number
  /** Extra agentd flags for every agent. */
  args?: string[]
  /** Extra agentd flags for the agent started index-th (0 = the seed), after `args`. */
  nodeArgs?(index: number): string[]
  /** How long to wait for convergence, ms. Default 30000 + 2000 per node. */
  convergeTimeoutMs?: number
  /** Run the built agents instead of the sources (SpawnOptions.built). Default false. */
  built?: SpawnOptions['built']
  /** Agents started at once (each start-up is CPU-bound; twenty at once on two cores starve each other). Default 4. */
  startConcurrency?: number
  /** The first K agents are the election servers of one voter set (--bootstrap-expect K), the others clients. Default: each agent leads itself (--dev). */
  clusterServers?: number
  /** Run the index-th agent on hosts[index] (a network namespace of netns-lab.ts), listening on its address. Default: loopback. */
  hosts?: readonly NetnsHost[]
}

export interface MeshAgent extends AgentProcess {
  name: string
  peerId: string
  /** Its announced mesh multiaddr (with /p2p/). */
  meshAddress: string
  /** The network namespace it runs in (TestMeshOptions.hosts), if any. */
  host?: NetnsHost
}

export interface AddAgentOptions {
  name?: string
  /** Reuse a state dir (restart with the same identity). */
  stateDir?: string
  clusterKeyFile?: string
  args?: string[]
  /** Extra environment of the agent process. */
  env?: NodeJS.ProcessEnv
  /** Run it in this network namespace, listening on its address (port 4001). Default: the nth of TestMeshOptions.hosts, if given. */
  host?: NetnsHost
}

export interface TestMesh {
  agents: MeshAgent[]
  dir: string
  clusterKeyFile: string
  /** The seed every agent joins. */
  seed: string
  /** Starts one more agent that joins the mesh (not waited for convergence). */
  addAgent(options?: AddAgentOptions): Promise<MeshAgent>
  /** `observer`'s view of `target` (undefined: unknown to it). */
  peerOf(observer: MeshAgent, target: MeshAgent): Promise<PeerView | undefined>
  /** Polls until `check` holds for every agent in `observers`; returns the time it took, ms. */
  waitFor(observers: MeshAgent[], check: (peers: PeerView[], observer: MeshAgent) => boolean, timeoutMs: number, what: string): Promise<number>
  /**
   * Every agent in `agents` has every other one's record and holds none of them dead (a member
   * may be suspect for a moment on an overloaded host: it refutes, and its record is still seen).
   */
  waitConverged(agents?: MeshAgent[], timeoutMs?: number): Promise<number>
}

export async function startTestMesh (t: Teardown, options: TestMeshOptions): Promise<TestMesh> {
  const dir = tempDir(t, 'agentd-mesh-')
  const clusterKeyFile = join(dir, 'cluster.key')
  writeFileSync(clusterKeyFile, generateClusterKey(), { mode: 0o600 })
  let index = 0
  let seed = ''
  const servers = options.clusterServers
  const electionArgs = (nth: number): string[] => servers === undefined
    ? []
    : nth < servers ? ['--bootstrap-expect', String(servers)] : ['--set', 'election.server=false']

  const addAgent = async (o: AddAgentOptions = {}): Promise<MeshAgent> => {
    const nth = index++
    const name = o.name ?? `node${String(nth).padStart(2, '0')}`
    const stateDir = o.stateDir ?? join(dir, name)
    const host = o.host ?? options.hosts?.[nth]
    const args = ['--dev', '--state-dir', stateDir, '--node-name', name, '--cluster-key', o.clusterKeyFile ?? clusterKeyFile,
      '--set', 'state.enabled=false', ...(seed !== '' ? ['--join', seed] : []), ...(host !== undefined ? ['--mesh-listen', `/ip4/${host.address}/tcp/4001`, '--set', `mesh.announceAddress=${host.address}`] : []),
      ...electionArgs(nth), ...(options.args ?? []), ...(options.nodeArgs?.(nth) ?? []), ...(o.args ?? [])]
    const agent = await spawnAgent(t, { stateDir, args, waitReady: false, built: options.built ?? false, ...(o.env !== undefined ? { env: o.env } : {}), ...(host !== undefined ? { netns: host.ns } : {}) })
    // Twenty agents starting at once on two cores take a while to answer.
    await waitReady(agent, 90_000)
    const status = await agent.client.status()
    if (status.mesh === undefined) throw new Error(`agent ${name} runs no mesh:\n${agent.output()}`)
    return Object.assign(agent, { name, peerId: status.mesh.peerId, meshAddress: status.mesh.addresses[0]!, ...(host !== undefined ? { host } : {}) })
  }

  const first = await addAgent()
  seed = first.meshAddress
  const agents = [first]
  const batch = options.startConcurrency ?? 4
  while (agents.length < options.nodes) {
    agents.push(...await Promise.all(Array.from({ length: Math.min(batch, options.nodes - agents.length) }, () => addAgent())))
  }

  const waitFor: TestMesh['waitFor'] = async (observers, check, timeoutMs, what) => {
    const began = performance.now()
    const pending = new Set(observers)
    let last = ''
    while (pending.size > 0) {
      await Promise.all([...pending].map(async o => {
        try {
          const { peers } = await o.client.meshPeers()
          if (check(peers, o)) pending.delete(o)
          else last = `${o.name} sees ${peers.map(p => `${p.node || p.peerId.slice(-6)}:${p.state}${p.reason !== undefined ? `(${p.reason})` : ''}`).join(' ')}`
        } catch (err) { last = `${o.name}: ${(err as Error).message}` }
      }))
      if (pending.size === 0) break
      if (performance.now() - began > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; ${[...pending].map(p => p.name).join(', ')} not there; last: ${last}`)
      // Each round asks every pending agent for its whole view: at 20 agents every 50 ms that is the
      // load of the test, not the mesh's. Rounds slow down with the agents asked (50 ms for up to 5).
      await sleep(Math.max(50, 10 * pending.size))
    }
    return performance.now() - began
  }

  const mesh: TestMesh = {
    agents,
    dir,
    clusterKeyFile,
    seed,
    addAgent,
    async peerOf (observer, target) {
      return (await observer.client.meshPeers()).peers.find(p => p.peerId === target.peerId)
    },
    waitFor,
    waitConverged (group = mesh.agents, timeoutMs = 30_000 + 2_000 * group.length) {
      return waitFor(group, (peers, o) => group.every(a => a === o || peers.some(p => p.peerId === a.peerId && p.state !== 'dead' && p.record !== null)),
        timeoutMs, `${group.length} agents to converge`)
    },
  }
  await mesh.waitConverged(agents, options.convergeTimeoutMs)
  return mesh
}
