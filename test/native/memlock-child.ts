// Run by host-pool.test.ts under a 64 KiB RLIMIT_MEMLOCK: prints the error a
// 4 MiB pool raises, as JSON.
import { capabilities, createHostPool } from '../../native/index.ts'

if (process.env.AGENTD_MEMLOCK_CHILD !== '1') {
  console.log('1..0 # SKIP helper process of host-pool.test.ts')
  process.exit(0)
}

try {
  const pool = await createHostPool({ sizeBytes: 4 * 2 ** 20 })
  pool.close()
  console.log(JSON.stringify({ code: 'none', message: 'pool was created', limit: capabilities.memlockLimitBytes }))
} catch (err) {
  const { code, message } = err as { code: string, message: string }
  console.log(JSON.stringify({ code, message, limit: capabilities.memlockLimitBytes }))
}
