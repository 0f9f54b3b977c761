// The SWIM probe loop without a network: a scripted prober, the real membership table, and a local
// health that can be told it stalled. What a probe concludes, and when it must not conclude anything.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { createMembership } from '../../../mesh/membership/membership.ts'
import { createFailureDetector, type ProbeOutcome } from '../../../mesh/membership/failure-detector.ts'
import type { LocalHealth } from '../../../mesh/membership/local-health.ts'
import type { AvailabilityRecord } from '../../../mesh/membership/mesh-messages.ts'

const ids = ['12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA1', '12D3KooWBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB2', '12D3KooWCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC3', '12D3KooWDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDD4']
const [self, target, h1, h2] = ids as [string, string, string, string]
const record = (from: string): AvailabilityRecord => ({
  kind: 'record', from, node: `n-${from.slice(-1)}`, incarnation: 1, seq: 1, publishedAtMs: 0, addresses: { mesh: [] },
  preemptible: false, cpu: { cores: 1, loadAvg1: 0 }, memory: { totalBytes: 1, availableBytes: 1 }, gpus: [],
})

interface Script { direct: ProbeOutcome, indirect: (helper: string) => ProbeOutcome, stalled: boolean }

function setup (script: Script, members = [target, h1, h2]) {
  const health = {
    healthy: () => !script.stalled,
    stalledSince: () => script.stalled,
    scale: (ms: number) => ms,
    probeSucceeded: () => {},
    probeFailedEverywhere: () => {},
  } as unknown as LocalHealth
  const m = createMembership({ self, probeIntervalMs: 10, suspicionMult: 4, suspicionMaxTimeoutMult: 6, deadRetentionMs: 60_000 },
    { health, broadcast: () => {}, onRefute: () => {} })
  for (const id of members) m.applyRecord(record(id))
  const detector = createFailureDetector({ probeIntervalMs: 1000, probeTimeoutMs: 10, indirectProbes: 2 }, {
    membership: m,
    health,
    log: { debug: () => {} },
    prober: {
      ping: async peer => peer === target ? script.direct : 'ack',
      pingReq: async (helper, peer) => peer === target ? script.indirect(helper) : 'ack',
    },
  })
  return { m, detector }
}

async function probeTarget (script: Script, members?: string[]) {
  const { m, detector } = setup(script, members)
  const controller = new AbortController()
  detector.start({ signal: controller.signal })
  detector.probeNow(target)
  await sleep(30)
  controller.abort()
  detector.stop()
  m.stop()
  return { state: m.get(target)?.state, reason: m.get(target)?.reason, probes: detector.probes }
}

t.test('refused here and by a helper: dead at once, even when this agent stalled meanwhile', async t => {
  t.match(await probeTarget({ direct: 'refused', indirect: () => 'refused', stalled: false }), { state: 'dead', reason: 'refused' })
  t.match(await probeTarget({ direct: 'refused', indirect: () => 'refused', stalled: true }), { state: 'dead', reason: 'refused' }, 'a refusal is no missed deadline')
  t.match(await probeTarget({ direct: 'refused', indirect: h => h === h1 ? 'refused' : 'timeout', stalled: true }), { state: 'dead' }, 'a helper that did not answer says nothing')
  t.match(await probeTarget({ direct: 'refused', indirect: () => 'refused', stalled: true }, [target]), { state: 'dead' }, 'no helper to ask (two agents)')
})

t.test('a helper that reaches it, or timeouts alone, never make it dead', async t => {
  t.match(await probeTarget({ direct: 'refused', indirect: h => h === h1 ? 'ack' : 'refused', stalled: false }), { state: 'alive' }, 'reachable from elsewhere: an asymmetric network, not a dead process')
  t.match(await probeTarget({ direct: 'timeout', indirect: () => 'timeout', stalled: false }), { state: 'suspect' }, 'no answer: suspect first')
  t.match(await probeTarget({ direct: 'refused', indirect: () => 'timeout', stalled: false }), { state: 'suspect' }, 'refused here only: suspect, helpers did not confirm')
})

t.test('a probe that timed out while this agent stalled is discarded: no accusation', async t => {
  const r = await probeTarget({ direct: 'timeout', indirect: () => 'timeout', stalled: true })
  t.equal(r.state, 'alive')
  t.equal(r.probes.discarded, 1)
})

t.test('targets: only neighbors are probed in turn, and every 8th period a random member outside them', async t => {
  const health = { healthy: () => true, stalledSince: () => false, scale: (ms: number) => ms, probeSucceeded: () => {}, probeFailedEverywhere: () => {} } as unknown as LocalHealth
  const m = createMembership({ self, probeIntervalMs: 10, suspicionMult: 4, suspicionMaxTimeoutMult: 6, deadRetentionMs: 60_000 },
    { health, broadcast: () => {}, onRefute: () => {} })
  for (const id of [target, h1, h2]) m.applyRecord(record(id))
  const pinged: string[] = []
  const outside: string[] = []
  // h1 and h2 are the neighbors; the target is no one's neighbor here (it joined, then died before a link formed).
  const detector = createFailureDetector({ probeIntervalMs: 5, probeTimeoutMs: 5, indirectProbes: 1 }, {
    membership: m,
    health,
    log: { debug: () => {} },
    targets: () => [h1, h2],
    probedOutside: peer => outside.push(peer),
    prober: {
      ping: async peer => { pinged.push(peer); return peer === target ? 'refused' : 'ack' },
      pingReq: async (_helper, peer) => peer === target ? 'refused' : 'ack',
    },
  })
  const controller = new AbortController()
  detector.start({ signal: controller.signal })
  for (let i = 0; i < 200 && m.get(target)?.state !== 'dead'; i++) await sleep(10)
  controller.abort()
  detector.stop()
  m.stop()
  t.equal(m.get(target)?.state, 'dead', 'the member outside the neighbors was probed and found dead')
  t.same(outside, [target], 'its probe was an outside one (its connection is closed as soon as it is idle)')
  const beforeOutside = pinged.slice(0, pinged.indexOf(target))
  t.ok(beforeOutside.length >= 7 && beforeOutside.every(p => p === h1 || p === h2), `the periods before it probed the neighbors only (${beforeOutside.length})`)
})
