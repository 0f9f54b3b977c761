/** fio as the baseline of the NVMe benchmarks: one sequential pass, GB/s (10^9 B/s). */
import { execFileSync } from 'node:child_process'

export interface FioPass {
  rw: 'write' | 'read'
  file: string
  sizeBytes: number
  blockBytes: number
  queueDepth: number
  /** fdatasync at the end of a write pass (what a durable write pays). Default false. */
  endFsync?: boolean
}

export function fioGbPerSecond (pass: FioPass): number {
  const out = execFileSync('fio', [
    '--name=agentd', `--filename=${pass.file}`, `--rw=${pass.rw}`, `--bs=${pass.blockBytes}`, `--iodepth=${pass.queueDepth}`,
    '--ioengine=libaio', '--direct=1', `--size=${pass.sizeBytes}`, `--end_fsync=${pass.endFsync === true ? 1 : 0}`, '--output-format=json',
  ], { encoding: 'utf8' })
  const job = (JSON.parse(out) as { jobs: Array<Record<'read' | 'write', { bw_bytes: number }>> }).jobs[0]!
  return job[pass.rw].bw_bytes / 1e9
}
