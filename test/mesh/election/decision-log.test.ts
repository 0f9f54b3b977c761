// Fenced decisions, receiving side: stale epochs rejected (also after a restart), seq order, exactly
// once, snapshots close gaps, a second leader in one epoch is refused; the invariant checker flags
// what the log must never show.
import t from 'tap'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createDecisionLog, decisionDigest, type AppliedDecision, type DecisionLogEntry } from '../../../mesh/election/decision-log.ts'
import { checkDecisionInvariants, parseDecisionLog } from '../../../mesh/election/decision-invariants.ts'
import type { DecisionBatch } from '../../../mesh/membership/mesh-messages.ts'

const A = 'leaderA'
const B = 'leaderB'

function setup (t: { teardown(fn: () => unknown): void }, highestEpoch = 0, persisted: { leader: string | null, seq: number, appliedEpoch?: number } = { leader: null, seq: 0 }) {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-decisions-'))
  t.teardown(async () => { await log.flush(); rmSync(dir, { recursive: true, force: true }) }) // its audit lines are appended behind: done before the dir goes
  const state = { highestEpoch, applied: [] as AppliedDecision[], adopted: [] as Array<Record<string, unknown>>, persisted: [] as string[] }
  const log = createDecisionLog({ file: join(dir, 'decisions.jsonl'), memoryEntries: 100 }, {
    voterSetId: () => 'set',
    mayDecide: (peer: string) => [A, B].includes(peer),
    persisted: () => ({ epoch: state.highestEpoch, appliedEpoch: 0, ...persisted }),
    async persist (p) { state.highestEpoch = p.epoch; state.persisted.push(`${p.epoch}/${p.seq}`) },
    apply: d => state.applied.push(d),
    adoptState: (_e, _l, _seq, entries) => state.adopted.push(entries),
  })
  return { log, state, file: join(dir, 'decisions.jsonl') }
}

const batch = (from: string, epoch: number, seqs: number[], extra: Partial<DecisionBatch> = {}): DecisionBatch =>
  ({ kind: 'decisions', from, voterSetId: 'set', epoch, decisions: seqs.map(seq => ({ seq, kind: 'k', payload: { seq } })), sentAtMs: 0, ...extra })

t.test('in order, exactly once; gaps wait; a higher epoch fences the lower one', async t => {
  const { log, state, file } = setup(t)
  t.equal(await log.receive(batch(A, 1, [1])), 'accepted')
  t.equal(await log.receive(batch(A, 1, [3])), 'accepted', 'seq 3 waits for 2')
  t.same(state.applied.map(d => d.seq), [1])
  await log.receive(batch(A, 1, [2, 3]))
  await log.receive(batch(A, 1, [1, 2, 3]))
  t.same(state.applied.map(d => d.seq), [1, 2, 3], 'applied in order, each once')
  await log.receive(batch(B, 2, [4]))
  t.equal(state.highestEpoch, 2, 'the new epoch is persisted before it is applied')
  t.equal(await log.receive(batch(A, 1, [5])), 'stale', 'an older epoch is stale')
  t.same(state.applied.map(d => `${d.epoch}/${d.seq}`), ['1/1', '1/2', '1/3', '2/4'], 'the log index counts on across epochs')
  t.same(log.counts(), { applied: 4, rejected: 1, snapshots: 0, violations: 0 })
  await log.flush()
  const entries = parseDecisionLog(readFileSync(file, 'utf8'))
  t.match(entries.at(-1), { epoch: 1, seq: 5, leader: A, outcome: 'rejected' }, 'the rejection is in the file')
  t.same(checkDecisionInvariants(new Map([['x', entries]])), [], 'the log satisfies the invariants')
})

t.test('a restarted agent keeps rejecting epochs below the persisted one', async t => {
  const { log, state } = setup(t, 5)
  t.equal(await log.receive(batch(A, 4, [1])), 'stale')
  t.same(state.applied, [])
})

t.test('after a restart, decisions of the persisted epoch delivered again are not applied twice', async t => {
  const { log, state } = setup(t, 8, { leader: A, seq: 5 })
  await log.receive(batch(A, 8, [1, 2, 3, 4, 5]))
  t.same(state.applied, [], 'seq 1..5 were applied before the restart')
  await log.receive(batch(A, 8, [6]))
  t.same(state.applied.map(d => d.seq), [6], 'the epoch continues at 6')
  t.same(state.persisted, ['8/6'], 'the position is persisted before the decision is applied')
  t.equal(await log.receive(batch(B, 8, [7])), 'stale', 'the persisted epoch leader is kept across the restart')
  t.match(log.entries()[0], { outcome: 'resumed', seq: 5, leader: A }, 'the log starts with where the agent resumed')
  // A kill lost the file's lines for 4 and 5 (written behind the persisted position): the marker bridges them.
  const e = (seq: number, outcome: 'applied' | 'resumed' = 'applied'): DecisionLogEntry => ({ atMs: 0, epoch: 8, seq, leader: A, kind: 'k', outcome, digest: decisionDigest('k', seq) })
  t.same(checkDecisionInvariants(new Map([['x', [e(1), e(2), e(3), e(5, 'resumed'), e(6)]]])), [], 'no gap reported across a restart')
  t.match(checkDecisionInvariants(new Map([['x', [e(1), e(2), e(3), e(6)]]])), [{ invariant: 'gap-free' }], 'a real gap still is')
})

t.test('a second sender in one epoch is refused and counted as a violation', async t => {
  const { log, state } = setup(t)
  await log.receive(batch(A, 3, [1]))
  t.equal(await log.receive(batch(B, 3, [2])), 'stale')
  t.same(state.applied.map(d => d.leader), [A])
  t.equal(log.counts().violations, 1)
})

t.test('foreign voter sets and non-voters are ignored', async t => {
  const { log, state } = setup(t)
  t.equal(await log.receive(batch(A, 1, [1], { voterSetId: 'other' })), 'ignored')
  t.equal(await log.receive(batch('stranger', 1, [1])), 'ignored')
  t.same(state.applied, [])
})

t.test('a snapshot closes a gap the recent decisions cannot fill', async t => {
  const { log, state } = setup(t)
  await log.receive(batch(A, 1, [1]))
  await log.receive(batch(A, 1, [6, 7], { state: { seq: 5, entries: { k: { seq: 5 } } } }))
  t.same(state.adopted, [{ k: { seq: 5 } }], 'desired state adopted')
  t.same(state.applied.map(d => d.seq), [1, 6, 7], 'then 6 and 7 applied in order')
  t.same(log.position(), { epoch: 1, seq: 7, leader: A, appliedEpoch: 1 })
})

t.test('a new epoch whose first decision leaves a gap waits for the committed state it carries; nothing of the old epoch is applied in between', async t => {
  const { log, state } = setup(t)
  await log.receive(batch(A, 1, [1, 2]))
  // Decision 3 was committed in epoch 1 but never reached this agent; epoch 2 starts at 4 and carries the state.
  await log.receive(batch(B, 2, [5]))
  t.same(state.applied.map(d => d.seq), [1, 2], '5 waits: 3 and 4 are missing')
  await log.receive(batch(B, 2, [4], { state: { seq: 4, entries: { k: { seq: 4 }, leader: B } } }))
  t.same(state.adopted, [{ k: { seq: 4 }, leader: B }], 'the committed state as of 4 is adopted')
  t.same(state.applied.map(d => d.seq), [1, 2, 5], 'then 5 follows')
  t.same(log.counts().snapshots, 1)
})

t.test('an agent that applied decisions never committed (an older version, a deposed leader) is repaired by the next epoch\'s state', async t => {
  const { log, state, file } = setup(t)
  await log.receive(batch(A, 1, [1, 2, 3, 4]))
  // Epoch 2's committed log ends at 3 (4 was A's, never committed), and B's own first decision is 4 as well.
  await log.receive(batch(B, 2, [4], { decisions: [{ seq: 4, kind: 'leader', payload: B }], state: { seq: 4, entries: { k: { seq: 3 }, leader: B } } }))
  t.same(state.adopted, [{ k: { seq: 3 }, leader: B }], 'the committed state replaced what was applied beyond it')
  t.same(log.position(), { epoch: 2, seq: 4, leader: B, appliedEpoch: 2 })
  await log.receive(batch(B, 2, [4], { state: { seq: 4, entries: { k: { seq: 3 }, leader: B } } }))
  t.equal(log.counts().snapshots, 1, 'a state batch of the same epoch and index changes nothing')
  await log.flush()
  const entries = parseDecisionLog(readFileSync(file, 'utf8'))
  t.match(entries.at(-1), { seq: 4, outcome: 'snapshot', reason: 'repair' })
  t.match(checkDecisionInvariants(new Map([['x', entries]])).map(v => v.invariant), ['no-stale-apply'], 'the checker reports the repair: something uncommitted had been applied')
})

t.test('the invariant checker flags two leaders in an epoch, stale applies, gaps and disagreement', async t => {
  const e = (epoch: number, seq: number, leader: string, payload: unknown = seq): DecisionLogEntry =>
    ({ atMs: 0, epoch, seq, leader, kind: 'k', outcome: 'applied', digest: decisionDigest('k', payload) })
  const found = checkDecisionInvariants(new Map([
    ['x', [e(1, 1, A), e(2, 2, B), e(1, 3, A)]],
    ['y', [e(1, 1, B, 'other'), e(1, 3, B)]],
  ])).map(v => v.invariant).sort()
  t.same(found, ['agreement', 'gap-free', 'no-stale-apply', 'one-leader-per-epoch', 'one-leader-per-epoch'])
  t.same(checkDecisionInvariants(new Map([['x', [e(1, 1, A), e(1, 2, A), e(2, 3, B)]], ['y', [e(1, 1, A), e(2, 2, B, 'forked')]]])).map(v => v.invariant),
    ['agreement'], 'index 2 holds different decisions on two agents: a fork, whatever the epochs')
})

t.test('when the election moves to another voter set, the log continues from the position persisted for it', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-decisions-'))
  t.teardown(async () => { await log.flush(); rmSync(dir, { recursive: true, force: true }) }) // its audit lines are appended behind: done before the dir goes
  const store = { voterSetId: 'old', epoch: 40, leader: A as string | null, seq: 7 }
  const applied: AppliedDecision[] = []
  const log = createDecisionLog({ file: join(dir, 'decisions.jsonl'), memoryEntries: 100 }, {
    voterSetId: () => store.voterSetId,
    mayDecide: (peer: string) => [A, B].includes(peer),
    persisted: () => ({ epoch: store.epoch, leader: store.leader, seq: store.seq, appliedEpoch: 0 }),
    async persist (p) { Object.assign(store, { epoch: p.epoch, leader: p.leader, seq: p.seq }) },
    apply: d => applied.push(d),
    adoptState: () => {},
  })
  t.equal(await log.receive(batch(A, 3, [1], { voterSetId: 'old' })), 'stale', 'epoch 3 < 40 in the old domain')
  Object.assign(store, { voterSetId: 'new', epoch: 0, leader: null, seq: 0 })
  t.same(log.position(), { epoch: 0, leader: null, seq: 0, appliedEpoch: 0 }, 'the position is the new domain\'s before any batch of it (a leader of epoch 3 there may act)')
  t.match(log.entries().at(-1), { outcome: 'moved', reason: 'voter set new', epoch: 0, seq: 0 }, 'and the log records the move')
  t.equal(await log.receive(batch(B, 3, [1], { voterSetId: 'new' })), 'accepted', 'epoch 3 of the new domain is not compared with the old 40')
  t.same(applied.map(d => `${d.epoch}/${d.seq}/${d.leader}`), [`3/1/${B}`])
  t.equal(store.epoch, 3, 'the new domain\'s epoch is persisted')
})

t.test('a batch of the old voter set in flight when the election moves writes nothing into the new set\'s position', async t => {
  // The etcd restore: agents applying the old domain's epoch 9 while they learn the new cluster id.
  // The old batch's later writes used to land in the new domain's (reset) position, and every
  // epoch of the new domain below 9 was then refused: the new leader's decisions never applied.
  const dir = mkdtempSync(join(tmpdir(), 'agentd-decisions-'))
  t.teardown(async () => { await log.flush(); rmSync(dir, { recursive: true, force: true }) }) // its audit lines are appended behind: done before the dir goes
  const store = { voterSetId: 'old', epoch: 8, leader: A as string | null, seq: 2 }
  const writes: string[] = []
  let slow: PromiseWithResolvers<void> | undefined
  const applied: AppliedDecision[] = []
  const log = createDecisionLog({ file: join(dir, 'decisions.jsonl'), memoryEntries: 100 }, {
    voterSetId: () => store.voterSetId,
    mayDecide: (peer: string) => [A, B].includes(peer),
    persisted: () => ({ epoch: store.epoch, leader: store.leader, seq: store.seq, appliedEpoch: store.epoch }),
    // As the election store: the write lands in memory at once, its fsync takes a while.
    async persist (p) {
      writes.push(`${store.voterSetId} ${p.epoch}/${p.seq}`)
      Object.assign(store, { epoch: p.epoch, leader: p.leader, seq: p.seq })
      if (slow !== undefined) await slow.promise
    },
    apply: d => applied.push(d),
    adoptState: () => {},
  })
  t.equal(await log.receive(batch(A, 8, [3], { voterSetId: 'old' })), 'accepted')
  slow = Promise.withResolvers<void>()
  const inFlight = log.receive(batch(B, 9, [4, 5], { voterSetId: 'old' }))
  await new Promise(resolve => setImmediate(resolve))
  // The election learns the new domain while the epoch-9 write is in flight; the store resets the position.
  Object.assign(store, { voterSetId: 'new', epoch: 0, leader: null, seq: 0 })
  slow.resolve()
  slow = undefined
  t.equal(await inFlight, 'ignored', 'the rest of the old batch is dropped')
  t.same(store, { voterSetId: 'new', epoch: 0, leader: null, seq: 0 }, 'the new domain\'s position is untouched')
  t.equal(await log.receive(batch(A, 3, [1], { voterSetId: 'new' })), 'accepted', 'epoch 3 of the new domain applies')
  t.same(applied.map(d => `${d.epoch}/${d.seq}`), ['8/3', '3/1'], 'no decision of the old batch was applied after the move')
  t.same(writes.filter(w => w.startsWith('old')), ['old 8/3', 'old 9/3'], 'the old batch wrote once, before the move')
})

t.test('the invariants start over at a move to another voter set, whose epochs are not comparable', async t => {
  const e = (epoch: number, seq: number, leader: string, outcome: DecisionLogEntry['outcome'] = 'applied', reason?: string): DecisionLogEntry =>
    ({ atMs: 0, epoch, leader, seq, kind: 'k', outcome, digest: `d${seq}`, ...(reason !== undefined ? { reason } : {}) })
  const moved = [e(22, 1, A), e(22, 2, A), e(0, 2, '', 'moved', 'voter set new'), e(3, 3, B, 'snapshot'), e(3, 4, B)]
  t.same(checkDecisionInvariants(new Map([['x', moved], ['y', moved]])), [], 'epoch 3 after 22 in another voter set is no stale apply')
  const notMoved = [e(22, 1, A), e(22, 2, A), e(3, 3, B)]
  t.same(checkDecisionInvariants(new Map([['x', notMoved]])).map(v => v.invariant), ['no-stale-apply'], 'in one voter set it is')
  const twoLeaders = [e(3, 1, A), e(0, 1, '', 'moved', 'voter set new'), e(3, 2, B)]
  t.same(checkDecisionInvariants(new Map([['x', twoLeaders]])), [], 'epoch 3 of each voter set may have its own leader')
})
