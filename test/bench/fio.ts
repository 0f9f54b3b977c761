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

/**
 * A sequential O_DIRECT read of `readFile` and a sequential write of
 * `writeFile` at the same time on one disk (two fio jobs), as a pull between
 * two agents of one machine does (the server reads, the puller writes):
 * GB/s each achieved. `readFile` must hold `sizeBytes` already.
 */
export function fioReadWhileWriting (o: { readFile: string, writeFile: string, sizeBytes: number, blockBytes: number, queueDepth: number }): { read: number, write: number } {
  const common = [`--bs=${o.blockBytes}`, `--iodepth=${o.queueDepth}`, '--ioengine=libaio', '--direct=1', `--size=${o.sizeBytes}`]
  const out = execFileSync('fio', [
    '--output-format=json', '--name=read', `--filename=${o.readFile}`, '--rw=read', ...common, '--name=write', `--filename=${o.writeFile}`, '--rw=write', ...common,
  ], { encoding: 'utf8' })
  const [read, write] = (JSON.parse(out) as { jobs: Array<Record<'read' | 'write', { bw_bytes: number }>> }).jobs
  return { read: read!.read.bw_bytes / 1e9, write: write!.write.bw_bytes / 1e9 }
}
