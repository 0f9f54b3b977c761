// The membership table without a network: SWIM precedence, refutation, Lifeguard suspicion timeouts, retention.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { createMembership, type MembershipEvent } from '../../../mesh/membership/membership.ts'
import { suspicionBounds, suspicionTimeoutMs } from '../../../mesh/membership/suspicion-timeout.ts'
import type { AvailabilityRecord, MembershipClaim } from '../../../mesh/membership/mesh-messages.ts'

const ids = ['12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA1', '12D3KooWBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB2', '12D3KooWCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC3', '12D3KooWDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDD4']
const [self, x, y, z] = ids as [string, string, string, string]
const record = (from: string, incarnation: number, seq: number): AvailabilityRecord => ({
  kind: 'record', from, node: `n-${from.slice(-1)}`, incarnation, seq, publishedAtMs: 0, addresses: { mesh: [] },
  preemptible: false, cpu: { cores: 1, loadAvg1: 0 }, memory: { totalBytes: 1, availableBytes: 1 }, gpus: [],
})
const claim = (kind: 'suspect' | 'dead', from: string, subject: string, incarnation: number): MembershipClaim =>
  ({ kind, from, subject, incarnation, reason: kind === 'dead' ? 'suspicion-timeout' : 'probe-failed', sentAtMs: 0 })

function setup (healthy = () => true, options: Partial<{ probeIntervalMs: number, deadRetentionMs: number }> = {}) {
  const said: Array<Omit<MembershipClaim, 'from' | 'sentAtMs'>> = []
  const refuted: number[] = []
  const events: MembershipEvent[] = []
  const m = createMembership({ self, probeIntervalMs: options.probeIntervalMs ?? 10, suspicionMult: 4, suspicionMaxTimeoutMult: 6, deadRetentionMs: options.deadRetentionMs ?? 60_000 },
    { health: { healthy }, broadcast: c => said.push(c), onRefute: i => refuted.push(i) })
  m.subscribe(e => events.push(e))
  return { m, said, refuted, events }
}

t.test('suspicion timeout follows memberlist\'s formula and shrinks with confirmations (Lifeguard)', async t => {
  const o = { suspicionMult: 4, suspicionMaxTimeoutMult: 6, probeIntervalMs: 500 }
  const b20 = suspicionBounds(20, o)
  t.equal(Math.round(b20.minMs), Math.round(4 * Math.log10(20) * 500))
  t.equal(b20.expectedConfirmations, 2)
  t.equal(suspicionTimeoutMs(b20, 0), Math.floor(b20.maxMs))
  t.ok(suspicionTimeoutMs(b20, 1) < b20.maxMs && suspicionTimeoutMs(b20, 1) > b20.minMs)
  t.equal(suspicionTimeoutMs(b20, 2), b20.minMs)
  t.equal(suspicionBounds(3, o).minMs, 2000, 'log10 is floored at 1')
  t.equal(suspicionBounds(3, o).expectedConfirmations, 0, 'too few members to confirm: the minimum at once')
  t.ok(suspicionBounds(200, o).minMs > b20.minMs, 'larger clusters wait longer')
})

t.test('records: new members, monotonic versions, higher incarnations refute suspicion', async t => {
  const { m, events } = setup()
  t.equal(m.applyRecord(record(x, 1, 1)), 'accepted')
  t.equal(m.applyRecord(record(x, 1, 1)), 'stale', 'same version')
  t.equal(m.applyRecord(record(x, 1, 2)), 'accepted')
  t.equal(m.applyRecord(record(x, 0, 9)), 'stale', 'older incarnation')
  t.equal(m.applyClaim(claim('suspect', y, x, 1)), 'accepted')
  t.equal(m.get(x)?.state, 'suspect')
  t.equal(m.applyRecord(record(x, 1, 3)), 'accepted', 'a newer record at the same incarnation is taken...')
  t.equal(m.get(x)?.state, 'suspect', '...but does not clear the suspicion')
  t.equal(m.applyRecord(record(x, 2, 1)), 'accepted')
  t.equal(m.get(x)?.state, 'alive', 'a higher incarnation refutes')
  t.same(events.map(e => [e.from, e.to]), [[null, 'alive'], ['alive', 'suspect'], ['suspect', 'alive']])
  m.stop()
})

t.test('claims about this agent are refuted; dead is final for its incarnation and re-said to a live sender', async t => {
  const { m, said, refuted } = setup()
  t.equal(m.applyClaim(claim('suspect', x, self, 3)), 'refuted')
  t.same(refuted, [3])
  m.applyRecord(record(x, 1, 1))
  t.equal(m.applyClaim(claim('dead', y, x, 1)), 'accepted')
  t.equal(m.get(x)?.state, 'dead')
  t.equal(m.applyRecord(record(x, 1, 5)), 'stale', 'same incarnation cannot resurrect')
  t.match(said.at(-1), { kind: 'dead', subject: x, incarnation: 1 }, 'the dead claim is said again so it can refute')
  t.equal(m.applyClaim(claim('suspect', y, x, 1)), 'stale')
  t.equal(m.applyRecord(record(x, 2, 1)), 'accepted', 'rejoin with a higher incarnation')
  t.equal(m.get(x)?.state, 'alive')
  t.equal(m.applyClaim(claim('suspect', y, z, 1)), 'unknown')
  m.stop()
})

t.test('a suspect becomes dead after the suspicion timeout; an unhealthy agent waits instead of accusing', async t => {
  let healthy = false
  const { m, said } = setup(() => healthy)
  m.applyRecord(record(x, 1, 1))
  t.equal(m.suspect(x), false, 'no accusation while unhealthy')
  healthy = true
  t.equal(m.suspect(x), true)
  t.match(said.at(-1), { kind: 'suspect', subject: x, incarnation: 1 })
  healthy = false
  await sleep(120)
  t.equal(m.get(x)?.state, 'suspect', 'the timer does not expire while this agent is unhealthy (2 members: 40 ms)')
  healthy = true
  // The timer re-checks health each timeout (40 ms); a loaded machine may run it late, not early.
  for (let i = 0; i < 100 && m.get(x)?.state !== 'dead'; i++) await sleep(20)
  t.equal(m.get(x)?.state, 'dead')
  t.equal(m.get(x)?.reason, 'suspicion-timeout')
  t.match(said.at(-1), { kind: 'dead', subject: x, reason: 'suspicion-timeout' })
  m.stop()
})

t.test('dead members are forgotten after the retention period', async t => {
  const { m, events } = setup(() => true, { deadRetentionMs: 50 })
  m.applyRecord(record(x, 1, 1))
  m.declareDead(x, 'refused')
  t.equal(m.get(x)?.state, 'dead')
  await sleep(100)
  t.equal(m.get(x), undefined)
  t.same(events.map(e => e.to), ['alive', 'dead', 'forgotten'])
  m.stop()
})

t.test('a member\'s own goodbye arriving after its closed port was noticed turns the reason into "left"', async t => {
  const { m } = setup()
  m.applyRecord(record(x, 1, 1))
  t.ok(m.declareDead(x, 'refused'))
  t.equal(m.get(x)?.reason, 'refused')
  t.equal(m.applyClaim({ ...claim('dead', y, x, 1), reason: 'left' }), 'stale', 'a third party cannot say "left" for it')
  t.equal(m.get(x)?.reason, 'refused')
  t.equal(m.applyClaim({ ...claim('dead', x, x, 1), reason: 'left' }), 'accepted', 'its own goodbye is')
  t.equal(m.get(x)?.reason, 'left')
  t.equal(m.get(x)?.state, 'dead')
  t.equal(m.applyClaim({ ...claim('dead', x, x, 1), reason: 'left' }), 'stale', 'once')
})
