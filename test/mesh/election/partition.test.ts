// Network partitions of the embedded backend (connection gater driven by the test-only /v1/fault
// routes), with real agents on loopback: 1|2 of 3 servers and 2|3 of 5, the leader on the minority
// side. The minority elects nobody, inflates no term (PreVote) and applies nothing new; the majority
// elects a leader; healing converges on one.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { decisionLoad, decisionViolations, faultInjectionArgs, startElectionCluster, waitForLeader } from '../../helpers/test-election.ts'
import { partition } from '../../helpers/election-faults.ts'

const faultArgs = [...faultInjectionArgs]

for (const { servers, minoritySize } of [{ servers: 3, minoritySize: 1 }, { servers: 5, minoritySize: 2 }]) {
  t.test(`partition ${minoritySize}|${servers - minoritySize}: the minority with the leader stops acting and elects nobody; the majority elects a leader; healing converges on one`, async t => {
    const cluster = await startElectionCluster(t, { servers, args: faultArgs })
    const first = await waitForLeader(cluster.agents, cluster.agents, 30_000)
    const minority = [first.leader!, ...cluster.agents.filter(a => a !== first.leader).slice(0, minoritySize - 1)]
    const majority = cluster.agents.filter(a => !minority.includes(a))
    const load = decisionLoad(() => cluster.agents, 'load')
    t.teardown(() => load.stop())
    await sleep(500)

    await partition(minority, majority)
    const partitionedAt = performance.now()
    const second = await waitForLeader(cluster.agents, majority, 30_000, first.epoch)
    t.ok(second.epoch > first.epoch && majority.includes(second.leader!), `the majority elected ${second.leader?.name} for epoch ${second.epoch}`)
    // The old lease ends leaseMs after its last majority round; leave margin, then watch the minority.
    await sleep(Math.max(0, 1500 - (performance.now() - partitionedAt)))
    const frozen = await Promise.all(minority.map(a => a.client.leader()))
    const watchUntil = performance.now() + 3000
    while (performance.now() < watchUntil) {
      const views = await Promise.all(minority.map(a => a.client.leader()))
      // One assertion per poll keeps the evidence in the TAP output.
      t.ok(views.every(v => v.self !== 'leader' && !v.acting), `minority: no leader (${views.map(v => v.self).join(', ')})`)
      t.same(views.map(v => v.epoch), frozen.map(v => v.epoch), 'minority: no term inflation (PreVote)')
      t.same(views.map(v => v.applied), frozen.map(v => v.applied), 'minority: applies nothing new')
      await sleep(500)
    }

    await partition([], [], cluster.agents)
    const healed = await waitForLeader(cluster.agents, cluster.agents, 30_000, first.epoch)
    t.ok(healed.epoch >= second.epoch, `healed: everyone follows ${healed.leader?.name} in epoch ${healed.epoch}`)
    const { made } = await load.stop()
    t.ok(made > 0, `${made} decisions made during the run`)
    await sleep(300)
    t.same(decisionViolations(cluster.agents), [], 'no invariant violation in any decision log')
  })
}
