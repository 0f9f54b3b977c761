// The journal of rollout steps: canonical digests, a corrupt file set aside, pruning by age.
import t from 'tap'
import { existsSync, readdirSync, utimesSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import pino from 'pino'
import { tempDir } from '../../helpers/agent-process.ts'
import { canonicalJson, createStepJournal, stepDigest } from '../../../agent/rollout/step-journal.ts'

const logger = pino({ level: 'silent' })

t.test('digests: the same step in any key order is the same; other requests are not', async t => {
  t.equal(canonicalJson({ b: 1, a: [{ y: 'x', x: null }] }), '{"a":[{"x":null,"y":"x"}],"b":1}')
  const r = { id: 'r0', prompt: 'p', maxTokens: 3, sampling: { temperature: 1, seed: 2 } }
  t.equal(stepDigest({ model: 'm', requests: [r] }), stepDigest({ requests: [{ sampling: { seed: 2, temperature: 1 }, maxTokens: 3, prompt: 'p', id: 'r0' }], model: 'm' }))
  t.not(stepDigest({ model: 'm', requests: [r] }), stepDigest({ model: 'm', requests: [{ ...r, maxTokens: 4 }] }))
  t.not(stepDigest({ model: 'm', requests: [r] }), stepDigest({ model: 'm', weightVersion: 2, requests: [r] }))
})

t.test('written and read back; a corrupt file is set aside and reads as absent', async t => {
  const stateDir = tempDir(t)
  const journal = createStepJournal({ stateDir, keepAnsweredMs: 60_000, abandonAfterMs: 120_000 }, { logger })
  t.equal(await journal.read('s1'), undefined)
  const entry = { stepId: 's1', digest: 'd', progress: { r0: { text: 'ab', tokens: 2 }, r1: { text: 'c', tokens: 1, finish: 'stop', route: ['n/e0'] } } }
  await journal.write(entry)
  t.same(await journal.read('s1'), entry)
  writeFileSync(join(stateDir, 'rollout-steps', 's2.json'), '{"stepId": "s2", "digest": ')
  t.equal(await journal.read('s2'), undefined)
  t.ok(existsSync(join(stateDir, 'rollout-steps', 's2.json.corrupt')), 'set aside for the operator')
  writeFileSync(join(stateDir, 'rollout-steps', 's3.json'), JSON.stringify({ ...entry, stepId: 'other' }))
  t.equal(await journal.read('s3'), undefined, 'a file naming another step is not taken')
})

t.test('prune: answered steps after keepAnsweredMs, unanswered ones after abandonAfterMs', async t => {
  const stateDir = tempDir(t)
  const journal = createStepJournal({ stateDir, keepAnsweredMs: 60_000, abandonAfterMs: 600_000 }, { logger })
  const answer = { responses: [], stepMs: 1, moves: { lost: 0, pending: 0, executing: 0 }, removed: [], generatedTokens: 0, instances: [] }
  await journal.write({ stepId: 'old-answered', digest: 'd', progress: {}, answer })
  await journal.write({ stepId: 'old-running', digest: 'd', progress: {} })
  await journal.write({ stepId: 'new-answered', digest: 'd', progress: {}, answer })
  const twoMinutesAgo = new Date(Date.now() - 120_000)
  for (const name of ['old-answered', 'old-running']) utimesSync(join(stateDir, 'rollout-steps', `${name}.json`), twoMinutesAgo, twoMinutesAgo)
  await journal.prune()
  t.same(readdirSync(join(stateDir, 'rollout-steps')).sort(), ['new-answered.json', 'old-running.json'])
})
