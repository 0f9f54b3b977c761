/** agentctl version: versions of agentctl and of the agent at the socket (exit 0 even when none answers). */
import { agentVersion } from '../../agent/version.ts'
import type { Command } from './command.ts'

export const versionCommand: Command = {
  summary: 'versions of agentctl and of the agent answering at the socket',
  examples: [
    { what: 'agentctl\'s version and that of the agent at the socket', run: 'agentctl version' },
    { what: 'both as JSON ("agentd": null when no agent answers; agentctl --version asks none)', run: 'agentctl version --json' },
  ],
  async run ({ client, signal }) {
    let agent: string | null = null
    let agentError = ''
    try {
      agent = (await client.status({ signal })).version
    } catch (err) {
      agentError = (err as Error).message
    }
    const human = `agentctl ${agentVersion}\nagentd   ${agent ?? `unknown (${agentError})`}`
    return { json: { agentctl: agentVersion, agentd: agent }, human }
  },
}
