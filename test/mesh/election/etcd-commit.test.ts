// The etcd backend keeps the desired state in etcd (real etcd, real agents on loopback): a job is
// acknowledged once etcd holds the decision, a new leader starts from etcd's copy after the old one is
// killed, and a write guarded by a campaign key that is gone changes nothing.
import t from 'tap'
import { backendSkip, startBackendCluster, waitForLeader } from '../../helpers/test-election.ts'
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
