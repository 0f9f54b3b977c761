// Seeded random faults against 3 real servers under decision load (leader/follower SIGKILL + restart,
// leader SIGSTOP + SIGCONT, partitions + heal; on etcd also etcd SIGKILL + restart), on both backends;
// the invariants over every decision log must hold. The agents (and etcd) run in network namespaces,
// so a partition cuts real links. More and longer runs: test/bench/election.bench.ts.
import t from 'tap'
import { backendSkip, testBackends } from '../../helpers/test-election.ts'
import { randomFaultRun, startLabCluster } from '../../helpers/election-faults.ts'
import { netnsSkipReason } from '../../helpers/netns-lab.ts'

const netnsSkip = await netnsSkipReason()

// Seed 22 on the embedded backend: a leader SIGKILL, a leader SIGSTOP, a partition. Seed 24 on etcd:
// a partition (etcd on the majority's side), a leader SIGSTOP, an etcd outage.
const seedOf = (backend: string): number => Number(process.env.ELECTION_FAULT_SEED ?? (backend === 'etcd' ? 24 : 22))

for (const backend of testBackends) t.test(`${backend}: random faults (seed ${seedOf(backend)}): at most one leader per epoch, no stale decision applied`, { skip: backendSkip(backend) || netnsSkip }, async t => {
  const live = await startLabCluster(t, backend, { servers: 3 })
  const run = await randomFaultRun(live, seedOf(backend), 3)
  t.comment(run.faults.join('; '))
  t.ok(run.epochs >= 1, `${run.decisions} decisions applied over ${run.epochs} epochs`)
  t.same(run.violations, [], 'no invariant violation in any decision log')
})
