import t from 'tap'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadConfig, setFlagAssignment, envName, type ConfigIssue } from '../../../agent/config/load.ts'
import { parseAgentdArgs } from '../../../agent/config/flags.ts'
import { renderConfigReference } from '../../../agent/config/reference.ts'
import { AgentError } from '../../../core/errors.ts'
import { repoRoot, tempDir } from '../../helpers/agent-process.ts'

const base = { hostname: 'node-a', readDefaultFile: false, env: {}, flags: [] }

function issuesOf (fn: () => unknown): ConfigIssue[] {
  try {
    fn()
  } catch (err) {
    if (err instanceof AgentError && err.code === 'ERR_CONFIG_INVALID') return (err.details as ConfigIssue[] | undefined) ?? [{ key: '', origin: '', message: err.message }]
    throw err
  }
  throw new Error('expected ERR_CONFIG_INVALID')
}

t.test('defaults are valid and name the node after the host', async t => {
  const { config, dev, configFile } = loadConfig(base)
  t.equal(config.node.name, 'node-a')
  t.equal(config.api.socketPath, '/run/agentd/agentd.sock')
  t.equal(dev, false)
  t.equal(configFile, null)
})

t.test('--dev puts every path under the state dir', async t => {
  const { config, dev } = loadConfig({ ...base, devStateDir: '/tmp/x' })
  t.equal(dev, true)
  t.equal(config.node.stateDir, '/tmp/x')
  t.equal(config.api.socketPath, '/tmp/x/agentd.sock')
  t.equal(config.api.socketGroup, '', 'dev socket keeps the caller group')
})

t.test('precedence: defaults < file < env < flags', async t => {
  const dir = tempDir(t)
  const file = join(dir, 'agentd.toml')
  writeFileSync(file, '[log]\nlevel = "debug"\n[api]\nbodyLimitBytes = 2048\nsocketMode = "0600"\n[node]\nname = "from-file"\n')
  const { config, origins } = loadConfig({
    ...base,
    configFile: file,
    env: { AGENTD_API_BODY_LIMIT_BYTES: '4096', AGENTD_NODE_NAME: 'from-env' },
    flags: [{ path: ['node', 'name'], value: 'from-flag', origin: 'flag --node-name' }],
  })
  t.equal(config.log.level, 'debug', 'file beats defaults')
  t.equal(config.api.socketMode, '0600', 'file beats defaults')
  t.equal(config.api.bodyLimitBytes, 4096, 'env beats file')
  t.equal(config.node.name, 'from-flag', 'flag beats env')
  t.equal(origins.get('api.bodyLimitBytes'), 'env AGENTD_API_BODY_LIMIT_BYTES')
  t.equal(origins.get('log.level'), `file ${file}`)
})

t.test('unknown keys are rejected with a hint, wherever they come from', async t => {
  const dir = tempDir(t)
  const file = join(dir, 'agentd.toml')
  writeFileSync(file, '[api]\nsocketpath = "/x.sock"\n[telemetry]\nx = 1\n')
  const issues = issuesOf(() => loadConfig({ ...base, configFile: file }))
  t.match(issues, [
    { key: 'api.socketpath', message: /unknown key; did you mean api\.socketPath\?/, origin: `file ${file}` },
    { key: 'telemetry', message: /unknown key/ },
  ])
  const envIssues = issuesOf(() => loadConfig({ ...base, env: { AGENTD_LOG_LEVLE: 'info' } }))
  t.match(envIssues, [{ key: 'AGENTD_LOG_LEVLE', message: /did you mean AGENTD_LOG_LEVEL\?/ }])
  t.throws(() => setFlagAssignment('api.bodyLimit=5'), /did you mean api\.bodyLimitBytes/)
  t.throws(() => parseAgentdArgs(['--stat-dir', '/x'], {}), /unknown flag --stat-dir; did you mean --state-dir\?/)
})

t.test('bad values name the key, the origin and what is expected', async t => {
  const issues = issuesOf(() => loadConfig({
    ...base,
    env: { AGENTD_API_BODY_LIMIT_BYTES: 'lots', AGENTD_LOG_LEVEL: 'loud' },
    flags: [setFlagAssignment('api.socketMode=999')],
  }))
  t.match(issues, [
    { key: 'api.bodyLimitBytes', origin: 'env AGENTD_API_BODY_LIMIT_BYTES', message: 'expected an integer from 1024 to 67108864, got "lots"' },
    { key: 'api.socketMode', origin: 'flag --set api.socketMode', message: /expected a string matching/ },
    { key: 'log.level', origin: 'env AGENTD_LOG_LEVEL', message: /expected one of "fatal", .*got "loud"/ },
  ])
  const range = issuesOf(() => loadConfig({ ...base, flags: [setFlagAssignment('api.bodyLimitBytes=12')] }))
  t.match(range, [{ key: 'api.bodyLimitBytes', message: 'expected an integer from 1024 to 67108864, got 12' }])
  const gpus = issuesOf(() => loadConfig({ ...base, flags: [setFlagAssignment('inventory.gpus=[{"model":"H100"}]')] }))
  t.ok(gpus.some(i => i.key.startsWith('inventory.gpus.0')), 'nested array entries are checked')
})

t.test('config file errors: invalid TOML, missing explicit file, wrong table type', async t => {
  const dir = tempDir(t)
  const bad = join(dir, 'bad.toml')
  writeFileSync(bad, '[api\nsocketPath = 1')
  t.throws(() => loadConfig({ ...base, configFile: bad }), { code: 'ERR_CONFIG_INVALID', message: /not valid TOML/ })
  t.throws(() => loadConfig({ ...base, configFile: join(dir, 'missing.toml') }), { code: 'ERR_CONFIG_INVALID', message: /cannot read config file/ })
  const table = join(dir, 'table.toml')
  writeFileSync(table, 'api = 3\n')
  t.match(issuesOf(() => loadConfig({ ...base, configFile: table })), [{ key: 'api', message: /expected a table/ }])
  t.doesNotThrow(() => loadConfig({ ...base, readDefaultFile: true, configFile: undefined }), 'a missing default file is fine')
})

t.test('GPU override from the file replaces detection', async t => {
  const dir = tempDir(t)
  const file = join(dir, 'gpu.toml')
  writeFileSync(file, '[inventory]\ngpus = [ { model = "H100", memoryBytes = 85520809984, uuid = "GPU-1", pciBus = "00000000:17:00.0" } ]\n')
  const { config } = loadConfig({ ...base, configFile: file })
  t.same(config.inventory.gpus, [{ model: 'H100', memoryBytes: 85520809984, uuid: 'GPU-1', pciBus: '00000000:17:00.0' }])
})

t.test('the example config shipped in systemd/ is valid and matches the defaults', async t => {
  const { config } = loadConfig({ ...base, configFile: join(repoRoot, 'systemd/agentd.toml') })
  const defaults = loadConfig(base).config
  t.same(config, defaults)
})

t.test('flags: --dev needs --state-dir; shorthands map to keys', async t => {
  t.throws(() => parseAgentdArgs(['--dev'], {}), /--dev needs --state-dir/)
  const args = parseAgentdArgs(['--dev', '--state-dir', '/s', '--log-level', 'debug', '--set', 'shutdown.graceMs=500'], { AGENTD_CONFIG: '/c.toml' })
  t.equal(args.devStateDir, '/s')
  t.equal(args.configFile, '/c.toml')
  t.same(args.assignments.map(a => [a.path.join('.'), a.value]), [['node.stateDir', '/s'], ['log.level', 'debug'], ['shutdown.graceMs', 500]])
  t.throws(() => parseAgentdArgs(['--set', 'nonsense'], {}), /--set expects key=value/)
  t.equal(envName(['api', 'bodyLimitBytes']), 'AGENTD_API_BODY_LIMIT_BYTES')
})

t.test('the README config reference is the one generated from the schema', async t => {
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8')
  const block = /<!-- config-reference:start -->\n([\s\S]*?)\n<!-- config-reference:end -->/.exec(readme)
  t.ok(block, 'README has the config-reference block')
  t.equal(block?.[1], renderConfigReference(), 'README block is current (regenerate with: npx agentd --config-reference)')
})

t.test('no configuration makes an agent refuse its peers: election.faultInjection is an unknown key, in dev too', async t => {
  const dev = { ...base, devStateDir: '/tmp/x' }
  const dir = tempDir(t)
  const file = join(dir, 'agentd.toml')
  writeFileSync(file, '[election]\nfaultInjection = true\n')
  t.match(issuesOf(() => loadConfig({ ...dev, configFile: file })), [{ key: 'election.faultInjection', message: /unknown key/, origin: `file ${file}` }], 'in a config file')
  t.match(issuesOf(() => loadConfig({ ...dev, flags: [setFlagAssignment('election.faultInjection=true')] })), [{ key: 'election.faultInjection', message: /unknown key/ }], 'as a --set flag')
  t.match(issuesOf(() => loadConfig({ ...dev, env: { AGENTD_ELECTION_FAULT_INJECTION: 'true' } })), [{ key: 'AGENTD_ELECTION_FAULT_INJECTION', message: 'unknown variable' }], 'in the environment')
})

t.test('the shutdown grace outlasts the reward workers\' stop grace (issue 27, item 8)', async t => {
  for (const devStateDir of [undefined, '/tmp/x']) {
    const { config } = loadConfig({ ...base, ...(devStateDir !== undefined ? { devStateDir } : {}) })
    t.ok(config.shutdown.graceMs >= config.reward.workerStopGraceMs + 2000, `${devStateDir !== undefined ? 'dev' : 'default'}: ${config.shutdown.graceMs} ms against ${config.reward.workerStopGraceMs} ms`)
  }
  const [issue] = issuesOf(() => loadConfig({ ...base, flags: [setFlagAssignment('reward.workerStopGraceMs=30000')] }))
  t.match(issue, { key: 'shutdown.graceMs', origin: 'default', message: /10000 ms is too short: .*reward\.workerStopGraceMs \(30000 ms, flag --set reward\.workerStopGraceMs\).* at least 32000 ms/ })
  t.doesNotThrow(() => loadConfig({ ...base, flags: [setFlagAssignment('reward.workerStopGraceMs=30000'), setFlagAssignment('shutdown.graceMs=32000')] }))
})
