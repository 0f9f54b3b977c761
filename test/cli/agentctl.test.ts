// agentctl against a real dev agent: output, --json, exit codes, errors.
import t from 'tap'
import { join } from 'node:path'
import { agentctlMain, runNode, spawnAgent, tempDir } from '../helpers/agent-process.ts'

t.test('status, node and version against a running agent', async t => {
  const agent = await spawnAgent(t)
  const json = await runNode(agentctlMain, ['--socket', agent.socketPath, 'status', '--json'])
  t.equal(json.code, 0, json.stderr)
  const status = JSON.parse(json.stdout)
  t.ok(['identity', 'native', 'inventory', 'state', 'api'].every(id => status.subsystems.some((s: { id: string }) => s.id === id)), 'lists the subsystems')
  t.equal(status.node.id.length, 36)
  t.equal(status.process.pid, agent.proc.pid, 'the process section is the agent\'s')
  t.ok(status.process.rssBytes > status.process.heapUsedBytes && status.process.heapUsedBytes > 0, `rss ${status.process.rssBytes} > V8 heap in use ${status.process.heapUsedBytes} > 0`)
  t.ok(status.process.cpuSeconds > 0, 'start-up took CPU')
  const { ownBytes, fileBytes, sharedMemoryBytes, rssBytes } = status.process
  t.equal(ownBytes + fileBytes + sharedMemoryBytes, rssBytes, 'rss split into own memory, mapped files and mapped shared memory')
  t.ok(ownBytes > status.process.heapUsedBytes, 'the heap is the agent\'s own memory')

  const human = await runNode(agentctlMain, ['status'], { AGENTD_SOCKET: agent.socketPath })
  t.equal(human.code, 0, 'AGENTD_SOCKET selects the socket')
  t.match(human.stdout, /SUBSYSTEM\s+STATE\s+START\s+REASON\nidentity\s+ok/)
  t.match(human.stdout, /^process {2}pid \d+, cpu [\d.]+ s$/m)
  t.match(human.stdout, /^memory {3}own [\d.]+ MiB \(V8 heap [\d.]+ MiB used \(uncollected garbage included\) of [\d.]+ MiB reserved, external [\d.]+ [KM]iB\), mapped files [\d.]+ MiB; shared memory mapped [\d.]+ [KM]?i?B \(clients' objects, weight regions: not own\); rss [\d.]+ MiB in all$/m)

  const node = JSON.parse((await runNode(agentctlMain, ['--socket', agent.socketPath, '--json', 'node'])).stdout)
  t.ok(node.cpu.cores > 0)
  t.ok(node.memory.totalBytes > 0)
  t.ok(Array.isArray(node.network) && node.network.length > 0)
  if (node.gpus.detected === false) t.match(node.gpus.reason, /\w+/, 'no GPU comes with a reason')
  else t.ok(node.gpus.devices.length > 0)
  t.match((await runNode(agentctlMain, ['--socket', agent.socketPath, 'node'])).stdout, /INTERFACE\s+STATE/)

  const version = JSON.parse((await runNode(agentctlMain, ['--socket', agent.socketPath, 'version', '--json'])).stdout)
  t.equal(version.agentd, status.version)
  t.equal(version.agentctl, status.version)
})

t.test('no agent at the socket: exit 1 with a clear message (and a JSON error with --json)', async t => {
  const socket = join(tempDir(t), 'none.sock')
  const human = await runNode(agentctlMain, ['--socket', socket, 'status'])
  t.equal(human.code, 1)
  t.match(human.stderr, /ERR_AGENT_UNREACHABLE: no agent answers at .*none\.sock: no socket there\. Is agentd running\?/)
  const json = await runNode(agentctlMain, ['--socket', socket, '--json', 'status'])
  t.equal(json.code, 1)
  t.equal(JSON.parse(json.stdout).error.code, 'ERR_AGENT_UNREACHABLE')
})

t.test('bad usage exits 2 with a hint', async t => {
  const res = await runNode(agentctlMain, ['stauts'])
  t.equal(res.code, 2)
  t.match(res.stderr, /unknown command "stauts"; did you mean "status"\?/)
  t.equal((await runNode(agentctlMain, ['--nope'])).code, 2)
  t.equal((await runNode(agentctlMain, [])).code, 2)
  t.equal((await runNode(agentctlMain, ['--help'])).code, 0)
})

t.test('the daemon\'s error code and message reach the client unchanged', async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', 'api.bodyLimitBytes=1024'] })
  await t.rejects(agent.client.call('GET', '/v1/does-not-exist'), { code: 'ERR_NOT_FOUND', message: 'no route GET /v1/does-not-exist' })
  await t.rejects(agent.client.call('POST', '/v1/state/materialize', { prefix: 'x/', version: 1, path: `/${'x'.repeat(4096)}` }),
    { code: 'ERR_BODY_TOO_LARGE', message: 'request body larger than the 1024 bytes POST /v1/state/materialize accepts (api.bodyLimitBytes)' })
  t.same(await agent.client.call('POST', '/v1/state/drop', { prefix: 'x'.repeat(1024) }), { dropped: 0 }, 'a batch route is not bound by api.bodyLimitBytes')
})
