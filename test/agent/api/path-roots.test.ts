// File paths given through the API are confined to api.pathRoots (agent/api/routes/path-roots.ts): reads
// resolve every symlink first, writes resolve the directory and never write through a link.
// Regression: materialize could create /etc/x.safetensors as root, and publish could read any file.
import t from 'tap'
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { confinedPath } from '../../../agent/api/routes/path-roots.ts'
import { spawnAgent } from '../../helpers/agent-process.ts'

t.test('confinedPath: inside a root passes (resolved), outside, through links or relative is refused', async t => {
  const base = mkdtempSync(join(tmpdir(), 'agentd-roots-'))
  t.teardown(() => rmSync(base, { recursive: true, force: true }))
  const root = join(base, 'root')
  const outside = join(base, 'outside')
  mkdirSync(root); mkdirSync(outside)
  writeFileSync(join(root, 'in.safetensors'), 'x')
  writeFileSync(join(outside, 'secret'), 'x')
  symlinkSync(join(outside, 'secret'), join(root, 'link-out'))
  symlinkSync(outside, join(root, 'dir-out'))
  symlinkSync(join(root, 'in.safetensors'), join(root, 'link-in'))
  const roots = [root]
  t.equal(await confinedPath(join(root, 'in.safetensors'), roots, 'read', 'f'), join(root, 'in.safetensors'))
  t.equal(await confinedPath(join(root, 'link-in'), roots, 'read', 'f'), join(root, 'in.safetensors'), 'a link inside resolves inside')
  await t.rejects(confinedPath(join(outside, 'secret'), roots, 'read', 'f'), { code: 'ERR_PATH_FORBIDDEN' })
  await t.rejects(confinedPath(join(root, 'link-out'), roots, 'read', 'f'), { code: 'ERR_PATH_FORBIDDEN' }, 'a link leading out')
  await t.rejects(confinedPath(join(root, '..', 'outside', 'secret'), roots, 'read', 'f'), { code: 'ERR_PATH_FORBIDDEN' }, '..')
  await t.rejects(confinedPath('/etc/hostname', roots, 'read', 'f'), { code: 'ERR_PATH_FORBIDDEN' })
  await t.rejects(confinedPath('rel.safetensors', roots, 'read', 'f'), { code: 'ERR_BAD_REQUEST' })
  await t.rejects(confinedPath(join(root, 'missing'), roots, 'read', 'f'), { code: 'ERR_NOT_FOUND' })
  t.equal(await confinedPath(join(root, 'new.safetensors'), roots, 'write', 'f'), join(root, 'new.safetensors'))
  await t.rejects(confinedPath(join(root, 'dir-out', 'x.safetensors'), roots, 'write', 'f'), { code: 'ERR_PATH_FORBIDDEN' }, 'writing through a linked directory')
  await t.rejects(confinedPath(join(root, 'link-in'), roots, 'write', 'f'), { code: 'ERR_PATH_FORBIDDEN', message: /symbolic link/ }, 'writing onto a link')
  await t.rejects(confinedPath('/etc/x.safetensors', roots, 'write', 'f'), { code: 'ERR_PATH_FORBIDDEN' })
  await t.rejects(confinedPath(join(root, 'x.safetensors'), [], 'write', 'f'), { code: 'ERR_PATH_FORBIDDEN', message: /none/ }, 'no roots: nothing')
})

t.test('a real agent: materialize into /etc and publish from /etc are 403 ERR_PATH_FORBIDDEN, nothing written', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  // Production defaults for the roots: only <stateDir>/files.
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `api.pathRoots=${JSON.stringify([join(dir, 'files')])}`] })
  const target = `/etc/agentd-test-${process.pid}.safetensors`
  await t.rejects(agent.client.call('POST', '/v1/state/materialize', { prefix: 'x/', version: 0, path: target }), { code: 'ERR_PATH_FORBIDDEN' })
  t.notOk(existsSync(target), 'no file created')
  await t.rejects(agent.client.call('POST', '/v1/weights/publish', { model: 'm', source: { kind: 'safetensors', path: '/etc/hostname' } }), { code: 'ERR_PATH_FORBIDDEN' })
  t.ok(existsSync(join(dir, 'files')), 'the agent made its files/ directory, the default root')
})
