// Network partitions of the embedded backend, with real agents in network namespaces (one per agent,
// netns-lab.ts): 1|2 of 3 servers and 2|3 of 5, the leader on the minority side, cut by moving links
// between bridges. The minority elects nobody, inflates no term (PreVote) and applies nothing new;
// the majority elects a leader; healing converges on one.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { decisionLoad, decisionViolations, waitForLeader } from '../../helpers/test-election.ts'
import { partitionLab, startLabCluster } from '../../helpers/election-faults.ts'
import { netnsSkipReason } from '../../helpers/netns-lab.ts'

const netnsSkip = await netnsSkipReason()

for (const { servers, minoritySize } of [{ servers: 3, minoritySize: 1 }, { servers: 5, minoritySize: 2 }]) {
  t.test(`partition ${minoritySize}|${servers - minoritySize}: the minority with the leader stops acting and elects nobody; the majority elects a leader; healing converges on one`, { skip: netnsSkip }, async t => {
    const live = await startLabCluster(t, 'embedded', { servers })
    const cluster = live.cluster
    const first = await waitForLeader(cluster.agents, cluster.agents, 30_000)
    const minority = [first.leader!, ...cluster.agents.filter(a => a !== first.leader).slice(0, minoritySize - 1)]
    const majority = cluster.agents.filter(a => !minority.includes(a))
    const load = decisionLoad(() => cluster.agents, 'load')
    t.teardown(() => load.stop())
    await sleep(500)

    await partitionLab(live, minority)
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

    await live.lab!.heal()
    const healed = await waitForLeader(cluster.agents, cluster.agents, 30_000, first.epoch)
    t.ok(healed.epoch >= second.epoch, `healed: everyone follows ${healed.leader?.name} in epoch ${healed.epoch}`)
    const { made } = await load.stop()
    t.ok(made > 0, `${made} decisions made during the run`)
    await sleep(300)
    t.same(decisionViolations(cluster.agents), [], 'no invariant violation in any decision log')
  })
}
