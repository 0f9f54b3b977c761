// Whole-cluster restart: term, vote, voter set and the highest epoch survive a crash of every agent
// (embedded backend); on etcd the epochs (create revisions) stay monotonic across the restart too.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { liveCluster, restartAgent } from '../../helpers/election-faults.ts'
import { backendSkip, decisionViolations, startBackendCluster, testBackends, waitForLeader } from '../../helpers/test-election.ts'

for (const backend of testBackends) t.test(`${backend}: every agent SIGKILLed and restarted: the next epoch is higher`, { skip: backendSkip(backend) }, async t => {
  const cluster = await startBackendCluster(t, backend, { servers: 3 })
  const before = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  await before.leader!.client.decide('test', { before: 'restart' })
  // etcd: every server campaigns, but an agent learns a campaign key only at its next poll: read the voter
  // set from the leader's view, and expect on etcd exactly the three servers.
  const voters = backend === 'etcd' ? cluster.servers.map(a => a.peerId) : (await before.leader!.client.leader()).voters

  await Promise.all(cluster.agents.map(async a => { a.proc.kill('SIGKILL'); await a.exited }))
  // Same state dirs, ports (the seed address every agent joins stays valid) and roles.
  const live = liveCluster(cluster)
  const restarted = await Promise.all(cluster.agents.map(a => restartAgent(live, a)))
  const after = await waitForLeader(restarted, restarted, 30_000, before.epoch)
  t.ok(after.epoch > before.epoch, `epoch ${after.epoch} after the restart > ${before.epoch} before`)
  // etcd: every agent sees the last server's new campaign key at its next poll; wait for the voter set as election.test does.
  let views = await Promise.all(restarted.map(a => a.client.leader()))
  const settled = (): boolean => views.every(v => v.voters.length === voters.length && v.voters.every(p => voters.includes(p)))
  for (const deadline = Date.now() + 10_000; Date.now() < deadline && !settled();) {
    await new Promise(resolve => setTimeout(resolve, 100))
    views = await Promise.all(restarted.map(a => a.client.leader()))
  }
  if (backend === 'embedded') t.same(views.map(v => v.voters), restarted.map(() => voters), 'the persisted voter set is kept (no new bootstrap)')
  else t.same(views.map(v => [...v.voters].sort()), restarted.map(() => [...voters].sort()), 'the same three servers campaign again')
  for (const a of restarted) {
    const persisted = JSON.parse(readFileSync(join(a.stateDir, 'election.json'), 'utf8')) as { term: number, highestEpoch: number }
    if (backend === 'embedded') t.ok(persisted.term >= after.epoch, `${a.name}: term ${persisted.term} persisted`)
    t.equal(persisted.highestEpoch, after.epoch, `${a.name}: highest epoch ${persisted.highestEpoch} persisted`)
  }
  t.same(decisionViolations(restarted), [], 'no invariant violation across the restart (logs span both lives)')
})
