// agentctl plan workflow: local command, no agent.
import t from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, tempDir } from '../../helpers/agent-process.ts'
import { mathLongTail } from '../../mesh/policies/workflow/rlinf-cases.ts'

t.test('plans a workflow file: JSON and a readable schedule', async t => {
  const dir = tempDir(t)
  const file = join(dir, 'workflow.json')
  writeFileSync(file, JSON.stringify(mathLongTail))
  const json = await runNode(agentctlMain, ['plan', 'workflow', file, '--json'])
  t.equal(json.code, 0, json.stderr)
  const plan = JSON.parse(json.stdout)
  t.same(Object.keys(plan), ['mode', 'iterationS', 'granularity', 'components', 'plan', 'componentPlacement'])
  t.same(plan.components[0], { name: 'rollout', gpus: [0, 40], mode: 'disaggregated' })
  t.equal(plan.mode, 'hybrid', 'rollout apart, inference and actor sharing their GPUs')
  t.same(plan.componentPlacement, Object.fromEntries(plan.components.map((c: { name: string, gpus: number[] }) => [c.name, `${c.gpus[0]}-${c.gpus[1]! - 1}`])), 'RLinf\'s placement block, range by range')
  const human = await runNode(agentctlMain, ['plan', 'workflow', file])
  t.equal(human.code, 0, human.stderr)
  t.match(human.stdout, /^mode {8}hybrid\niteration .* pipeline granularity 64\n\nCOMPONENT\s+GPUS\s+MODE\nrollout\s+0-39\s+disaggregated\n/)
  t.match(human.stdout, /as RLinf's cluster.component_placement:\ncluster:\n {2}component_placement:\n {4}rollout: 0-39\n {4}inference: 40-63\n {4}actor: 40-63\n/)
  t.match(human.stdout, /spatial, pipelined by 64/)
})

t.test('missing file argument exits 2; an invalid workflow exits 1 with ERR_WORKFLOW_INVALID', async t => {
  const dir = tempDir(t)
  const none = await runNode(agentctlMain, ['plan', 'workflow'])
  t.equal(none.code, 2)
  t.match(none.stderr, /the workflow file F is required/)
  const file = join(dir, 'bad.json')
  writeFileSync(file, JSON.stringify({ ...mathLongTail, edges: [{ from: 'rollout', to: 'reward' }] }))
  const bad = await runNode(agentctlMain, ['plan', 'workflow', file, '--json'])
  t.equal(bad.code, 1)
  const body = JSON.parse(bad.stdout)
  t.equal(body.error.code, 'ERR_WORKFLOW_INVALID')
  t.match(body.error.message, /edges\[0\]\.to: unknown component "reward"/)
})
