// agentctl whose output pipe closes early (`agentctl … | head`): killed by SIGPIPE like git and kubectl, no stack trace.
import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { agentctlMain, withoutAgentdEnv } from '../helpers/agent-process.ts'

// Megabytes of JSON, far more than a pipe buffer holds: the writes outlast the reader.
const bigOutput = ['sim', 'trace', 'placement', '--jobs', '3000', '--nodes', '64', '--seed', '1']

t.test('the reader closes the pipe after 10 bytes: agentctl dies of SIGPIPE and says nothing', async t => {
  const child = spawn(process.execPath, [agentctlMain, ...bigOutput], { env: withoutAgentdEnv(process.env), stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>
  const [first] = await once(child.stdout, 'data') as [Buffer]
  t.match(first.toString(), /^\{/, 'it was writing JSON')
  child.stdout.destroy() // like `head -c 10` exiting
  const [code, signal] = await exited
  t.same({ code, signal }, { code: null, signal: 'SIGPIPE' })
  t.equal(stderr, '', 'no EPIPE stack trace')
})

const bash = spawnSync('bash', ['-c', 'true']).status === 0
t.test('in a shell pipeline the status is 141, as for git and kubectl', { skip: bash ? false : 'no bash here' }, async t => {
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a bash script, expanded by bash
  const script = '"$0" "$1" "${@:2}" | head -c 10 >/dev/null; echo "status ${PIPESTATUS[0]}"'
  const res = spawnSync('bash', ['-c', script, process.execPath, agentctlMain, ...bigOutput], { env: withoutAgentdEnv(process.env), encoding: 'utf8' })
  t.equal(res.stdout, 'status 141\n')
  t.equal(res.stderr, '', 'nothing on stderr')
})
