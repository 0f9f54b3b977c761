// The etcd backend keeps the desired state in etcd (real etcd, real agents on loopback): a job is
// acknowledged once etcd holds the decision, a new leader starts from etcd's copy after the old one is
// killed, and a write guarded by a campaign key that is gone changes nothing; a new leader that cannot
// read etcd's copy yet decides nothing; and a state restored into a new etcd cluster is continued.
import t, { type Test } from 'tap'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { backendSkip, decisionViolations, startBackendCluster, startElectionCluster, waitForLeader } from '../../helpers/test-election.ts'
import { startEtcd } from '../../helpers/etcd-process.ts'
import { createEtcdClient } from '../../../mesh/election/etcd-client.ts'
import { parseSnapshot } from '../../../mesh/election/replicated-log.ts'
import { jepsenJob } from '../../helpers/jepsen.ts'

t.test('etcd backend: decisions are committed to etcd; a new leader continues from there', { skip: backendSkip('etcd') }, async t => {
  const cluster = await startBackendCluster(t, 'etcd', { servers: 3 })
  const etcd = createEtcdClient({ endpoints: [cluster.etcd!.endpoint], requestTimeoutMs: 2000 })
  const first = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  const follower = cluster.agents.find(a => a !== first.leader)!
  const answer = await follower.client.submitJob(jepsenJob('etcd-job'))
  const stored = await etcd.get('/agentd/election.desired')
  t.ok(stored !== undefined, 'the desired state is a key in etcd')
  const snapshot = parseSnapshot(JSON.parse(stored!.value))
  t.ok(snapshot.seq >= answer.decision!.seq, `etcd holds the log up to ${snapshot.seq}, at or past the acknowledged decision ${answer.decision!.seq}`)
  t.ok(JSON.stringify(snapshot.entries.jobs).includes('etcd-job'), 'with the job in it')

  first.leader!.proc.kill('SIGKILL')
  await first.leader!.exited
  const survivors = cluster.agents.filter(a => a !== first.leader)
  const second = await waitForLeader(cluster.agents, survivors, 20_000, first.epoch)
  await second.leader!.client.submitJob(jepsenJob('after-failover'))
  for (const a of survivors) {
    const ids = (await a.client.jobs()).jobs.map(j => j.id)
    t.same(ids, ['etcd-job', 'after-failover'], `${a.name}: the new leader kept the acknowledged job and added the next`)
  }

  const guard = await etcd.putIfGuard('/agentd/election.desired', '{"forged":true}', '/agentd/election/no-such-campaign', 12345)
  t.equal(guard.written, false, 'a write guarded by a campaign key that does not exist is refused')
  t.notMatch((await etcd.get('/agentd/election.desired'))!.value, /forged/, 'and the desired state is unchanged')
})

/**
 * An HTTP proxy in front of the test etcd that can hold reads of one key unanswered (an etcd that is
 * slow to answer them: restarting, overloaded); every other request passes through.
 */
async function startEtcdProxy (t: Test, initialTarget: string): Promise<{ endpoint: string, hold(key: string): void, release(): void, heldReads(): number, retarget(endpoint: string): void }> {
  let target = initialTarget
  let held: { key: string, released: PromiseWithResolvers<void> } | undefined
  let heldReads = 0
  const server = createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = []
      for await (const c of req) chunks.push(c as Buffer)
      const body = Buffer.concat(chunks)
      const h = held
      if (h !== undefined && req.url === '/v3/kv/range' && (JSON.parse(body.toString()) as { key?: string }).key === Buffer.from(h.key).toString('base64')) {
        heldReads++
        await h.released.promise
      }
      const answer = await fetch(`${target}${req.url}`, { method: req.method, headers: { 'content-type': 'application/json' }, body })
      res.writeHead(answer.status, { 'content-type': 'application/json' })
      res.end(await answer.text())
    })().catch(() => res.destroy())
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { held?.released.resolve(); server.closeAllConnections(); server.close() })
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hold (key) { held = { key, released: Promise.withResolvers() } },
    release () { held?.released.resolve(); held = undefined },
    heldReads: () => heldReads,
    /** Sends every later request to another etcd (the agents keep their endpoint). */
    retarget (endpoint) { target = endpoint },
  }
}

t.test('etcd backend: a new leader that cannot read the committed state yet decides nothing (it would overwrite it)', { skip: backendSkip('etcd') }, async t => {
  const etcdProcess = await startEtcd(t)
  const proxy = await startEtcdProxy(t, etcdProcess.endpoint)
  const cluster = await startElectionCluster(t, { servers: 3, etcd: { endpoint: proxy.endpoint } })
  let first = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  const follower = cluster.agents.find(a => a !== first.leader)!
  const acknowledged = await follower.client.submitJob(jepsenJob('before-takeover'))

  // The next leader's read of the committed state goes unanswered; its campaign, lease and guarded writes do not.
  proxy.hold('/agentd/election.desired')
  // Under CI load a lease can lapse before the kill: a leader that took over meanwhile read the state
  // before the hold. The one killed must be the one leading now (a take-over after the hold is held too).
  for (let i = 0; i < 3; i++) {
    const now = await first.leader!.client.leader()
    if (now.self === 'leader' && now.epoch === first.epoch) break
    first = await waitForLeader(cluster.agents, cluster.agents, 20_000, first.epoch)
  }
  first.leader!.proc.kill('SIGKILL')
  await first.leader!.exited
  const survivors = cluster.agents.filter(a => a !== first.leader)
  let next: { agent: typeof survivors[number], epoch: number } | undefined
  for (let i = 0; i < 400 && next === undefined; i++) {
    for (const a of survivors) {
      const v = await a.client.leader()
      if (v.self === 'leader' && v.epoch > first.epoch) next = { agent: a, epoch: v.epoch }
    }
    if (next === undefined) await sleep(25)
  }
  t.ok(next !== undefined, 'a survivor won the election')
  for (let i = 0; i < 200 && proxy.heldReads() === 0; i++) await sleep(25)
  t.ok(proxy.heldReads() > 0, 'and tried to read the committed state')
  t.equal((await next!.agent.client.leader()).acting, false, 'it does not say it acts before it took over')
  const early = await next!.agent.client.decide('probe', { early: true }, { signal: AbortSignal.timeout(1500) }).then(r => r, (err: Error) => err)
  t.ok(early instanceof Error, `a decision asked for before the take-over is not made (${early instanceof Error ? early.message : 'made'})`)

  proxy.release()
  const second = await waitForLeader(cluster.agents, survivors, 20_000, first.epoch)
  const after = await second.leader!.client.decide('probe', { early: false })
  t.ok(after.seq > acknowledged.decision!.seq, `the first decision after the take-over (${after.epoch}/${after.seq}) continues the committed log (${acknowledged.decision!.seq})`)
  for (const a of survivors) {
    t.same((await a.client.jobs()).jobs.map(j => j.id), ['before-takeover'], `${a.name} kept the acknowledged job`)
  }
  t.same(decisionViolations(cluster.agents), [], 'no invariant violation in any decision log')
})

t.test('etcd backend: the desired state restored into a new etcd cluster (another cluster id) is continued, not dropped', { skip: backendSkip('etcd') }, async t => {
  const before = await startEtcd(t)
  // The old cluster's revisions run ahead of the new one's, as in a cluster that lived a while: the old
  // leader's epoch (its key's create revision) is then above every epoch the new cluster starts with.
  // The restored state used to keep it, and the new cluster's leaders could not append below it.
  const padding = createEtcdClient({ endpoints: [before.endpoint], requestTimeoutMs: 2000 })
  for (let i = 0; i < 20; i++) await padding.createIfAbsent(`/padding/${i}`, 'x', '0')
  const proxy = await startEtcdProxy(t, before.endpoint)
  const cluster = await startElectionCluster(t, { servers: 3, etcd: { endpoint: proxy.endpoint } })
  const first = { ...await waitForLeader(cluster.agents, cluster.agents, 20_000), voterSetId: (await cluster.agents[0]!.client.leader()).voterSetId }
  t.ok(first.epoch > 20, `the old cluster's leader epoch ${first.epoch} is above what the new cluster starts with`)
  await cluster.agents[0]!.client.submitJob(jepsenJob('before-restore'))
  const desiredKey = '/agentd/election.desired'
  const old = createEtcdClient({ endpoints: [before.endpoint], requestTimeoutMs: 2000 })
  const stored = (await old.get(desiredKey))!

  // The restore: a new etcd cluster (its own cluster id) holding the desired state; the campaigns' leases are gone.
  const after = await startEtcd(t)
  const restored = createEtcdClient({ endpoints: [after.endpoint], requestTimeoutMs: 2000 })
  t.not((await restored.status()).clusterId, (await old.status()).clusterId, 'the new etcd cluster has another cluster id')
  await restored.createIfAbsent(desiredKey, stored.value, '0')
  proxy.retarget(after.endpoint)
  await before.kill()

  // Every agent learns the new cluster id (a new fencing domain), then elects in it.
  for (let i = 0; i < 400; i++) {
    const views = await Promise.all(cluster.agents.map(a => a.client.leader()))
    if (views.every(v => v.voterSetId !== '' && v.voterSetId !== first.voterSetId)) break
    await sleep(25)
  }
  const second = await waitForLeader(cluster.agents, cluster.agents, 30_000)
  t.comment(`leader ${first.leaderId.slice(-6)} epoch ${first.epoch} before, ${second.leaderId.slice(-6)} epoch ${second.epoch} after`)
  const acknowledged = await second.leader!.client.submitJob(jepsenJob('after-restore'))
  t.ok(acknowledged.decision!.seq > 2, `the first job after the restore is decision ${acknowledged.decision!.seq}, after the restored ones`)
  for (const a of cluster.agents) {
    // Applied everywhere within a republish interval or two.
    let ids: string[] = []
    for (let i = 0; i < 200; i++) {
      ids = (await a.client.jobs()).jobs.map(j => j.id).sort()
      if (ids.length >= 2) break
      await sleep(25)
    }
    t.same(ids, ['after-restore', 'before-restore'], `${a.name} kept the job acknowledged before the restore`)
  }
  t.same(decisionViolations(cluster.agents), [], 'no invariant violation in any decision log')
})
