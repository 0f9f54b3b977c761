// agentctl sim trace placement / sim placement: local commands, no agent.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, tempDir } from '../../helpers/agent-process.ts'

t.test('generate a trace, replay it, print the issue\'s JSON and a summary', async t => {
  const dir = tempDir(t)
  const args = ['sim', 'trace', 'placement', '--jobs', '12', '--nodes', '4', '--seed', '3']
  const generated = await runNode(agentctlMain, args)
  t.equal(generated.code, 0, generated.stderr)
  const trace = JSON.parse(generated.stdout)
  t.equal(trace.jobs.length, 12)
  t.equal(trace.cluster.nodes, 4)
  t.equal((await runNode(agentctlMain, args)).stdout, generated.stdout, 'same seed, same trace')
  const file = join(dir, 'trace.json')
  writeFileSync(file, generated.stdout)

  const json = await runNode(agentctlMain, ['sim', 'placement', '--trace', file, '--policy', 'spread-backfill', '--json'])
  t.equal(json.code, 0, json.stderr)
  const result = JSON.parse(json.stdout)
  for (const key of ['policy', 'makespanS', 'jobs', 'normalizedQueueDelay', 'gpuBusyFraction', 'contextSwitches']) t.ok(key in result, key)
  t.equal(result.policy, 'spread-backfill')
  t.same(Object.keys(result.jobs[0]), ['id', 'startS', 'endS', 'waitS', 'slowdown', 'maxSlowdown', 'predictedSlowdown', 'placement', 'lostS'])
  t.same(Object.keys(result.normalizedQueueDelay), ['p50', 'p90', 'p99', 'max'])
  t.ok(result.makespanS > 0)

  const human = await runNode(agentctlMain, ['sim', 'placement', '--trace', file, '--policy', 'isolated'])
  t.equal(human.code, 0, human.stderr)
  t.match(human.stdout, /policy isolated, runtime hrrs: 12 jobs on 4 nodes\nmakespan\s+\S+/)
  t.match(human.stdout, /JOB\s+WAIT\s+RUN\s+DELAY\/RUN\s+SLOWDOWN\s+PREDICTED\s+BOUND\n/)
})

t.test('bad usage exits 2; a bad or missing trace exits 1 with a stable code', async t => {
  const dir = tempDir(t)
  const noPolicy = await runNode(agentctlMain, ['sim', 'placement', '--trace', 'x.json'])
  t.equal(noPolicy.code, 2)
  t.match(noPolicy.stderr, /sim placement: --policy is required \(one of isolated, pack, spread, spread-backfill\)/)
  const badPolicy = await runNode(agentctlMain, ['sim', 'placement', '--trace', 'x.json', '--policy', 'packed'])
  t.equal(badPolicy.code, 2)
  const badJobs = await runNode(agentctlMain, ['sim', 'trace', 'placement', '--jobs', 'many', '--nodes', '4', '--seed', '1'])
  t.equal(badJobs.code, 2)
  t.match(badJobs.stderr, /--jobs must be an integer >= 1, got "many"/)
  const missing = await runNode(agentctlMain, ['sim', 'placement', '--trace', join(dir, 'none.json'), '--policy', 'pack', '--json'])
  t.equal(missing.code, 1)
  t.equal(JSON.parse(missing.stdout).error.code, 'ERR_NOT_FOUND')
  const file = join(dir, 'bad.json')
  writeFileSync(file, JSON.stringify({ cluster: { nodes: 2, gpusPerNode: 8 }, jobs: [{ id: 'a', submitS: 0, nodes: 3, periodS: 10, iterations: 1, segments: [{ offsetS: 0, durationS: 5 }], maxSlowdown: 1.2 }] }))
  const bad = await runNode(agentctlMain, ['sim', 'placement', '--trace', file, '--policy', 'pack'])
  t.equal(bad.code, 1)
  t.match(bad.stderr, /ERR_TRACE_INVALID: .*bad\.json is not a valid placement trace:\n\s+jobs\[0\]\.nodes: needs 3 nodes, the cluster has 2/)
})
