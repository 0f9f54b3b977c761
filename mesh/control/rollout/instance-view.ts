/**
 * The rollout instances of the cluster as one agent sees them: its own
 * registry's and those its peers advertise in their availability records
 * (the `rollout` section). An instance's cluster-wide id is "<node>/<id>".
 *
 * Contract (pure):
 * - Members that are dead (or have not published a record yet) contribute
 *   nothing: their instances left the view. Suspect members still do (a
 *   suspicion may be refuted; a dead engine shows in its stream first).
 * - `terminating` instances are listed with the flag (their node received a
 *   termination notice); `usable` leaves them out, and keeps only `model`'s
 *   when a model is given, and only those on the step's weights when a
 *   weight version is given.
 */
import type { RolloutInstanceAdvert } from '../../membership/mesh-messages.ts'

/** What the view reads of a member (PeerView satisfies it). */
export interface MemberRollout {
  node: string
  state: 'alive' | 'suspect' | 'dead'
  record: { rollout?: RolloutInstanceAdvert[] } | null
}

export interface ViewedInstance {
  /** "<node>/<id>": unique in the cluster (node names are). */
  id: string
  node: string
  url: string
  model: string
  /** The weight version it runs, when registered with one. */
  weightVersion?: number
  /** An engine of the training cluster (seeding window only). */
  reserved: boolean
  terminating: boolean
}

export function instancesInView (self: { node: string, instances: readonly RolloutInstanceAdvert[] }, members: readonly MemberRollout[]): ViewedInstance[] {
  const of = (node: string, list: readonly RolloutInstanceAdvert[]): ViewedInstance[] =>
    list.map(i => ({ id: `${node}/${i.id}`, node, url: i.url, model: i.model, ...(i.weightVersion !== undefined ? { weightVersion: i.weightVersion } : {}), reserved: i.reserved === true, terminating: i.terminating === true }))
  return [
    ...of(self.node, self.instances),
    ...members.filter(m => m.state !== 'dead' && m.node !== '' && m.record !== null).flatMap(m => of(m.node, m.record?.rollout ?? [])),
  ].sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
}

/**
 * The instances a step may send requests to: not terminating, serving `model` when one is named, and
 * running weight version `minWeightVersion` or later when one is named (an instance registered without
 * a version is then left out: it cannot say it has the step's weights).
 */
export function usable (instances: readonly ViewedInstance[], model: string | undefined, minWeightVersion?: number): ViewedInstance[] {
  return instances.filter(i => !i.terminating && (model === undefined || i.model === model) &&
    (minWeightVersion === undefined || (i.weightVersion !== undefined && i.weightVersion >= minWeightVersion)))
}
