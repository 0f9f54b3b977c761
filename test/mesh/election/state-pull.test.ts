// A follower that gossip does not reach pulls the leader's decisions directly: two leader services
// on the etcd backend (a real etcd) and real libp2p nodes in this process, with a mesh whose publish
// delivers nothing (what a peer without a gossip stream sees). The follower applies the leader's
// decisions and desired state all the same, through the `election.state` leader call.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { multiaddr } from '@multiformats/multiaddr'
import { generateClusterKey, parseClusterKey } from '../../../mesh/membership/cluster-key.ts'
import { createLeaderService, type LeaderService, type LeaderServiceComponents } from '../../../mesh/election/leader-service.ts'
import { defaultElectionConfig, type ElectionConfig } from '../../../mesh/election/election-config.ts'
import { etcdSkipReason, startEtcd } from '../../helpers/etcd-process.ts'
import { tempDir } from '../../helpers/agent-process.ts'
import { startMeshNode } from '../../helpers/mesh-node.ts'

const clusterKey = parseClusterKey(generateClusterKey(), 'test key')

async function startService (t: { teardown(fn: () => unknown): void }, config: ElectionConfig): Promise<{ service: LeaderService, id: string, address: string, dial(address: string): Promise<unknown> }> {
  const node = await startMeshNode(t, clusterKey)
  const id = node.peerId.toString()
  const mesh = {
    node,
    publish: async () => {}, // gossip reaches nobody
    setDecisionHandler: () => {},
    peers: () => [],
    subscribe: () => () => {},
    addAvailabilityContributor: () => {},
    availabilityChanged: () => {},
    status: () => ({ peerId: id, addresses: [] }),
  } as unknown as LeaderServiceComponents['mesh']
  const service = await createLeaderService({ config, stateDir: tempDir(t, 'agentd-pull-') }, { logger: pino({ level: 'silent' }), mesh, leaderTasks: [] })
  const controller = new AbortController()
  await service.start({ signal: controller.signal })
  t.teardown(async () => { controller.abort(); await service.stop() })
  return { service, id, address: node.getMultiaddrs()[0]!.toString(), dial: a => node.dial(multiaddr(a)) }
}

async function waitUntil<T> (what: string, get: () => T | undefined, timeoutMs: number): Promise<T> {
  for (const end = performance.now() + timeoutMs; ; await sleep(25)) {
    const v = get()
    if (v !== undefined) return v
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`)
  }
}

t.test('without gossip, a follower pulls the leader\'s decisions and desired state over a leader call', { skip: etcdSkipReason() ?? false }, async t => {
  const etcd = await startEtcd(t)
  const config: ElectionConfig = {
    ...defaultElectionConfig,
    backend: 'etcd',
    server: true,
    etcdEndpoints: [etcd.endpoint],
    etcdLeaseTtlS: 2,
    etcdRequestTimeoutMs: 250,
    etcdPollIntervalMs: 50,
    viewGraceMs: 50,
    republishIntervalMs: 200,
  }
  const leader = await startService(t, config)
  await waitUntil('the first server to act', () => leader.service.view().acting ? true : undefined, 10_000)
  const follower = await startService(t, config)
  await follower.dial(leader.address)
  // A loaded host may let the lease lapse for a moment (ERR_NOT_LEADER): decide again once it acts.
  const decide = async (payload: unknown): Promise<{ epoch: number, seq: number }> => {
    for (let i = 0; ; i++) {
      try { return await leader.service.decide('placement', payload) } catch (err) { if (i > 40) throw err }
      await sleep(250)
    }
  }
  await decide({ job: 'a' })
  const made = await decide({ job: 'b' })

  const began = performance.now()
  await waitUntil('the follower to apply the leader\'s decisions', () => {
    const p = follower.service.view().applied
    return p.epoch === made.epoch && p.seq >= made.seq ? true : undefined
  }, 10_000)
  t.equal(follower.service.view().leaderId, leader.id, 'the follower follows the leader (known from etcd)')
  t.ok(follower.service.decisions().every(e => e.leader === leader.id && e.epoch === made.epoch && e.outcome !== 'rejected'), 'everything it logged is the leader\'s, in its epoch')
  t.same(follower.service.desiredState().placement, { job: 'b' }, 'the desired state is the leader\'s')
  t.comment(`caught up ${Math.round(performance.now() - began)} ms after the last decision (pull after ${2 * config.republishIntervalMs} ms of silence)`)
})
