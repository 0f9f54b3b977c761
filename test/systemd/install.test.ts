// systemd/install.sh into a temporary root, then `systemd-analyze verify` on the unit as installed.
import t from 'tap'
import { execFile } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync, chmodSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { builtAgentMain, repoRoot, tempDir } from '../helpers/agent-process.ts'
import { agentEnvironment, agentNodeFlags } from '../../agent/node-flags.ts'

const run = promisify(execFile)
const installScript = join(repoRoot, 'systemd/install.sh')
const built = existsSync(builtAgentMain)

async function install (args: string[], destdir: string): Promise<{ code: number, stdout: string, stderr: string }> {
  try {
    const { stdout, stderr } = await run('sh', [installScript, ...args], { env: { ...process.env, DESTDIR: destdir } })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code: number, stdout: string, stderr: string }
    return { code: e.code, stdout: e.stdout, stderr: e.stderr }
  }
}

async function hasSystemdAnalyze (): Promise<boolean> {
  try { await run('systemd-analyze', ['--version']); return true } catch { return false }
}

// One full install (it copies the whole tree) serves the first test and the systemd-analyze one.
const installedRoot = tempDir(t)

t.test('install into DESTDIR: tree, wrappers, unit, config, sysusers', { skip: built ? false : 'needs a build: run npm run build first' }, async t => {
  const root = installedRoot
  const res = await install(['--prefix', '/opt/agentd'], root)
  t.equal(res.code, 0, res.stderr)
  const prefix = join(root, 'opt/agentd')
  for (const path of ['dist/bundle/agentd.js', 'dist/bundle/agentctl.js', 'node_modules/.bin/node', 'package.json']) {
    t.ok(existsSync(join(prefix, path)), `${path} installed`)
  }
  for (const dev of ['typescript', 'tap', '@biomejs', 'node-gyp']) t.notOk(existsSync(join(prefix, 'node_modules', dev)), `build-time package ${dev} not installed`)
  const links = readdirSync(join(prefix, 'node_modules/.bin'))
  t.ok(links.includes('node'), 'node_modules/.bin/node installed')
  t.same(links.filter(l => !existsSync(join(prefix, 'node_modules/.bin', l))), [], 'no command link points nowhere')
  const wrapper = readFileSync(join(prefix, 'bin/agentd'), 'utf8')
  for (const [name, value] of Object.entries(agentEnvironment)) {
    t.match(wrapper, `: "\${${name}:=${value}}"\nexport ${name}\n`, `sets ${name}=${value} unless the environment has it (agent/node-flags.ts)`)
  }
  t.match(wrapper, `exec /opt/agentd/node_modules/.bin/node ${agentNodeFlags.join(' ')} /opt/agentd/dist/bundle/agentd.js "$@"`, 'runs the bundled Node.js with the agent\'s flags (agent/node-flags.ts) on the agent\'s bundle')
  t.match(readFileSync(join(prefix, 'bin/agentctl'), 'utf8'), 'exec /opt/agentd/node_modules/.bin/node /opt/agentd/dist/bundle/agentctl.js "$@"')
  t.equal(statSync(join(prefix, 'bin/agentctl')).mode & 0o111, 0o111, 'wrappers are executable')
  const unit = readFileSync(join(root, 'etc/systemd/system/agentd.service'), 'utf8')
  t.match(unit, /^ExecStart=\/opt\/agentd\/bin\/agentd --config \/etc\/agentd\/agentd\.toml$/m)
  t.match(unit, /^Type=notify$/m)
  t.match(unit, /^LimitMEMLOCK=infinity$/m)
  t.equal(readFileSync(join(root, 'etc/agentd/agentd.toml'), 'utf8'), readFileSync(join(repoRoot, 'systemd/agentd.toml'), 'utf8'))
  t.match(readFileSync(join(root, 'usr/lib/sysusers.d/agentd.conf'), 'utf8'), /^u agentd /m)
  t.match(readFileSync(join(root, 'usr/local/share/bash-completion/completions/agentctl'), 'utf8'), /complete -F \S+ agentctl/, 'bash completion installed')

  // The bundles run from the installed tree, with development packages pruned.
  const node = join(prefix, 'node_modules/.bin/node')
  const { stdout } = await run(node, [join(prefix, 'dist/bundle/agentd.js'), '--version'])
  t.match(stdout, /^agentd \d/, 'the installed agent runs')
  const help = await run(node, [join(prefix, 'dist/bundle/agentctl.js'), '--help'])
  t.match(help.stdout, /^usage: agentctl /, 'the installed agentctl runs')
  for (const bundle of ['agentd.js', 'agentctl.js']) {
    const nonAscii = /[\x80-\uffff]/.exec(readFileSync(join(prefix, 'dist/bundle', bundle), 'latin1'))
    t.equal(nonAscii?.index, undefined, `${bundle} is pure ASCII (V8 would hold a two-byte copy of its source otherwise; cli/bundle.ts)`)
  }
})

t.test('an existing config is kept; a custom prefix is written into the unit', { skip: built ? false : 'needs a build' }, async t => {
  const root = tempDir(t)
  mkdirSync(join(root, 'etc/agentd'), { recursive: true })
  writeFileSync(join(root, 'etc/agentd/agentd.toml'), '[log]\nlevel = "debug"\n')
  const res = await install(['--prefix=/usr/lib/agentd'], root)
  t.equal(res.code, 0, res.stderr)
  t.match(res.stdout, /keeping existing/)
  t.equal(readFileSync(join(root, 'etc/agentd/agentd.toml'), 'utf8'), '[log]\nlevel = "debug"\n', 'operator config untouched')
  t.match(readFileSync(join(root, 'etc/systemd/system/agentd.service'), 'utf8'), /^ExecStart=\/usr\/lib\/agentd\/bin\/agentd /m)
})

t.test('--dry-run changes nothing; bad arguments are refused', { skip: built ? false : 'needs a build' }, async t => {
  const root = tempDir(t)
  const res = await install(['--dry-run'], root)
  t.equal(res.code, 0, res.stderr)
  t.match(res.stdout, /would write: .*agentd\.service/)
  t.same(readdirSync(root), [], 'nothing written')
  t.equal((await install(['--prefix', 'relative/path'], root)).code, 2)
  t.equal((await install(['--frobnicate'], root)).code, 2)
})

const verifySkip = !built ? 'needs a build: run npm run build first' : !await hasSystemdAnalyze() ? 'systemd-analyze not installed (apt-get install systemd)' : false

t.test('systemd-analyze verify accepts the installed unit and catches a broken one', { skip: verifySkip }, async t => {
  // The first test's install (default prefix /opt/agentd).
  const root = installedRoot
  t.ok(existsSync(join(root, 'etc/systemd/system/agentd.service')), 'installed by the first test')
  // verify --root resolves the unit's dependencies (sysinit.target, ...) inside the root.
  mkdirSync(join(root, 'usr/lib/systemd'), { recursive: true })
  cpSync('/usr/lib/systemd/system', join(root, 'usr/lib/systemd/system'), { recursive: true })
  const unit = join(root, 'etc/systemd/system/agentd.service')
  const verify = async (): Promise<{ code: number, stderr: string }> => {
    try {
      const { stderr } = await run('systemd-analyze', ['verify', `--root=${root}`, unit])
      return { code: 0, stderr }
    } catch (err) {
      return { code: (err as { code: number }).code, stderr: (err as { stderr: string }).stderr }
    }
  }
  const ok = await verify()
  t.equal(ok.code, 0, ok.stderr)
  t.equal(ok.stderr.trim(), '', 'no warnings either')

  writeFileSync(unit, readFileSync(unit, 'utf8').replace('Type=notify', 'Type=notifyy'))
  t.match((await verify()).stderr, /Failed to parse service type/, 'a typo is reported')
  chmodSync(join(root, 'opt/agentd/bin/agentd'), 0o644)
  t.not((await verify()).code, 0, 'a missing executable fails verification')
})
