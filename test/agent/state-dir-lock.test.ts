// One agent per state directory: real agent processes on one directory.
import t from 'tap'
import { lstatSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import pino from 'pino'
import { spawnAgent, tempDir } from '../helpers/agent-process.ts'
import { lockStateDir } from '../../agent/state-dir-lock.ts'

t.setTimeout(300_000)

/**
 * Every entry under `dir`: bytes (regular files) and mtime in ns. An entry that goes while it is read
 * (a durable write's temporary file, renamed into place) is left out: the snapshot is taken again
 * until it is stable.
 */
function snapshot (dir: string): Map<string, { mtimeNs: bigint, bytes: string }> {
  const out = new Map<string, { mtimeNs: bigint, bytes: string }>()
  const walk = (at: string): void => {
    for (const name of readdirSync(at)) {
      const path = join(at, name)
      try {
        const stat = lstatSync(path, { bigint: true })
        out.set(path, { mtimeNs: stat.mtimeNs, bytes: stat.isFile() ? readFileSync(path).toString('base64') : stat.isDirectory() ? 'dir' : 'other' })
        if (stat.isDirectory()) walk(path)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        out.set(path, { mtimeNs: -1n, bytes: 'gone while read' }) // differs from any stable snapshot
      }
    }
  }
  walk(dir)
  return out
}

/** ms between two pino lines of `output`, by their time field. */
function msBetween (output: string, first: RegExp, second: RegExp): number {
  const time = (re: RegExp): number => Date.parse(JSON.parse(output.split('\n').find(l => re.test(l))!).time)
  return time(second) - time(first)
}

t.test('a second agent on a running agent\'s state directory exits at once, naming both, and changes no file', async t => {
  const stateDir = tempDir(t)
  const first = await spawnAgent(t, { stateDir })
  // Durable state of every kind the issue saw damaged: a weights version, the mesh incarnation, the election term.
  const published = await first.client.call<{ version: number }>('POST', '/v1/weights/regions', { model: 'm', version: 3, tensors: [{ name: 'w', dtype: 'f32', shape: [1024] }] })
  await first.client.weightsPublish({ model: 'm', version: published.version, source: { kind: 'region', region: (published as unknown as { region: string }).region } })
  // The first agent settles (it wins its election and writes the term a moment after it is ready).
  let before = snapshot(stateDir)
  for (let stable = 0; stable < 3;) {
    await new Promise(resolve => setTimeout(resolve, 500))
    const now = snapshot(stateDir)
    stable = isDeepStrictEqual(now, before) ? stable + 1 : 0
    before = now
  }
  t.ok(before.has(join(stateDir, 'weights/m/v3.json')), 'the version file exists')
  t.ok(before.has(join(stateDir, 'mesh.incarnation')) && before.has(join(stateDir, 'election.json')), 'mesh and election state exist')

  const began = performance.now()
  const second = await spawnAgent(t, { stateDir, waitReady: false })
  const exit = await second.exited
  const wallMs = performance.now() - began
  t.equal(exit.code, 1, 'non-zero exit')
  t.match(second.output(), `state directory ${stateDir} is in use by agentd pid ${first.proc.pid}`, 'names the directory and the running agent\'s pid')
  t.match(second.output(), '"code":"ERR_STATE_DIR_LOCKED"')
  const ms = msBetween(second.output(), /"msg":"agentd starting"/, /"msg":"agentd failed to start"/)
  t.ok(ms < 1000, `refused ${ms} ms after start-up began (process wall time ${Math.round(wallMs)} ms, module loading included)`)
  t.same(snapshot(stateDir), before, 'every file and directory: same bytes, same mtime')
  t.same((await first.client.weights()).versions.map(v => v.version), [3], 'the first agent still serves its version')
})

t.test('a lock left by a kill -9ed agent does not block the next start', async t => {
  const stateDir = tempDir(t)
  const killed = await spawnAgent(t, { stateDir })
  const id = (await killed.client.status()).node.id
  killed.proc.kill('SIGKILL')
  await killed.exited
  t.match(readFileSync(join(stateDir, 'agentd.lock'), 'utf8'), `"pid":${killed.proc.pid}`, 'the dead agent\'s record is still in the file')
  const next = await spawnAgent(t, { stateDir })
  t.equal((await next.client.status()).node.id, id, 'the next agent starts on the same state')
  t.match(readFileSync(join(stateDir, 'agentd.lock'), 'utf8'), `"pid":${next.proc.pid}`, 'and records itself')
})

t.test('without the native addon the record is the lock: a live holder refuses, a dead or reused pid does not', async t => {
  const logger = pino({ level: 'silent' })
  const stateDir = tempDir(t)
  const held = await lockStateDir({ stateDir }, { logger, tryLock: null })
  t.match(JSON.parse(readFileSync(held.path, 'utf8')), { pid: process.pid, lock: 'pid' })
  // Another process's live record (this test process's parent stands in for a running agent).
  const parentTicks = readFileSync(`/proc/${process.ppid}/stat`, 'utf8').split(') ')[1]!.split(' ')[19]
  writeFileSync(held.path, JSON.stringify({ pid: process.ppid, startTicks: parentTicks, lock: 'pid' }))
  await t.rejects(lockStateDir({ stateDir, recordWaitMs: 0 }, { logger, tryLock: null }), { code: 'ERR_STATE_DIR_LOCKED', message: new RegExp(`${stateDir} is in use by agentd pid ${process.ppid}`) })
  await t.rejects(lockStateDir({ stateDir, recordWaitMs: 0 }, { logger, tryLock: () => true }), { code: 'ERR_STATE_DIR_LOCKED' }, 'a flock holder also honours a live pid holder')
  writeFileSync(held.path, JSON.stringify({ pid: process.ppid, startTicks: '1', lock: 'pid' }))
  const reused = await lockStateDir({ stateDir }, { logger, tryLock: null })
  t.match(JSON.parse(readFileSync(held.path, 'utf8')), { pid: process.pid }, 'a pid whose start time differs is not the holder')
  await reused.release()
  await held.release()
  t.equal(readFileSync(held.path, 'utf8'), '', 'release clears the record')
})
