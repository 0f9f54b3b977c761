/**
 * What the election must not forget across a crash, in one small JSON file
 * (<stateDir>/election.json) replaced atomically with fsync (durable-file.ts):
 *
 * - `term` and `votedFor`: Raft's persistent state. A vote is answered only
 *   after the file holding it is on disk, so a voter that crashes and restarts
 *   can never vote twice in one term.
 * - `voters` and `voterSetId`: the voter set fixed at bootstrap (or adopted
 *   from a peer's record); it never changes afterwards.
 * - `highestEpoch`, `epochLeader`, `appliedSeq`, `appliedEpoch`: the highest
 *   decision epoch this agent has seen, its leader, the last log index
 *   applied (decision-log.ts) and the epoch it was applied in; saved
 *   before a decision is applied, so after a restart nothing older is
 *   applied and nothing is applied twice (gossip may deliver a message again).
 * - `backend`: the election backend that wrote the file.
 *
 * Fencing domains. Epochs are only comparable within one voter set (Raft
 * terms of one embedded voter set, create revisions of one etcd cluster and
 * prefix). So the voter set and the fencing position belong to one domain:
 * a `save` that changes `voterSetId` (an etcd election that finds another
 * cluster or prefix) resets the position unless it sets it too, and opening
 * the store for another backend than the one that wrote it forgets the voter
 * set and the position (an operator switched backends; keeping etcd's
 * revision as the highest epoch would reject every embedded leader until its
 * term caught up, and the reverse). `term` and `votedFor` are never reset:
 * they only grow, which is always safe for Raft.
 *
 * Writes are serialized (one at a time, in call order), so the file always
 * holds the state of the latest completed `save`.
 */
import { readFile, mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { writeFileDurably } from '../../core/durable-file.ts'
import { AgentError } from '../../core/errors.ts'

export interface PersistedElection {
  term: number
  votedFor: string | null
  voters: string[]
  voterSetId: string
  highestEpoch: number
  epochLeader: string | null
  appliedSeq: number
  appliedEpoch: number
  backend: ElectionBackend | ''
}

export type ElectionBackend = 'embedded' | 'etcd'

export interface ElectionStore {
  /** The state as last saved (a copy). */
  current(): PersistedElection
  /** Merges `patch` and resolves once the new state is fsynced. */
  save(patch: Partial<PersistedElection>): Promise<void>
}

export const emptyElection: PersistedElection = { term: 0, votedFor: null, voters: [], voterSetId: '', highestEpoch: 0, epochLeader: null, appliedSeq: 0, appliedEpoch: 0, backend: '' }

/** What a new fencing domain starts from: no voters, no position. */
const freshDomain = (): Pick<PersistedElection, 'voters' | 'voterSetId' | 'highestEpoch' | 'epochLeader' | 'appliedSeq' | 'appliedEpoch'> =>
  ({ voters: [], voterSetId: '', highestEpoch: 0, epochLeader: null, appliedSeq: 0, appliedEpoch: 0 })

export interface OpenedElectionStore extends ElectionStore {
  /** Set when the file was written by another backend and its domain was forgotten. */
  readonly switchedFrom: ElectionBackend | null
}

export async function openElectionStore (stateDir: string, backend: ElectionBackend): Promise<OpenedElectionStore> {
  await mkdir(stateDir, { recursive: true })
  const file = join(stateDir, 'election.json')
  let state: PersistedElection = { ...emptyElection }
  try {
    state = parsePersisted(JSON.parse(await readFile(file, 'utf8')))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new AgentError('ERR_ELECTION_STATE', `cannot read ${file}: ${(err as Error).message}`, { cause: err })
    }
  }
  let chain: Promise<void> = Promise.resolve()
  const save = (patch: Partial<PersistedElection>): Promise<void> => {
    const newDomain = patch.voterSetId !== undefined && patch.voterSetId !== state.voterSetId
    state = { ...state, ...(newDomain ? freshDomain() : {}), ...patch }
    const snapshot = JSON.stringify(state)
    chain = chain.catch(() => {}).then(() => writeFileDurably(file, snapshot, 0o600))
    return chain
  }
  const switchedFrom = state.backend !== '' && state.backend !== backend ? state.backend : null
  if (switchedFrom !== null) state = { ...state, ...freshDomain() }
  if (state.backend !== backend) await save({ backend })
  return {
    current: () => ({ ...state, voters: [...state.voters] }),
    save,
    switchedFrom,
  }
}

function parsePersisted (value: unknown): PersistedElection {
  // appliedEpoch 0 for a file of an older version: the next state batch repairs the position (decision-log.ts).
  const v = { epochLeader: null, appliedSeq: 0, appliedEpoch: 0, backend: '', ...(value as object) } as Partial<PersistedElection>
  const ok = typeof v === 'object' && v !== null &&
    Number.isSafeInteger(v.term) && v.term! >= 0 &&
    (v.votedFor === null || typeof v.votedFor === 'string') &&
    Array.isArray(v.voters) && v.voters.every(x => typeof x === 'string') &&
    typeof v.voterSetId === 'string' &&
    Number.isSafeInteger(v.highestEpoch) && v.highestEpoch! >= 0 &&
    (v.epochLeader === null || typeof v.epochLeader === 'string') &&
    Number.isSafeInteger(v.appliedSeq) && v.appliedSeq! >= 0 &&
    Number.isSafeInteger(v.appliedEpoch) && v.appliedEpoch! >= 0 &&
    (v.backend === '' || v.backend === 'embedded' || v.backend === 'etcd')
  if (!ok) throw new Error('not a valid election state')
  return v as PersistedElection
}
