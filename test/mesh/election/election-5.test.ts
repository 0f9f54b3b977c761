// Leader election among 5 servers (real agents on loopback).
import t from 'tap'
import { startElectionCluster, waitForLeader } from '../../helpers/test-election.ts'

t.test('5 servers elect one leader', async t => {
  const cluster = await startElectionCluster(t, { servers: 5 })
  const agreed = await waitForLeader(cluster.agents, cluster.agents, 30_000)
  const views = await Promise.all(cluster.agents.map(a => a.client.leader()))
  t.equal(views.filter(v => v.self === 'leader').length, 1, `exactly one leader (${agreed.leader?.name}, epoch ${agreed.epoch})`)
  t.equal(views[0]!.voters.length, 5, 'five voters')
})
