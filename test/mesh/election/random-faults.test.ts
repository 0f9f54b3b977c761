// Seeded random faults against 3 real servers under decision load (leader/follower SIGKILL + restart,
// leader SIGSTOP + SIGCONT, partitions + heal; on etcd also etcd SIGKILL + restart), on both backends;
// the invariants over every decision log must hold. More and longer runs: test/bench/election.bench.ts.
import t from 'tap'
import { backendSkip, faultInjectionArgs, startBackendCluster, testBackends } from '../../helpers/test-election.ts'
import { liveCluster, randomFaultRun } from '../../helpers/election-faults.ts'

// Seed 10 on etcd: an etcd outage, a leader SIGKILL and another etcd outage.
const seedOf = (backend: string): number => Number(process.env.ELECTION_FAULT_SEED ?? (backend === 'etcd' ? 10 : 7))

for (const backend of testBackends) t.test(`${backend}: random faults (seed ${seedOf(backend)}): at most one leader per epoch, no stale decision applied`, { skip: backendSkip(backend) }, async t => {
  const cluster = await startBackendCluster(t, backend, { servers: 3, args: [...faultInjectionArgs] })
  const run = await randomFaultRun(liveCluster(cluster), seedOf(backend), 3, cluster.etcd)
  t.comment(run.faults.join('; '))
  t.ok(run.epochs >= 1, `${run.decisions} decisions applied over ${run.epochs} epochs`)
  t.same(run.violations, [], 'no invariant violation in any decision log')
})
