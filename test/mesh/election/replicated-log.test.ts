// The voter's durable copy of the leader's log: what was written is read back after a restart, a torn
// last line (a kill mid-append) is skipped, damage elsewhere is reported, the file is compacted to its
// last snapshot, and snapshots are adopted only when newer (positions by epoch, then seq).
import t from 'tap'
import { appendFileSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tempDir } from '../../helpers/agent-process.ts'
import { openReplicatedLog, positionBefore } from '../../../mesh/election/replicated-log.ts'

t.test('appends survive a reopen; a torn last line is skipped', async t => {
  const dir = tempDir(t)
  const log = await openReplicatedLog(dir)
  for (let i = 1; i <= 5; i++) await log.append('vs', 2, `k${i}`, i).durable
  await log.close()
  appendFileSync(join(dir, 'replicated-log.jsonl'), '{"voterSetId":"vs","epoch":2,"seq":6,"entr')
  const again = await openReplicatedLog(dir)
  t.same(again.last('vs'), { epoch: 2, seq: 5 }, 'the last complete snapshot')
  t.same(again.snapshot('vs').entries, { k1: 1, k2: 2, k3: 3, k4: 4, k5: 5 })
  t.same(again.last('other'), { epoch: 0, seq: 0 }, 'another voter set starts empty')
  await again.close()
})

t.test('close waits for the write in flight, releases the file, and fails later writes', async t => {
  const dir = tempDir(t)
  const log = await openReplicatedLog(dir)
  const inFlight = log.append('vs', 1, 'a', 1).durable
  await log.close()
  await inFlight
  t.same((await openReplicatedLog(dir)).last('vs'), { epoch: 1, seq: 1 }, 'the write in flight at close is durable')
  await t.rejects(log.append('vs', 1, 'b', 2).durable, { code: 'ERR_ELECTION_STATE' }, 'a write after close')
  await log.close()
  t.pass('a second close is a no-op')
})

t.test('a damaged line before the last is an error, not a silent rollback', async t => {
  const dir = tempDir(t)
  writeFileSync(join(dir, 'replicated-log.jsonl'), 'garbage\n{"voterSetId":"vs","epoch":1,"seq":1,"entries":{}}\n')
  const log = await openReplicatedLog(dir)
  t.same(log.last('vs'), { epoch: 1, seq: 1 }, 'the last line is good: older damage does not matter')
  await log.close()
  writeFileSync(join(dir, 'replicated-log.jsonl'), '{"voterSetId":"vs","epoch":1,"seq":1,"entries":{}}\n{bad}\n{"voterSetId":"vs","epoch":1,"seq":2,"entr')
  await t.rejects(openReplicatedLog(dir), { code: 'ERR_ELECTION_STATE' }, 'two unreadable lines at the end: reported')
})

t.test('the file is compacted to its last snapshot', async t => {
  const dir = tempDir(t)
  const log = await openReplicatedLog(dir)
  const big = 'x'.repeat(64 * 1024)
  for (let i = 1; i <= 40; i++) await log.append('vs', 1, 'blob', `${big}${i}`).durable
  const file = join(dir, 'replicated-log.jsonl')
  t.ok(statSync(file).size < 1024 * 1024 + 70 * 1024, `bounded (${statSync(file).size} bytes for 40 snapshots of 64 KiB)`)
  await log.close()
  t.same((await openReplicatedLog(dir)).last('vs'), { epoch: 1, seq: 40 })
  t.ok(readFileSync(file, 'utf8').endsWith(`${big}40"}}\n`), 'the newest snapshot is last')
})

t.test('accept adopts only newer snapshots: a higher epoch wins over a longer log', async t => {
  const log = await openReplicatedLog(tempDir(t))
  await log.append('vs', 3, 'a', 1).durable
  await log.append('vs', 3, 'b', 2).durable
  t.same(await log.accept({ voterSetId: 'vs', epoch: 3, seq: 1, entries: { a: 1 } }), { epoch: 3, seq: 2 }, 'an older snapshot of the same leader changes nothing')
  t.same(await log.accept({ voterSetId: 'vs', epoch: 4, seq: 1, entries: { c: 9 } }), { epoch: 4, seq: 1 }, 'a deposed leader\'s suffix is replaced by the new leader\'s log')
  t.same(log.snapshot('vs').entries, { c: 9 })
  t.ok(positionBefore({ epoch: 3, seq: 9 }, { epoch: 4, seq: 1 }))
  t.notOk(positionBefore({ epoch: 4, seq: 1 }, { epoch: 4, seq: 1 }))
  await log.close()
})
