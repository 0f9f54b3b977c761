// Durable writes: the order of the file-system calls, traced through an injected fs.
import t from 'tap'
import * as fs from 'node:fs/promises'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { mkdirDurably, writeFileDurably, type DurableFs } from '../../core/durable-file.ts'

function tempDir (t: { teardown: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-durable-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** node:fs/promises that records every call, and every fsync with the path of its handle. */
function tracingFs (): { fs: DurableFs, calls: string[] } {
  const calls: string[] = []
  const traced: DurableFs = {
    open: (async (path: string, flags: string, mode?: number) => {
      calls.push(`open ${path} ${flags}`)
      const handle = await fs.open(path, flags, mode)
      const sync = handle.sync.bind(handle)
      handle.sync = async () => { calls.push(`fsync ${path}`); await sync() }
      return handle
    }) as DurableFs['open'],
    rename: async (from, to) => { calls.push(`rename ${String(from)} ${String(to)}`); await fs.rename(from, to) },
    unlink: async path => { calls.push(`unlink ${String(path)}`); await fs.unlink(path) },
    mkdir: (async (path: string, options: { recursive: boolean, mode: number }) => { calls.push(`mkdir ${path}`); return await fs.mkdir(path, options) }) as DurableFs['mkdir'],
  }
  return { fs: traced, calls }
}

t.test('writeFileDurably: temp file fsynced, renamed, then the directory fsynced', async t => {
  const dir = tempDir(t)
  const file = join(dir, 'node-id')
  const { fs: traced, calls } = tracingFs()
  await writeFileDurably(file, 'abc\n', 0o640, traced)
  const tmp = /^open (\S+) w$/.exec(calls[0] ?? '')?.[1] ?? ''
  t.match(tmp, new RegExp(`^${file}\\.${process.pid}\\.\\d+\\.tmp$`), 'a temporary file beside it')
  t.same(calls, [`open ${tmp} w`, `fsync ${tmp}`, `rename ${tmp} ${file}`, `open ${dir} r`, `fsync ${dir}`])
  t.equal(readFileSync(file, 'utf8'), 'abc\n')
})

t.test('writeFileDurably: concurrent writes of one file each land whole', async t => {
  const file = join(tempDir(t), 'f')
  const contents = Array.from({ length: 16 }, (_, i) => `write ${i} `.repeat(1000))
  await Promise.all(contents.map(c => writeFileDurably(file, c, 0o600)))
  t.ok(contents.includes(readFileSync(file, 'utf8')), 'the file is one of the writes, whole')
})

t.test('mkdirDurably: every directory it creates is fsynced, and the one holding the first', async t => {
  const dir = tempDir(t)
  const { fs: traced, calls } = tracingFs()
  await mkdirDurably(join(dir, 'a/b'), 0o755, traced)
  t.same(calls.filter(c => c.startsWith('fsync')), [`fsync ${dir}/a/b`, `fsync ${dir}/a`, `fsync ${dir}`])
  calls.length = 0
  await mkdirDurably(join(dir, 'a/b'), 0o755, traced)
  t.same(calls, [`mkdir ${dir}/a/b`], 'nothing to sync when nothing was created')
})
