// The election's persisted state: atomic saves, rejection of a corrupt file, and fencing domains
// (a new voter set or another backend forgets the old epoch; the Raft term never goes back).
import t from 'tap'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openElectionStore } from '../../../mesh/election/election-store.ts'

function stateDir (t: { teardown(fn: () => unknown): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-election-store-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const onDisk = (dir: string): Record<string, unknown> => JSON.parse(readFileSync(join(dir, 'election.json'), 'utf8')) as Record<string, unknown>

t.test('a save is on disk when it resolves and survives reopening', async t => {
  const dir = stateDir(t)
  const store = await openElectionStore(dir, 'embedded')
  await store.save({ term: 4, votedFor: 'p1', voters: ['p1', 'p2', 'p3'], voterSetId: 'v1', highestEpoch: 4, epochLeader: 'p1', appliedSeq: 9 })
  t.match(onDisk(dir), { term: 4, voterSetId: 'v1', highestEpoch: 4, backend: 'embedded' })
  const again = await openElectionStore(dir, 'embedded')
  t.equal(again.switchedFrom, null)
  t.match(again.current(), { term: 4, votedFor: 'p1', voters: ['p1', 'p2', 'p3'], highestEpoch: 4, epochLeader: 'p1', appliedSeq: 9 })
})

t.test('a corrupt file is an error naming the file, not an empty state', async t => {
  const dir = stateDir(t)
  writeFileSync(join(dir, 'election.json'), JSON.stringify({ term: -1, votedFor: null, voters: [], voterSetId: '', highestEpoch: 0 }))
  await t.rejects(openElectionStore(dir, 'embedded'), { code: 'ERR_ELECTION_STATE', message: /election\.json/ })
  writeFileSync(join(dir, 'election.json'), JSON.stringify({ term: 1, votedFor: null, voters: [], voterSetId: '', highestEpoch: 0, backend: 'zookeeper' }))
  await t.rejects(openElectionStore(dir, 'embedded'), { code: 'ERR_ELECTION_STATE' })
})

t.test('a file written before backends were recorded is taken as the configured backend\'s', async t => {
  const dir = stateDir(t)
  writeFileSync(join(dir, 'election.json'), JSON.stringify({ term: 3, votedFor: null, voters: ['a'], voterSetId: 'v', highestEpoch: 3 }))
  const store = await openElectionStore(dir, 'embedded')
  t.equal(store.switchedFrom, null)
  t.match(store.current(), { highestEpoch: 3, voterSetId: 'v', backend: 'embedded' })
})

t.test('a new voter set resets the fencing position unless the save sets it', async t => {
  const dir = stateDir(t)
  const store = await openElectionStore(dir, 'etcd')
  await store.save({ voterSetId: 'cluster-1', voters: ['a'], highestEpoch: 812, epochLeader: 'a', appliedSeq: 30 })
  await store.save({ voterSetId: 'cluster-1', voters: ['a', 'b'] })
  t.match(store.current(), { highestEpoch: 812, appliedSeq: 30 }, 'same voter set: the position stays')
  await store.save({ voterSetId: 'cluster-2', voters: [] })
  t.match(store.current(), { voterSetId: 'cluster-2', highestEpoch: 0, epochLeader: null, appliedSeq: 0 }, 'another etcd cluster: revisions start over')
  t.match(onDisk(dir), { voterSetId: 'cluster-2', highestEpoch: 0 })
})

t.test('switching backends forgets the voter set and the epoch, never the Raft term', async t => {
  const dir = stateDir(t)
  const embedded = await openElectionStore(dir, 'embedded')
  await embedded.save({ term: 57, votedFor: 'a', voters: ['a', 'b', 'c'], voterSetId: 'raft-set', highestEpoch: 57, epochLeader: 'a', appliedSeq: 12 })
  const etcd = await openElectionStore(dir, 'etcd')
  t.equal(etcd.switchedFrom, 'embedded')
  t.match(etcd.current(), { term: 57, votedFor: 'a', voters: [], voterSetId: '', highestEpoch: 0, epochLeader: null, appliedSeq: 0, backend: 'etcd' })
  t.match(onDisk(dir), { backend: 'etcd', highestEpoch: 0, term: 57 }, 'the switch is persisted at once')
  const etcdAgain = await openElectionStore(dir, 'etcd')
  t.equal(etcdAgain.switchedFrom, null, 'reopening with the same backend is not a switch')
})
