// A separate client process for the device-lock tests: acquires a GPU through
// the agent's API, prints the grant as one JSON line, then idles until killed.
//   node locks-client-process.ts SOCKET GPU [HOLDER]
import { createAgentClient } from '../../../agent/client/client.ts'

const [socketPath, gpu, holder] = process.argv.slice(2)
if (socketPath === undefined || gpu === undefined) {
  // Run without arguments (e.g. by `tap test/agent/api`): not a test itself.
  process.stdout.write('1..0 # SKIP helper process of locks-agent.test.ts, not a test\n')
  process.exit(0)
}
const client = createAgentClient({ socketPath })
const granted = await client.acquireGpu(Number(gpu), holder !== undefined ? { holder } : {})
process.stdout.write(`${JSON.stringify(granted)}\n`)
setInterval(() => {}, 60_000)
