// The workload nvme-tier-crash.test.ts kills: group commits of mixed keys into the NVMe tier in
// dir argv[2] (small keys through the page cache, larger ones with O_DIRECT and an unaligned tail,
// two groups in flight), and removals (whole groups in one removeAll, or key by key) that empty
// segments whole or leave them mostly dead (so they are removed or compacted). It stops at the `nth` (argv[4]) NvmeCommitPoint named argv[3],
// prints it and waits there to be killed. Lines on stdout: "put <n>" once key n's put resolved,
// "rm <n>" when its removal is issued, "del <n>" once that resolved, "at <point JSON>".
import { createNvmeTier, type NvmeTierOptions } from '../../../agent/state/nvme-tier.ts'
import { checksumBytes, createHostPool } from '../../../native/index.ts'
import { patternBytes } from '../../native/helpers.ts'

const KiB = 1024
/** Keys per group; every 8th is written with O_DIRECT (over directIoMinBytes) and has an unaligned tail. */
export const groupKeys = 16

export const crashTierOptions = (dir: string): NvmeTierOptions =>
  ({ dir, capacityBytes: 2 ** 30, segmentBytes: 1024 * KiB, directIoMinBytes: 64 * KiB })

export function sizeOf (n: number): number {
  if (n % 8 === 7) return 64 * KiB + 1 + (n * 37) % 4095
  if (n % 8 === 3) return 1000 + (n * 13) % 3000
  return 4 * KiB
}
export const keyOf = (n: number): string => `crash/k${n}:param@[0]/[${sizeOf(n)}]:u8#v1`
export const numberOf = (key: string): number => Number(/k(\d+):/.exec(key)![1])
export const ownerOf = (n: number): number | undefined => n % 4 === 0 ? undefined : 1000 + n % 4
export const dataOf = (n: number): Buffer => patternBytes(sizeOf(n), n + 1)

async function run (dir: string, point: string, nth: number): Promise<void> {
  const out = (line: string): void => { process.stdout.write(`${line}\n`) }
  let seen = 0
  const tier = createNvmeTier(crashTierOptions(dir), {
    commitPoint: async at => {
      if (at.point !== point || ++seen !== nth) return
      out(`at ${JSON.stringify(at)}`)
      await new Promise(() => {}) // until killed
    },
  })
  await tier.open()
  const pool = await createHostPool({ sizeBytes: 4 * 2 ** 20, lock: false, hugePages: false, registerCuda: false })
  const inFlight: Array<Promise<unknown>> = [Promise.resolve(), Promise.resolve()]
  const removals: Array<Promise<void>> = []
  for (let g = 0; g < 2000; g++) {
    const half = g % 2
    await inFlight[half]
    const keys = Array.from({ length: groupKeys }, (_, i) => g * groupKeys + i)
    const extents = keys.map(n => {
      const data = dataOf(n)
      const extent = pool.allocate(data.length)
      pool.view(extent).set(data)
      return extent
    })
    const sums = await Promise.all(keys.map(n => checksumBytes(dataOf(n))))
    // Issued in one tick: one group commit.
    inFlight[half] = Promise.all(keys.map((n, i) =>
      tier.put(keyOf(n), pool.range(extents[i]!, 0, sizeOf(n)), sums[i]!, ownerOf(n)).then(() => out(`put ${n}`))))
      .finally(() => { for (const e of extents) pool.free(e) })
    // Group g-4 (committed): every key of an even group, in one removeAll (a drop); 12 of 16 of an odd one, one by one.
    if (g >= 4) {
      const old = g - 4
      const gone = Array.from({ length: old % 2 === 0 ? groupKeys : 12 }, (_, i) => old * groupKeys + i)
      for (const n of gone) out(`rm ${n}`)
      if (old % 2 === 0) {
        removals.push(tier.removeAll(gone.map(keyOf)).then(() => { for (const n of gone) out(`del ${n}`) }))
      } else {
        for (const n of gone) removals.push(tier.remove(keyOf(n)).then(() => out(`del ${n}`)))
      }
    }
  }
  await Promise.all([...inFlight, ...removals])
  out('done')
  process.exit(3) // the kill point was never reached
}

if (import.meta.main) {
  if (process.env.AGENTD_NVME_CRASH_CHILD !== '1') {
    console.log('1..0 # SKIP helper process of nvme-tier-crash.test.ts')
    process.exit(0)
  }
  await run(process.argv[2]!, process.argv[3]!, Number(process.argv[4]))
}
