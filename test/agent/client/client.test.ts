// The TypeScript client against a real agent process: how each way a call fails comes back.
import t from 'tap'
import { connect, type Socket } from 'node:net'
import { once } from 'node:events'
import { globalAgent } from 'node:http'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createAgentClient } from '../../../agent/client/client.ts'
import { spawnAgent, tempDir } from '../../helpers/agent-process.ts'
import { until } from '../api/listening-api.ts'

const MiB = 2 ** 20
const maxConnections = 16

t.test('no agent, a connection closed without an answer and a refused request are told apart', async t => {
  const dir = tempDir(t)
  const agent = await spawnAgent(t, { stateDir: dir, args: ['--dev', '--state-dir', dir, '--set', `api.maxConnections=${maxConnections}`] })

  await t.rejects(createAgentClient({ socketPath: join(dir, 'none.sock') }).health(), { code: 'ERR_AGENT_UNREACHABLE', message: /no socket there\. Is agentd running\?/ })
  const notListening = join(dir, 'stale.sock')
  writeFileSync(notListening, '')
  await t.rejects(createAgentClient({ socketPath: notListening }).health(), { code: 'ERR_AGENT_UNREACHABLE', message: /a stale socket, no agent listening/ })

  // The agent accepts a connection over api.maxConnections and closes it at once. (Closing the
  // connections node's http keeps alive first: a call on one of those would not be over the cap.)
  globalAgent.destroy()
  const held: Socket[] = []
  t.teardown(() => { for (const s of held) s.destroy() })
  for (let i = 0; i < maxConnections; i++) {
    const s = connect(agent.socketPath)
    s.on('error', () => {})
    await once(s, 'connect')
    held.push(s)
  }
  await t.rejects(agent.client.health(), { code: 'ERR_CONNECTION_LOST', message: /closed the connection before answering GET \/healthz .*may or may not have been carried out/ })
  for (const s of held) s.destroy()

  await until(async () => await agent.client.health().then(() => true, () => false)) // the agent notices the closes asynchronously

  // A body far larger than the socket's buffers, sent to another process: the client is still writing when the agent refuses.
  const refused = agent.client.call('POST', '/v1/leader/decisions', { kind: 'x', payload: 'a'.repeat(64 * MiB) })
  await t.rejects(refused, { code: 'ERR_BODY_TOO_LARGE', message: /^request body larger than the 1048576 bytes POST \/v1\/leader\/decisions accepts \(api\.bodyLimitBytes\)$/ })
})
