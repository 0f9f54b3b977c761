// The NVMe tier killed with SIGKILL at each step of a group commit, a batch removal, a compaction and
// a segment's removal (real files, O_DIRECT where the disk takes it), then reopened: every acknowledged key is
// there and byte-identical with its owner, every acknowledged removal holds, nothing recovered is
// torn, no file is left that no record names, and a second restart finds the same.
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { readFileSync, readdirSync, truncateSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createNvmeTier, type NvmeCommitPoint, type NvmeTier } from '../../../agent/state/nvme-tier.ts'
import { replayJournal } from '../../../agent/state/nvme-journal.ts'
import { capabilities, createHostPool } from '../../../native/index.ts'
import { diskDir } from '../../native/helpers.ts'
import { crashTierOptions, dataOf, groupKeys, numberOf, ownerOf } from './nvme-tier-crash-child.ts'

interface Killed {
  dir: string
  /** Keys whose put resolved, removals issued, removals that resolved. */
  acked: Set<number>
  removing: Set<number>
  removed: Set<number>
  /** Where the child stood when it was killed. */
  stopped: NvmeCommitPoint
}

/** Runs the workload until its `nth` stop at `point`, SIGKILLs it there, and returns what it acknowledged. */
async function killAt (t: Test, point: NvmeCommitPoint['point'], nth: number): Promise<Killed> {
  const dir = diskDir(t)
  const child = spawn(process.execPath, [fileURLToPath(new URL('./nvme-tier-crash-child.ts', import.meta.url)), dir, point, String(nth)],
    { env: { ...process.env, AGENTD_NVME_CRASH_CHILD: '1' }, stdio: ['ignore', 'pipe', 'inherit'] })
  const killed: Omit<Killed, 'stopped'> & { stopped?: NvmeCommitPoint } = { dir, acked: new Set(), removing: new Set(), removed: new Set() }
  let buffered = ''
  child.stdout.setEncoding('utf8')
  child.stdout.on('data', (chunk: string) => {
    buffered += chunk
    const lines = buffered.split('\n')
    buffered = lines.pop()!
    for (const line of lines) {
      const [what, rest] = [line.slice(0, line.indexOf(' ')), line.slice(line.indexOf(' ') + 1)]
      if (what === 'put') killed.acked.add(Number(rest))
      else if (what === 'rm') killed.removing.add(Number(rest))
      else if (what === 'del') killed.removed.add(Number(rest))
      else if (what === 'at') {
        killed.stopped = JSON.parse(rest) as NvmeCommitPoint
        child.kill('SIGKILL')
      }
    }
  })
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>(resolve => child.once('exit', (c, s) => resolve([c, s])))
  if (signal !== 'SIGKILL' || killed.stopped === undefined) throw new Error(`the child ended with ${code ?? signal} before stopping at ${point} #${nth}`)
  return killed as Killed
}

/** Reads every key of the tier; the numbers of those whose bytes or owner differ from what was put. */
async function wrongKeys (tier: NvmeTier): Promise<number[]> {
  const pool = await createHostPool({ sizeBytes: 2 ** 20, lock: false, hugePages: false, registerCuda: false })
  const wrong: number[] = []
  try {
    for (const obj of [...tier.objects()]) {
      const n = numberOf(obj.key)
      const extent = pool.allocate(obj.bytes)
      await tier.read(obj.key, pool.range(extent, 0, obj.bytes))
      if (!pool.view(extent).subarray(0, obj.bytes).equals(dataOf(n)) || obj.owner !== ownerOf(n)) wrong.push(n)
      pool.free(extent)
    }
  } finally {
    pool.close()
  }
  return wrong
}

/**
 * Reopens the tier the child left and checks it; `lost` are keys a simulated power cut took
 * (their records durable, their bytes not), which must be dropped and must not be acknowledged
 * elsewhere. Returns the numbers of the keys recovered.
 */
async function checkRecovery (t: Test, killed: Killed, lost = new Set<number>()): Promise<Set<number>> {
  const tier = createNvmeTier(crashTierOptions(killed.dir))
  const recovery = await tier.open()
  // Before compaction (armed by open for mostly dead segments) makes new files.
  const named = new Set([...tier.objects()].map(o => o.object))
  const unnamed = readdirSync(join(killed.dir, 'objects')).filter(f => !named.has(f))
  const present = new Set([...tier.objects()].map(o => numberOf(o.key)))
  t.comment(`${killed.acked.size} puts and ${killed.removed.size} removals acknowledged; recovered ${JSON.stringify(recovery)}`)
  const kept = [...killed.acked].filter(n => !killed.removing.has(n) && !lost.has(n))
  t.same(kept.filter(n => !present.has(n)), [], 'every acknowledged key (not being removed) is recovered')
  t.same([...killed.removed].filter(n => present.has(n)), [], 'no acknowledged removal is undone')
  t.same(await wrongKeys(tier), [], 'every key recovered reads back byte-identical, with its owner')
  t.same(unnamed, [], 'no segment file is left that no record names')
  if (lost.size === 0) t.equal(recovery.dropped, 0, 'no record names a missing or short file')
  else t.ok(recovery.dropped > 0 && recovery.dropped <= lost.size, 'only records of the cut keys are dropped')
  await tier.close()

  const again = createNvmeTier(crashTierOptions(killed.dir))
  t.same(await again.open(), { recovered: present.size, dropped: 0, discarded: 0, orphansRemoved: 0, tornLines: 0 }, 'a second restart finds the same, with nothing to repair')
  t.same(new Set([...again.objects()].map(o => numberOf(o.key))), present)
  await again.close()
  return present
}

const keysOf = (stopped: NvmeCommitPoint): number[] => 'keys' in stopped ? stopped.keys.map(numberOf) : []

if (!capabilities.addon.loaded) {
  t.comment(`skipped: the NVMe tier needs the native addon (${capabilities.addon.error})`)
} else {
  t.test('killed after a group\'s bytes are durable and before its records: the group is not there, all before it is', async t => {
    const killed = await killAt(t, 'group-synced', 12)
    const present = await checkRecovery(t, killed)
    t.same(keysOf(killed.stopped).filter(n => present.has(n)), [], 'no key of the group whose records were not written')
  })

  t.test('killed after a group\'s records are durable and before its puts resolve: the group is there, whole', async t => {
    const killed = await killAt(t, 'group-recorded', 12)
    const present = await checkRecovery(t, killed)
    t.same(keysOf(killed.stopped).filter(n => !present.has(n)), [], 'every key of the recorded group, though unacknowledged')
  })

  t.test('records durable, segment torn (a power cut the disk lied about, simulated by cutting the file at the group): its keys dropped, none torn', async t => {
    const killed = await killAt(t, 'group-recorded', 12)
    const stopped = killed.stopped as Extract<NvmeCommitPoint, { point: 'group-recorded' }>
    truncateSync(join(killed.dir, 'objects', stopped.segment), stopped.start)
    // Keys after the cut in the same segment are lost with it (records or not): dropped, never read torn.
    const lost = new Set(replayJournal(readFileSync(join(killed.dir, 'journal.log'), 'utf8')).records
      .flatMap(r => r.op === 'put' && r.object === stopped.segment && (r.offset ?? 0) >= stopped.start ? [numberOf(r.key)] : []))
    t.ok(keysOf(stopped).every(n => lost.has(n)), 'the cut takes the stopped group')
    const present = await checkRecovery(t, killed, lost)
    t.same([...lost].filter(n => present.has(n)), [], 'the keys whose bytes were cut are dropped')
  })

  t.test('killed during a batch removal, before its del records: every key of the batch is recovered whole', async t => {
    // #1 is group 0's removeAll, #2-#13 group 1's single removals, #14 group 2's removeAll.
    const killed = await killAt(t, 'removal-issued', 14)
    const present = await checkRecovery(t, killed)
    t.equal(keysOf(killed.stopped).length, groupKeys, 'stopped in a batch')
    t.same(keysOf(killed.stopped).filter(n => !present.has(n)), [], 'no key of the batch is gone')
  })

  t.test('killed during a batch removal, once its del records are durable: every key of the batch is gone', async t => {
    // #1 is group 0's removeAll, #2-#13 group 1's single removals, #14 group 2's removeAll.
    const killed = await killAt(t, 'removal-recorded', 14)
    const present = await checkRecovery(t, killed)
    t.equal(keysOf(killed.stopped).length, groupKeys, 'stopped in a batch')
    t.same(keysOf(killed.stopped).filter(n => present.has(n)), [], 'no key of the batch is recovered')
  })

  t.test('killed while a segment is removed (every key of it removed durably, file still there): no record names it, the file goes at restart', async t => {
    await checkRecovery(t, await killAt(t, 'segment-removing', 3))
  })

  t.test('killed after compaction copied a segment\'s live keys, before re-pointing them: the keys are read from the old file, the copy goes', async t => {
    await checkRecovery(t, await killAt(t, 'compaction-copied', 2))
  })

  t.test('killed after compaction re-pointed the keys, before removing the old file: the keys are read from the copy, the old file goes', async t => {
    await checkRecovery(t, await killAt(t, 'compaction-recorded', 2))
  })
}
