/**
 * The `election` config section: leader election and fenced decisions
 * (mesh/election/). Cross-field rules (lease < election timeout, …) are
 * checked by validateElectionConfig when the subsystem starts.
 */
import { Type, type Static } from '@sinclair/typebox'

export const ElectionSection = Type.Object({
  backend: Type.Literal('embedded', {
    description: 'How the leader is elected: "embedded" runs the election part of Raft among the servers over the mesh. Default: "embedded".',
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
  faultInjection: Type.Boolean({
    description: 'Test clusters only: serve /v1/fault/partition (refuse connections with given peers) and /v1/fault/stale-decision (publish a decision in the last epoch this agent led, ignoring its lease). Default: false.',
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
  faultInjection: false,
}

export const devElectionConfig: ElectionConfig = { ...defaultElectionConfig, server: true, bootstrapExpect: 1 }
