// A separate client process for the device-lock tests: acquires a GPU through
// the agent's API, prints the grant as one JSON line, then idles until killed.
//   node locks-client-process.ts SOCKET GPU [HOLDER]
import { createAgentClient } from '../../../agent/client/client.ts'

const [socketPath, gpu, holder] = process.argv.slice(2)
const client = createAgentClient({ socketPath: socketPath! })
const granted = await client.acquireGpu(Number(gpu), holder !== undefined ? { holder } : {})
process.stdout.write(`${JSON.stringify(granted)}\n`)
setInterval(() => {}, 60_000)
