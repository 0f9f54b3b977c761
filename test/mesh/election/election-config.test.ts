// The election section: flags (--server, --bootstrap-expect), dev defaults, and the cross-field rules.
import t from 'tap'
import { parseAgentdArgs } from '../../../agent/config/flags.ts'
import { loadConfig } from '../../../agent/config/load.ts'
import { validateElectionConfig } from '../../../mesh/election/election-config.ts'
import { agentMain, runNode, tempDir } from '../../helpers/agent-process.ts'
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

t.test('etcd backend: endpoints required and checked, at load time', async t => {
  t.match(load(['--set', 'election.backend=etcd', '--set', 'election.etcdEndpoints=["http://127.0.0.1:2379"]']), { backend: 'etcd', etcdEndpoints: ['http://127.0.0.1:2379'], etcdLeaseTtlS: 2, etcdPrefix: '/agentd/election/' })
  t.throws(() => load(['--set', 'election.backend=etcd']), { code: 'ERR_CONFIG_INVALID', message: /etcdEndpoints must list at least one/ }, 'no endpoints')
  t.throws(() => load(['--set', 'election.backend=etcd', '--set', 'election.etcdEndpoints=["10.0.0.1:2379"]']), { code: 'ERR_CONFIG_INVALID', message: /"10.0.0.1:2379" (is not a URL|must be http)/ }, 'no scheme')
  t.throws(() => load(['--set', 'election.backend=etcd', '--set', 'election.etcdEndpoints=["http://h:2379/v3"]']), { code: 'ERR_CONFIG_INVALID', message: /no path/ }, 'a path')
  t.throws(() => load(['--set', 'election.backend=etcd', '--set', 'election.etcdEndpoints=["http://h:2379"]', '--set', 'election.etcdLeaseTtlS=1', '--set', 'election.etcdRequestTimeoutMs=400']), { code: 'ERR_CONFIG_INVALID', message: /etcdRequestTimeoutMs/ }, 'timeout above a third of the TTL')
  t.throws(() => load(['--set', 'election.backend=zookeeper']), { code: 'ERR_CONFIG_INVALID' }, 'unknown backend')
  t.throws(() => load(['--set', 'election.etcdPrefix=agentd']), { code: 'ERR_CONFIG_INVALID' }, 'a prefix must start and end with /')
  t.doesNotThrow(() => load(['--set', 'election.etcdEndpoints=["not a url"]']), 'endpoints are only checked for the etcd backend')
})

t.test('agentd exits 78 (EX_CONFIG) on an etcd backend without endpoints', async t => {
  const dir = tempDir(t)
  const r = await runNode(agentMain, ['--dev', '--state-dir', dir, '--set', 'election.backend=etcd'])
  t.equal(r.code, 78, 'exit code 78')
  t.match(r.stderr, /election\.etcdEndpoints must list at least one etcd client URL/, 'the message names the key')
})
