// Fenced decisions under faults, with real agents on loopback: a frozen leader (SIGSTOP/SIGCONT, on
// the embedded backend and on etcd). Partitions: partition.test.ts.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { backendSkip, decisionViolations, readDecisionLogs, startBackendCluster, testBackends, waitForLeader } from '../../helpers/test-election.ts'
import { publishStaleUntilRejected } from '../../helpers/election-faults.ts'

for (const backend of testBackends) t.test(`${backend}: SIGSTOP of the leader: a new leader takes over; after SIGCONT the old one steps down and its decisions are rejected everywhere`, { skip: backendSkip(backend) }, async t => {
  const cluster = await startBackendCluster(t, backend, { servers: 3 })
  // A decision before the freeze. On a loaded machine an etcd lease can lapse right after the election
  // (the leader still names itself but does not act): then the agreed leader is looked up again.
  let first = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  for (let attempt = 1; ; attempt++) {
    try {
      await first.leader!.client.decide('test', { before: 'freeze' })
      break
    } catch (err) {
      if ((err as { code?: string }).code !== 'ERR_NOT_LEADER' || attempt === 5) throw err
      await sleep(500)
      first = await waitForLeader(cluster.agents, cluster.agents, 20_000)
    }
  }
  const old = first.leader!
  const others = cluster.agents.filter(a => a !== old)

  old.proc.kill('SIGSTOP')
  t.teardown(() => { old.proc.kill('SIGCONT') })
  const second = await waitForLeader(cluster.agents, others, 20_000, first.epoch)
  t.ok(second.epoch > first.epoch && second.leaderId !== old.peerId, `${second.leader?.name} leads epoch ${second.epoch} ${Math.round(second.ms)} ms after the freeze`)

  old.proc.kill('SIGCONT')
  const resumed = await waitForLeader(cluster.agents, cluster.agents, 20_000, first.epoch)
  const view = await old.client.leader()
  t.ok(view.epoch > first.epoch && view.epoch === resumed.epoch, `the resumed leader follows epoch ${view.epoch} > ${first.epoch}`)
  if (resumed.leaderId !== old.peerId) {
    t.equal(view.self, 'follower', 'it stepped down')
    await t.rejects(old.client.decide('test', { after: 'resume' }), { code: 'ERR_NOT_LEADER' }, 'it refuses to decide')
  }

  // What a leader frozen between its lease check and its publish would send after SIGCONT: its
  // decisions of the old epoch, signed with its key, which a test node publishes into the mesh.
  const staleSeqs = await publishStaleUntilRejected(cluster, old, others, first.epoch)
  t.pass('every other agent logged it as rejected')
  for (const a of others) {
    t.notOk(readDecisionLogs([a]).get(a.name)!.some(e => e.epoch === first.epoch && staleSeqs.includes(e.seq) && e.outcome !== 'rejected'), `${a.name} applied none of them`)
  }
  t.same(decisionViolations(cluster.agents), [], 'no invariant violation in any decision log')
})
