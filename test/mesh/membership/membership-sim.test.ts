// The membership simulator runs the agent's own membership, failure detector and neighbor set on a
// simulated clock and network: 64 agents converge, see a SIGKILLed one dead, and find a frozen one
// (SIGSTOP: nothing refuses, nothing closes) through the suspicion path; with 5% of messages lost
// nobody running is declared dead. Sizes of hundreds to thousands: test/bench/membership-sim.bench.ts.
import t from 'tap'
import { runMembershipSim } from '../../../mesh/membership/membership-sim.ts'

const base = { nodes: 64, seed: 7, joinSpreadS: 5, steadyS: 10, afterKillS: 15 }

t.test('64 agents: every one learns every other, a SIGKILLed agent is seen dead by all at once, views stay bounded', async t => {
  const r = await runMembershipSim(base)
  t.ok(r.convergenceS !== null && r.convergenceS < 10, `converged ${r.convergenceS?.toFixed(2)} s after the last start`)
  t.equal(r.detection.missed, 0, 'every running agent holds the victim dead')
  t.ok(r.detection.allS !== null && r.detection.allS < 2, `dead at all within ${r.detection.allS?.toFixed(3)} s: its port refuses, its neighbors probe it at once`)
  t.equal(r.falseSuspicions, 0, 'no running agent suspected')
  t.equal(r.falseDeaths, 0)
  t.ok(r.perAgent.neighbors.max <= 12 && r.perAgent.neighbors.median >= 4, `neighbors median ${r.perAgent.neighbors.median}, max ${r.perAgent.neighbors.max} (maxPeers 12)`)
  t.ok(r.perAgent.messagesSentPerS.median > 0 && r.perAgent.bytesSentPerS.median > 0, `${r.perAgent.messagesSentPerS.median.toFixed(1)} messages, ${Math.round(r.perAgent.bytesSentPerS.median)} B per agent per s`)
})

t.test('a frozen agent (nothing refuses, nothing closes) is found by suspicion and declared dead everywhere', async t => {
  const r = await runMembershipSim({ ...base, killMode: 'silent', afterKillS: 30 })
  t.equal(r.detection.missed, 0, 'every running agent holds it dead')
  // Suspicion: at least the Lifeguard minimum (4 × log10(64) × 0.5 s ≈ 3.6 s), after a failed probe round.
  t.ok(r.detection.firstS !== null && r.detection.firstS > 2, `no agent declared it dead before suspicion could run out (${r.detection.firstS?.toFixed(2)} s)`)
  t.ok(r.detection.allS !== null && r.detection.allS < 25, `dead at all within ${r.detection.allS?.toFixed(2)} s`)
  t.equal(r.falseDeaths, 0, 'nobody running declared dead')
})

t.test('5% of messages lost: convergence and detection still complete, nobody running is declared dead', async t => {
  const r = await runMembershipSim({ ...base, loss: 0.05 })
  t.ok(r.convergenceS !== null, `converged (${r.convergenceS?.toFixed(2)} s after the last start)`)
  t.equal(r.detection.missed, 0, 'every running agent holds the victim dead')
  t.equal(r.falseDeaths, 0, `no running agent declared dead (${r.falseSuspicions} suspicions, all refuted)`)
})

t.test('a run is a function of its options: the same seed gives the same run', async t => {
  const small = { nodes: 24, seed: 3, joinSpreadS: 2, steadyS: 3, afterKillS: 3, loss: 0.02 }
  const [a, b] = [await runMembershipSim(small), await runMembershipSim(small)]
  t.same({ ...a, wallS: 0 }, { ...b, wallS: 0 })
})

t.test('bad options are refused before anything runs', async t => {
  await t.rejects(runMembershipSim({ nodes: 1, seed: 1 }), /nodes must be an integer >= 2/)
  await t.rejects(runMembershipSim({ nodes: 10, seed: 1, loss: 1 }), /loss must be in \[0, 1\)/)
  await t.rejects(runMembershipSim({ nodes: 10, seed: 1, latencyMs: [5, 1] }), /latencyMs/)
  await t.rejects(runMembershipSim({ nodes: 10, seed: 1, kill: 9 }), /kill must be an integer in \[0, nodes - 2\]/)
  await t.rejects(runMembershipSim({ nodes: 10, seed: 1, killMode: 'reboot' as 'silent' }), /killMode/)
})
