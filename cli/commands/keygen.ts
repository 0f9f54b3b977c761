/** agentctl keygen: prints a new cluster key (libp2p pre-shared key format) for mesh.clusterKeyFile / --cluster-key. Local; no agent needed. */
import { generateClusterKey } from '../../mesh/membership/cluster-key.ts'
import type { Command } from './command.ts'

export const keygenCommand: Command = {
  summary: 'print a new cluster key: agentctl keygen > /etc/agentd/cluster.key (mode 0640), same file on every node',
  examples: [
    { what: 'a key for a new cluster; copy the same file to every node', run: 'agentctl keygen > /etc/agentd/cluster.key' },
  ],
  async run () {
    const key = generateClusterKey()
    return { json: { key }, human: key.trimEnd() }
  },
}
