// The etcd backend when etcd itself goes away (real etcd and agents on loopback): the leader stops
// acting within the lease TTL and nobody else acts while etcd is down; once etcd is back a leader
// acts again, and the decision logs hold no invariant violation.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { MeshAgent } from '../../helpers/test-mesh.ts'
import { backendSkip, decisionViolations, startBackendCluster, waitForLeader } from '../../helpers/test-election.ts'

const leaseTtlMs = 1000 // etcdBackendArgs' default etcdLeaseTtlS

t.test('etcd killed: the leader stops acting within the lease TTL, nobody acts until etcd is back', { skip: backendSkip('etcd') }, async t => {
  const cluster = await startBackendCluster(t, 'etcd', { servers: 3 })
  const etcd = cluster.etcd!
  const first = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  t.ok((await first.leader!.client.leader()).acting, `${first.leader!.name} acts in epoch ${first.epoch}`)

  const killedAt = performance.now()
  await etcd.kill()
  // Whatever the leader's last keep-alive was, it was sent before the kill: its acting window ends by killedAt + 0.9 × TTL.
  await sleep(Math.max(0, killedAt + leaseTtlMs - performance.now()))
  const watchUntil = performance.now() + 2500
  while (performance.now() < watchUntil) {
    const views = await Promise.all(cluster.agents.map(a => a.client.leader()))
    t.same(views.filter(v => v.acting).map(v => v.selfId), [], `${Math.round(performance.now() - killedAt)} ms after the kill: nobody acts`)
    await sleep(500)
  }
  await t.rejects(first.leader!.client.decide('test', { during: 'outage' }), { code: 'ERR_NOT_LEADER' }, 'the old leader refuses to decide')

  await etcd.restart()
  // etcd renews every lease when it comes back: the same leader may resume its epoch.
  const deadline = performance.now() + 20_000
  let acting: MeshAgent | undefined
  while (acting === undefined) {
    if (performance.now() > deadline) throw new Error('no agent acts 20 s after etcd came back')
    const views = await Promise.all(cluster.agents.map(a => a.client.leader()))
    acting = cluster.agents.find((_a, i) => views[i]!.acting)
    await sleep(50)
  }
  const made = await acting.client.decide('test', { after: 'outage' })
  t.ok(made.epoch >= first.epoch, `etcd back: ${acting.name} acts and decides again in epoch ${made.epoch}`)
  const again = await waitForLeader(cluster.agents, cluster.agents, 20_000, first.epoch - 1)
  t.equal(again.leaderId, acting.peerId, 'everyone follows it')
  await sleep(300)
  t.same(decisionViolations(cluster.agents), [], 'no invariant violation in any decision log')
})
