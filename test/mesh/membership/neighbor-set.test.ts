// The bounded partial view (neighbor-set.ts): bounds, symmetric links, uniform draws, reservoir joins.
import t from 'tap'
import { createNeighborSet } from '../../../mesh/membership/neighbor-set.ts'

/** A seeded generator (mulberry32), so a failing draw can be replayed. */
function seeded (seed: number): () => number {
  let a = seed
  return () => {
    a = (a + 0x6D2B79F5) | 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

t.test('bounds: ceil(maxPeers / 3) outbound, the rest inbound, never more than maxPeers', async t => {
  const n = createNeighborSet({ maxPeers: 12 })
  t.equal(n.outboundTarget, 4)
  t.equal(n.inboundLimit, 8)
  for (let i = 0; i < 4; i++) n.addOutbound(`o${i}`)
  const accepted = Array.from({ length: 20 }, (_, i) => n.acceptInbound(`i${i}`).accepted)
  t.equal(accepted.filter(Boolean).length, 8, 'eight inbound accepted, the rest rejected')
  t.equal(n.list().length, 12)
  t.same(n.acceptInbound('o1'), { accepted: true }, 'an outbound neighbor asking too is the same link: accepted')
  t.equal(n.list().length, 12, 'and counted once')
  t.same(n.acceptInbound('i0'), { accepted: true }, 'asking again is accepted (idempotent)')
  n.removeInbound('i3')
  t.same(n.acceptInbound('late'), { accepted: true }, 'a freed inbound slot is taken')
  const inboundOnly = n.inbound().filter(p => !n.outbound().includes(p))
  const urgent = n.acceptInbound('isolated', true)
  t.ok(urgent.accepted, 'full, a priority ask (the asker has no neighbor) is accepted')
  const evicted = urgent.evicted ?? ''
  t.ok(inboundOnly.includes(evicted) && !n.has(evicted), `by evicting an inbound neighbor (${urgent.evicted}), never an outbound one`)
  t.equal(n.list().length, 12, 'still at the bound')
  t.same(n.acceptInbound('other'), { accepted: false }, 'an ordinary ask is still rejected')
  t.equal(n.inboundOnlyCount(), 8, 'inboundOnlyCount: the inbound side the limit bounds')
  t.throws(() => createNeighborSet({ maxPeers: 1 }), /maxPeers must be an integer >= 2/)
  t.throws(() => createNeighborSet({ maxPeers: 4.5 }), /maxPeers/)
})

t.test('priority evictions are rate-limited: a peer that keeps asking with priority cannot strip the inbound side', async t => {
  let clock = 0
  const n = createNeighborSet({ maxPeers: 6, priorityEvictions: 2, priorityWindowMs: 10_000, now: () => clock })
  for (let i = 0; i < n.inboundLimit; i++) t.ok(n.acceptInbound(`i${i}`).accepted)
  t.ok(n.acceptInbound('p0', true).evicted !== undefined, 'the first priority ask evicts')
  clock = 1000
  t.ok(n.acceptInbound('p1', true).evicted !== undefined, 'the second too')
  clock = 2000
  t.same(n.acceptInbound('p2', true), { accepted: false }, 'the third within the window is rejected like an ordinary ask')
  t.equal(n.priorityRefused, 1, 'and counted')
  t.ok(n.has('p1') && !n.has('p2'), 'the last admitted asker is held, the refused one is not')
  clock = 10_000
  t.ok(n.acceptInbound('p3', true).evicted !== undefined, 'once the first eviction left the window, one more is allowed')
  t.same(n.acceptInbound('p4', true), { accepted: false }, 'but not two')
  t.equal(n.priorityRefused, 2)
  t.equal(n.inboundOnlyCount(), n.inboundLimit, 'the inbound side never exceeds its limit')
})

t.test('missing: outbound neighbors still to find, capped by the live members and the asks in flight', async t => {
  const n = createNeighborSet({ maxPeers: 12 })
  t.equal(n.missing(2, 0), 2, 'two other members: both')
  t.equal(n.missing(100, 0), 4)
  t.equal(n.missing(100, 3), 1)
  n.addOutbound('a')
  t.equal(n.missing(100, 0), 3)
  t.equal(n.missing(0, 0), 0)
  t.ok(n.remove('a'))
  t.notOk(n.remove('a'), 'removing twice says it was no neighbor')
})

t.test('a full mesh when maxPeers >= 3 x (members - 1)', async t => {
  const n = createNeighborSet({ maxPeers: 30, random: seeded(1) })
  const members = Array.from({ length: 10 }, (_, i) => `m${i}`)
  const picks = n.draw(members, n.missing(members.length, 0))
  t.same([...picks].sort(), [...members].sort(), 'every member is drawn')
})

t.test('draws are uniform and skip neighbors', async t => {
  const random = seeded(7)
  const members = Array.from({ length: 50 }, (_, i) => `m${i}`)
  const counts = new Map<string, number>()
  for (let trial = 0; trial < 4000; trial++) {
    const n = createNeighborSet({ maxPeers: 12, random })
    n.addOutbound('m0')
    for (const p of n.draw(members, 3)) counts.set(p, (counts.get(p) ?? 0) + 1)
  }
  t.notOk(counts.has('m0'), 'a neighbor is never drawn')
  const expected = 4000 * 3 / 49
  for (const [p, c] of counts) t.ok(Math.abs(c - expected) < expected * 0.25, `${p} drawn ${c} times, expected about ${Math.round(expected)}`)
  t.equal(counts.size, 49)
})

t.test('joins: reservoir sampling keeps the outbound view a uniform sample of the members', async t => {
  // Members join one by one; each agent's outbound view should end as a uniform 4-of-N sample,
  // so the first members (the seed, the early joiners) are no likelier neighbors than the last.
  const random = seeded(3)
  const total = 40
  const hits = new Array<number>(total).fill(0)
  const trials = 3000
  let largest = 0
  for (let trial = 0; trial < trials; trial++) {
    const n = createNeighborSet({ maxPeers: 12, random })
    for (let k = 0; k < total; k++) {
      const { take, replace } = n.onJoin(`m${k}`, k + 1)
      if (replace !== undefined) n.remove(replace)
      if (take) n.addOutbound(`m${k}`)
      largest = Math.max(largest, n.outbound().length)
    }
    for (const p of n.outbound()) hits[Number(p.slice(1))]!++
  }
  t.equal(largest, 4, 'the outbound side never exceeds its target')
  const expected = trials * 4 / total
  const early = hits.slice(0, 10).reduce((a, b) => a + b, 0) / 10
  const late = hits.slice(30).reduce((a, b) => a + b, 0) / 10
  t.ok(Math.abs(early - expected) < expected * 0.15, `the first 10 members: ${early.toFixed(0)} picks each, expected ${expected}`)
  t.ok(Math.abs(late - expected) < expected * 0.15, `the last 10 members: ${late.toFixed(0)} picks each, expected ${expected}`)
  const n = createNeighborSet({ maxPeers: 12 })
  n.addOutbound('x')
  t.same(n.onJoin('x', 5), { take: false }, 'a member already a neighbor is not taken twice')
})
