// Whole-cluster restart: term, vote, voter set and the highest epoch survive a crash of every agent.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { decisionViolations, startElectionCluster, waitForLeader } from '../../helpers/test-election.ts'

t.test('every agent SIGKILLed and restarted: the voter set is kept and the next epoch is higher', async t => {
  const cluster = await startElectionCluster(t, { servers: 3 })
  const before = await waitForLeader(cluster.agents, cluster.agents, 20_000)
  await before.leader!.client.decide('test', { before: 'restart' })
  const voters = (await cluster.agents[0]!.client.leader()).voters

  await Promise.all(cluster.agents.map(async a => { a.proc.kill('SIGKILL'); await a.exited }))
  const restarted = await Promise.all(cluster.agents.map(a => cluster.addAgent({
    name: a.name,
    stateDir: a.stateDir,
    // Same port, so the seed address every agent joins stays valid.
    args: ['--mesh-listen', `/ip4/127.0.0.1/tcp/${/\/tcp\/(\d+)/.exec(a.meshAddress)![1]}`],
  })))
  const after = await waitForLeader(restarted, restarted, 30_000, before.epoch)
  t.ok(after.epoch > before.epoch, `epoch ${after.epoch} after the restart > ${before.epoch} before`)
  const views = await Promise.all(restarted.map(a => a.client.leader()))
  t.same(views.map(v => v.voters), restarted.map(() => voters), 'the persisted voter set is kept (no new bootstrap)')
  for (const a of restarted) {
    const persisted = JSON.parse(readFileSync(join(a.stateDir, 'election.json'), 'utf8')) as { term: number, highestEpoch: number }
    t.ok(persisted.term >= after.epoch && persisted.highestEpoch === after.epoch, `${a.name}: term ${persisted.term} and highest epoch ${persisted.highestEpoch} persisted`)
  }
  t.same(decisionViolations(restarted), [], 'no invariant violation across the restart (logs span both lives)')
})
