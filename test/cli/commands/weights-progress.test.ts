// `agentctl weights publish` and `weights pull` show the agent's progress (GET /v1/weights) on a terminal:
// bytes, rate and time left; on a pipe, with --quiet or with --json they draw nothing and do not poll.
import t from 'tap'
import { weightsPublishCommand } from '../../../cli/commands/weights-publish.ts'
import { weightsPullCommand } from '../../../cli/commands/weights-pull.ts'
import type { Command } from '../../../cli/commands/command.ts'
import type { ProgressStream } from '../../../cli/commands/progress-bar.ts'
import type { AgentClient } from '../../../agent/client/client.ts'
import type { VersionList } from '../../../agent/api/wire/weights.ts'

const MiB = 2 ** 20
const totalBytes = 64 * MiB

/**
 * An agent whose transfer advances 4 MiB per GET /v1/weights and finishes after `polls` of them
 * (at once when polls is 0); `publishing` or `pulling` is listed while it runs.
 */
function stubAgent (kind: 'publish' | 'pull', polls: number): { client: AgentClient, polled: () => number } {
  let calls = 0
  let finish: (() => void) | undefined
  const done = new Promise<void>(resolve => { finish = resolve })
  if (polls === 0) finish!()
  const list = (): VersionList => {
    const doneBytes = Math.min(totalBytes, calls * 4 * MiB)
    return {
      address: '127.0.0.1:7070', versions: [], damaged: [], pulls: [], distributing: [], droppedPeers: [],
      pulling: kind === 'pull' ? [{ from: '10.0.0.5:7070', model: 'm', version: 'latest', doneBytes, totalBytes }] : [],
      publishing: kind === 'publish' ? [{ model: 'm', version: 'next', stage: 'checksumming', doneBytes, totalBytes }] : [],
    }
  }
  const client = {
    weights: async () => { calls++; if (calls >= polls) finish!(); return list() },
    weightsPublish: async () => { await done; return { model: 'm', version: 3, totalBytes, durable: false, tensors: [{}] } },
    weightsPull: async () => { await done; return { version: 3, bytes: totalBytes, seconds: 1, tensors: 1, refetchedPieces: 0, reconnects: 0, sources: { '10.0.0.5:7070': totalBytes } } },
  } as unknown as AgentClient
  return { client, polled: () => calls }
}

function terminal (isTTY: boolean): ProgressStream & { text: () => string } {
  let text = ''
  return { isTTY, columns: 200, write: (s: string) => { text += s; return true }, text: () => text }
}

const commands: Array<[string, Command, 'publish' | 'pull', Record<string, string | boolean>, RegExp]> = [
  ['weights publish', weightsPublishCommand, 'publish', { model: 'm', 'from-keys': 'job/actor/' }, /^published m v3/],
  ['weights pull', weightsPullCommand, 'pull', { model: 'm', from: '10.0.0.5:7070' }, /^pulled m v3/],
]

for (const [name, command, kind, flags, result] of commands) {
  t.test(`${name} on a terminal: a bar with bytes, rate and time left, erased before the result`, async t => {
    const { client } = stubAgent(kind, 6)
    const stderr = terminal(true)
    const out = await command.run({ client, values: flags, positionals: [], json: false, signal: AbortSignal.timeout(10_000), stderr })
    t.match(out.human, result)
    const redraws = stderr.text().split('\r').filter(l => l !== '')
    t.ok(redraws.length >= 3, `redrawn in place (${redraws.length} times)`)
    t.match(stderr.text(), /(checksumming|pulling) m {2}\[#*\.*\] {2}\d+\.\d MiB \/ 64\.0 MiB {2}\d+\.\d MiB\/s {2}ETA \d+\.\ds/)
    t.ok(stderr.text().endsWith('\r\x1b[K'), 'the bar is erased')
  })

  t.test(`${name} not on a terminal, with --quiet, with --json: no bar, and the agent is not polled for one`, async t => {
    for (const [what, isTTY, quiet, json] of [['a pipe', false, false, false], ['--quiet', true, true, false], ['--json', true, false, true]] as const) {
      const { client, polled } = stubAgent(kind, 0)
      const stderr = terminal(isTTY)
      const values = { ...flags, ...(quiet ? { quiet: true } : {}) }
      await command.run({ client, values, positionals: [], json, signal: AbortSignal.timeout(10_000), stderr })
      t.equal(stderr.text(), '', `${what}: nothing on stderr`)
      t.equal(polled(), 0, `${what}: no progress requests`)
    }
  })
}
