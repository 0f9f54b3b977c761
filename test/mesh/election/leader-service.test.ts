// The leader subsystem from stub components (one voter, no network): it bootstraps itself, acts after
// the grace period, starts the leader-only tasks with a context that decides, publishes fenced
// decisions, and aborts the tasks when it stops.
import t from 'tap'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { createLeaderService, type LeaderContext, type LeaderServiceComponents } from '../../../mesh/election/leader-service.ts'
import { devElectionConfig } from '../../../mesh/election/election-config.ts'
import type { MeshMessage } from '../../../mesh/membership/mesh-messages.ts'

const peerId = '12D3KooWHQQV9T54aV8BFsCQYGb7rMpgN1iTwVqh4HjRFEBbWnam'

t.test('a sole server leads, runs its leader tasks and stops them', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-leader-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const published: MeshMessage[] = []
  const mesh = {
    node: { handle: async () => {}, unhandle: async () => {}, dialProtocol: async () => { throw new Error('no peers') } },
    publish: async (m: MeshMessage) => { published.push(m) },
    setDecisionHandler: () => {},
    peers: () => [],
    subscribe: () => () => {},
    addAvailabilityContributor: () => {},
    availabilityChanged: () => {},
    status: () => ({ peerId, addresses: [] }),
  } as unknown as LeaderServiceComponents['mesh']
  let context: LeaderContext | undefined
  const service = await createLeaderService({ config: { ...devElectionConfig, viewGraceMs: 50 }, stateDir: dir }, {
    logger: pino({ level: 'silent' }),
    mesh,
    leaderTasks: [{ name: 'probe', start: c => { context = c } }],
  })
  const controller = new AbortController()
  await service.start({ signal: controller.signal })
  for (let i = 0; i < 200 && context === undefined; i++) await sleep(10)
  t.ok(context !== undefined, 'the leader task was started')
  t.match(service.view(), { self: 'leader', acting: true, epoch: 1, voters: [peerId], leaderId: peerId })
  t.match(published[0], { kind: 'decisions', epoch: 1, from: peerId, decisions: [{ seq: 1, kind: 'leader' }] }, 'the epoch\'s first decision is "leader"')
  t.same(await context!.decide('placement', { job: 'a' }), { epoch: 1, seq: 2 }, 'the task decides through its context')
  t.same(service.desiredState().placement, { job: 'a' }, 'applied to the desired state')
  t.match(service.decisions().map(e => `${e.epoch}/${e.seq}/${e.outcome}`), ['1/1/applied', '1/2/applied'])
  await service.stop()
  t.ok(context!.signal.aborted, 'stopping aborts the leader task')
  await t.rejects(context!.decide('placement', { job: 'b' }), { code: 'ERR_NOT_LEADER' }, 'a stopped leader decides nothing')
})
