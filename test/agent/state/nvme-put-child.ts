// Run by nvme-tier.test.ts, which SIGKILLs it mid-write: puts 4 KiB keys (pattern bytes seeded by
// their number) to the NVMe tier in dir argv[2], 64 at a time, and prints "ok <n>" once key n's put
// has resolved (its record is on disk), until killed.
import { checksumBytes, createHostPool } from '../../../native/index.ts'
import { createNvmeTier } from '../../../agent/state/nvme-tier.ts'
import { patternBytes } from '../../native/helpers.ts'

if (process.env.AGENTD_NVME_CHILD !== '1') {
  console.log('1..0 # SKIP helper process of nvme-tier.test.ts')
  process.exit(0)
}

const keyBytes = 4096
const group = 64
const tier = createNvmeTier({ dir: process.argv[2]!, capacityBytes: 2 ** 30, segmentBytes: 256 * 1024 })
await tier.open()
const pool = await createHostPool({ sizeBytes: 2 * group * keyBytes, lock: false, hugePages: false, registerCuda: false })
const halves = [0, 1].map(() => pool.allocate(group * keyBytes))
const inFlight: Array<Promise<unknown>> = [Promise.resolve(), Promise.resolve()]
// Two groups in flight: one half of the pool is filled while the other commits.
for (let n = 0, half = 0; ; n += group, half ^= 1) {
  await inFlight[half]
  const extent = halves[half]!
  const data = Array.from({ length: group }, (_, i) => patternBytes(keyBytes, n + i))
  const sums = await Promise.all(data.map(d => checksumBytes(d)))
  for (const [i, d] of data.entries()) pool.view(extent).set(d, i * keyBytes)
  // Issued together: one group commit.
  inFlight[half] = Promise.all(data.map((_, i) =>
    tier.put(`crash/k${n + i}:param@[0]/[${keyBytes}]:u8#v1`, pool.range(extent, i * keyBytes, keyBytes), sums[i]!)
      .then(() => process.stdout.write(`ok ${n + i}\n`))))
}
