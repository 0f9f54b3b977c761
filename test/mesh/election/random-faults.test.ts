// Seeded random faults against 3 real servers under decision load (leader/follower SIGKILL + restart,
// leader SIGSTOP + SIGCONT, partitions + heal); the invariants over every decision log must hold.
// More and longer runs: test/bench/election.bench.ts.
import t from 'tap'
import { startElectionCluster } from '../../helpers/test-election.ts'
import { liveCluster, randomFaultRun } from '../../helpers/election-faults.ts'

const seed = Number(process.env.ELECTION_FAULT_SEED ?? 7)

t.test(`random faults (seed ${seed}): at most one leader per epoch, no stale decision applied`, async t => {
  const live = liveCluster(await startElectionCluster(t, { servers: 3, args: ['--set', 'election.faultInjection=true'] }))
  const run = await randomFaultRun(live, seed, 3)
  t.comment(run.faults.join('; '))
  t.ok(run.epochs >= 1, `${run.decisions} decisions applied over ${run.epochs} epochs`)
  t.same(run.violations, [], 'no invariant violation in any decision log')
})
