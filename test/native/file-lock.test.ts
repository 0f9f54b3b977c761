import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { tryLockExclusive } from '../../native/index.ts'

function tempFile (t: { teardown: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-lock-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return join(dir, 'x.lock')
}

t.test('one holder per file: a second open file description is refused until the first closes', async t => {
  const file = tempFile(t)
  const first = openSync(file, 'a+')
  const second = openSync(file, 'a+')
  t.equal(tryLockExclusive(first), true, 'first descriptor takes the lock')
  t.equal(tryLockExclusive(first), true, 'asking again on the holder is a yes')
  t.equal(tryLockExclusive(second), false, 'another open of the same file is refused, without waiting')
  closeSync(first)
  t.equal(tryLockExclusive(second), true, 'closing the holder releases it')
  closeSync(second)
})

t.test('a SIGKILLed holder leaves no lock behind', async t => {
  const file = tempFile(t)
  // The child takes the lock, says so, and waits to be killed.
  const child = spawn(process.execPath, ['--input-type=module', '-e', `
    import { openSync } from 'node:fs'
    const { tryLockExclusive } = await import(${JSON.stringify(new URL('../../native/index.ts', import.meta.url).href)})
    process.stdout.write(String(tryLockExclusive(openSync(${JSON.stringify(file)}, 'a+'))))
    setInterval(() => {}, 1000)`], { stdio: ['ignore', 'pipe', 'inherit'] })
  const [said] = await once(child.stdout!, 'data') as [Buffer]
  t.equal(said.toString(), 'true', 'the child holds the lock')
  const fd = openSync(file, 'a+')
  t.teardown(() => closeSync(fd))
  t.equal(tryLockExclusive(fd), false, 'held by the child')
  child.kill('SIGKILL')
  await once(child, 'exit')
  t.equal(tryLockExclusive(fd), true, 'free once the child is gone')
})

t.test('a bad descriptor is a coded error', async t => {
  t.throws(() => tryLockExclusive(-1), { code: 'ERR_ARG_INVALID' })
  t.throws(() => tryLockExclusive(987654), { code: 'ERR_SYSTEM', details: { errno: 'EBADF', syscall: 'flock' } })
})
