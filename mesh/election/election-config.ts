/**
 * The `election` config section: leader election and fenced decisions
 * (mesh/election/). Cross-field rules (lease < election timeout, etcd
 * endpoints given, …) are checked by validateElectionConfig when the config is
 * loaded (agentd exits 78 on a violation) and again when the subsystem starts.
 */
import { Type, type Static } from '@sinclair/typebox'
import { AgentError } from '../../core/errors.ts'
import { validateEtcdEndpoints } from './etcd-client.ts'

export const ElectionSection = Type.Object({
  backend: Type.Union([Type.Literal('embedded'), Type.Literal('etcd')], {
    description: 'How the leader is elected: "embedded" runs the election part of Raft among the servers over the mesh; "etcd" campaigns through an etcd cluster (election.etcdEndpoints) with a lease, epoch = the leader key\'s create revision. Default: "embedded".',
  }),
  server: Type.Boolean({
    description: 'This agent may vote and lead (Consul-style server; flag --server). Clients never vote and follow the leader\'s decisions. Default: false; --dev: true.',
  }),
  bootstrapExpect: Type.Integer({
    minimum: 0,
    maximum: 15,
    description: 'A server with no voter set yet waits until it sees this many servers (itself included) and makes them the voter set, persisted (flag --bootstrap-expect). Start exactly this many servers with it. 0: never bootstrap, adopt the voter set a peer advertises. Default: 0; --dev: 1 (leads itself at once).',
  }),
  heartbeatIntervalMs: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    description: 'The leader sends a heartbeat to every voter this often; each round a majority acknowledges renews the lease, in milliseconds. At most leaseMs / 2. Default: 100.',
  }),
  electionTimeoutMinMs: Type.Integer({
    minimum: 50,
    maximum: 600_000,
    description: 'Lower bound of the randomized election timeout: a voter that heard no leader for this long runs PreVote; a voter that heard one within it refuses (pre)votes, in milliseconds. Default: 1000.',
  }),
  electionTimeoutMaxMs: Type.Integer({
    minimum: 50,
    maximum: 600_000,
    description: 'Upper bound of the randomized election timeout, in milliseconds. Default: 1500.',
  }),
  leaseMs: Type.Integer({
    minimum: 20,
    maximum: 600_000,
    description: 'Leader lease from the send time of a heartbeat round a majority acknowledged; the leader acts only within it and steps down when it lapses (CheckQuorum), in milliseconds. Must be < electionTimeoutMinMs: the margin covers clock-rate differences. Default: 800.',
  }),
  rpcTimeoutMs: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    description: 'Timeout of one PreVote, vote or heartbeat request, in milliseconds. Default: 300.',
  }),
  viewGraceMs: Type.Integer({
    minimum: 0,
    maximum: 600_000,
    description: 'A new leader waits this long after its lease allows it to act before deciding anything, to rebuild its view of the cluster from gossip, in milliseconds. Default: 500.',
  }),
  republishIntervalMs: Type.Integer({
    minimum: 100,
    maximum: 600_000,
    description: 'The acting leader re-publishes its epoch\'s recent decisions and the full desired state this often, in milliseconds. Default: 2000.',
  }),
  etcdEndpoints: Type.Array(Type.String({ minLength: 1, maxLength: 512 }), {
    maxItems: 16,
    description: 'etcd backend: client URLs of the etcd cluster (http:// or https://, e.g. ["http://10.0.0.1:2379"]); required when backend is "etcd". Default: [].',
  }),
  etcdPrefix: Type.String({
    minLength: 2,
    maxLength: 256,
    pattern: '^/.*/$',
    description: 'etcd backend: key prefix under which the servers campaign (one key per server, attached to its lease); agents sharing a prefix and an etcd cluster form one election. Starts and ends with "/". Default: "/agentd/election/".',
  }),
  etcdLeaseTtlS: Type.Integer({
    minimum: 1,
    maximum: 3600,
    description: 'etcd backend: TTL of a server\'s campaign lease, in seconds (etcd raises it to its minimum, 2 s with etcd\'s default timing). A dead leader is replaced about this long after its last keep-alive; a leader acts only until its last acknowledged keep-alive\'s send time + 90% of the TTL. Default: 2.',
  }),
  etcdRequestTimeoutMs: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    description: 'etcd backend: timeout of one request to one etcd endpoint, in milliseconds; must be below a third of the lease TTL (the keep-alive period). Default: 500.',
  }),
  etcdPollIntervalMs: Type.Integer({
    minimum: 10,
    maximum: 60_000,
    description: 'etcd backend: how often every agent reads the campaign keys to learn the leader and its epoch, in milliseconds. Default: 100.',
  }),
}, { additionalProperties: false })

export type ElectionConfig = Static<typeof ElectionSection>

export const defaultElectionConfig: ElectionConfig = {
  backend: 'embedded',
  server: false,
  bootstrapExpect: 0,
  heartbeatIntervalMs: 100,
  electionTimeoutMinMs: 1000,
  electionTimeoutMaxMs: 1500,
  leaseMs: 800,
  rpcTimeoutMs: 300,
  viewGraceMs: 500,
  republishIntervalMs: 2000,
  etcdEndpoints: [],
  etcdPrefix: '/agentd/election/',
  etcdLeaseTtlS: 2,
  etcdRequestTimeoutMs: 500,
  etcdPollIntervalMs: 100,
}

export const devElectionConfig: ElectionConfig = { ...defaultElectionConfig, server: true, bootstrapExpect: 1 }

/** The cross-field rules of the section; throws one AgentError(ERR_CONFIG_INVALID) listing every problem. */
export function validateElectionConfig (c: ElectionConfig): void {
  const problems: string[] = []
  if (c.electionTimeoutMaxMs < c.electionTimeoutMinMs) problems.push('election.electionTimeoutMaxMs must be >= election.electionTimeoutMinMs')
  if (c.leaseMs >= c.electionTimeoutMinMs) problems.push('election.leaseMs must be < election.electionTimeoutMinMs (a lease must end before any voter may vote again)')
  if (c.heartbeatIntervalMs * 2 > c.leaseMs) problems.push('election.heartbeatIntervalMs must be at most half of election.leaseMs (a lease must survive one lost heartbeat)')
  if (c.rpcTimeoutMs >= c.electionTimeoutMinMs) problems.push('election.rpcTimeoutMs must be < election.electionTimeoutMinMs')
  if (c.backend === 'etcd') {
    problems.push(...validateEtcdEndpoints(c.etcdEndpoints))
    if (c.etcdRequestTimeoutMs * 3 >= c.etcdLeaseTtlS * 1000) problems.push('election.etcdRequestTimeoutMs must be below a third of election.etcdLeaseTtlS (a keep-alive must be answered before the next is due)')
  }
  if (problems.length > 0) throw new AgentError('ERR_CONFIG_INVALID', problems.join('; '), { details: problems })
}
