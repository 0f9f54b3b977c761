// The election section: flags (--server, --bootstrap-expect), dev defaults, and the cross-field rules.
import t from 'tap'
import { parseAgentdArgs } from '../../../agent/config/flags.ts'
import { loadConfig } from '../../../agent/config/load.ts'
import { validateElectionConfig } from '../../../mesh/election/leader-service.ts'
import { defaultElectionConfig } from '../../../mesh/election/election-config.ts'

const load = (argv: string[]) => {
  const args = parseAgentdArgs(argv, {})
  return loadConfig({ hostname: 'h', readDefaultFile: false, env: {}, flags: args.assignments, ...(args.devStateDir !== undefined ? { devStateDir: args.devStateDir } : {}) }).config.election
}

t.test('defaults: a client that never bootstraps; --dev: a server that leads itself', async t => {
  t.match(load([]), { backend: 'embedded', server: false, bootstrapExpect: 0 })
  t.match(load(['--dev', '--state-dir', '/tmp/x']), { server: true, bootstrapExpect: 1 })
})

t.test('--server and --bootstrap-expect set election.server and election.bootstrapExpect', async t => {
  t.match(load(['--server', '--bootstrap-expect', '3']), { server: true, bootstrapExpect: 3 })
  t.throws(() => load(['--bootstrap-expect', 'three']), { code: 'ERR_CONFIG_INVALID' }, 'not an integer')
  t.throws(() => load(['--bootstrap-expect', '16']), { code: 'ERR_CONFIG_INVALID' }, 'more than 15 voters')
})

t.test('cross-field rules: a lease ends before any voter may vote again', async t => {
  t.doesNotThrow(() => validateElectionConfig(defaultElectionConfig))
  t.throws(() => validateElectionConfig({ ...defaultElectionConfig, leaseMs: 1000 }), { code: 'ERR_CONFIG_INVALID', message: /leaseMs must be < election.electionTimeoutMinMs/ })
  t.throws(() => validateElectionConfig({ ...defaultElectionConfig, electionTimeoutMaxMs: 900 }), { code: 'ERR_CONFIG_INVALID' })
  t.throws(() => validateElectionConfig({ ...defaultElectionConfig, heartbeatIntervalMs: 500 }), { code: 'ERR_CONFIG_INVALID', message: /heartbeatIntervalMs/ })
})
