/**
 * Real worker processes for live-execution tests and benchmarks: the tiny
 * deterministic trainer (test/helpers/workers/tiny_trainer.py) serving a rank
 * of a live job through an agent, or the same rank run alone with no agent.
 * Every worker started here is SIGKILLed in the test's teardown.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { repoRoot } from './agent-process.ts'
import { python } from './python.ts'

export const tinyTrainer = join(repoRoot, 'test/helpers/workers/tiny_trainer.py')

/** `--set inventory.gpus=…`: `n` stand-in GPUs (no CUDA behind them: workers use shared memory). */
export function fakeGpus (n: number): string {
  return JSON.stringify(Array.from({ length: n }, (_, i) => ({ model: 'fake', memoryBytes: 1 << 30, uuid: `GPU-${i}`, pciBus: `0000:0${i}:00.0` })))
}

/** `--set inventory.gpus=…` for an agent with two stand-in GPUs. */
export const twoFakeGpus = fakeGpus(2)

/**
 * A live job on one node with `gpusPerNode` ranks: one GPU segment of `segmentS` per `periodS`, a small
 * switch cost. Its controllers submit back to back, so colocated jobs slow each other several times over:
 * the default bound (1000, the most a spec takes) keeps the slowdown guard out of tests about other things.
 */
export function liveJobSpec (id: string, options: { gpusPerNode?: number, periodS?: number, segmentS?: number, iterations?: number, maxSlowdown?: number } = {}) {
  return { id, nodes: 1, gpusPerNode: options.gpusPerNode ?? 2, periodS: options.periodS ?? 10, iterations: options.iterations ?? 100, segments: [{ offsetS: 0, durationS: options.segmentS ?? 1 }], maxSlowdown: options.maxSlowdown ?? 1000, switchS: 0.05, live: true }
}

interface Teardown { teardown(fn: () => unknown): void }

export interface TrainerOptions { job: string, rank: number, seed: number, hidden?: number, gpu?: number | null, device?: 'cpu' | 'cuda' }

export interface WorkerProcess {
  proc: ChildProcess
  /** The agent's registration answer. */
  registered: { workerId: string, stored: { version: number } | null }
  exited: Promise<number | null>
  output(): string
}

const trainerArgs = (o: TrainerOptions): string[] => [
  '--job', o.job, '--rank', String(o.rank), '--seed', String(o.seed), '--hidden', String(o.hidden ?? 64),
  ...(o.gpu !== undefined && o.gpu !== null ? ['--gpu', String(o.gpu)] : []), ...(o.device !== undefined ? ['--device', o.device] : []),
]

const pythonEnv = (): NodeJS.ProcessEnv => ({
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('AGENTD_'))),
  PYTHONDONTWRITEBYTECODE: '1', PYTHONUNBUFFERED: '1',
})

/** Starts a worker serving `o.rank` of `o.job` through the agent at `socketPath`; resolves once it registered. */
export async function startTrainer (t: Teardown, socketPath: string, o: TrainerOptions, timeoutMs = 60_000): Promise<WorkerProcess> {
  const proc = spawn(python, [tinyTrainer, 'serve', '--socket', socketPath, ...trainerArgs(o)], { env: pythonEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  proc.stderr!.on('data', (c: Buffer) => { output += c.toString() })
  const exited = new Promise<number | null>(resolve => proc.once('exit', code => resolve(code)))
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL') })
  const lines = createInterface({ input: proc.stdout! })
  const registered = await new Promise<WorkerProcess['registered']>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker ${o.job}/${o.rank} did not register within ${timeoutMs} ms:\n${output}`)), timeoutMs)
    lines.on('line', line => {
      output += `${line}\n`
      try {
        const msg = JSON.parse(line) as { registered?: WorkerProcess['registered'] }
        if (msg.registered !== undefined) { clearTimeout(timer); resolve(msg.registered) }
      } catch { /* not a JSON line */ }
    })
    void exited.then(code => { clearTimeout(timer); reject(new Error(`worker ${o.job}/${o.rank} exited (${code}) before registering:\n${output}`)) })
  })
  return { proc, registered, exited, output: () => output }
}

export interface AloneRun { steps: Array<{ step: number, loss: string, stateHash: string }>, final: string }

/** Runs `steps` train steps of the rank alone (no agent): every step's result and the final state hash. */
export function runAlone (o: TrainerOptions & { steps: number }): Promise<AloneRun> {
  return new Promise((resolve, reject) => {
    const proc = spawn(python, [tinyTrainer, 'alone', ...trainerArgs(o), '--steps', String(o.steps)], { env: pythonEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    proc.stdout.on('data', (c: Buffer) => { out += c.toString() })
    proc.stderr.on('data', (c: Buffer) => { err += c.toString() })
    proc.once('exit', code => {
      if (code !== 0) { reject(new Error(`alone run of ${o.job}/${o.rank} exited ${code}:\n${err}`)); return }
      const lines = out.trim().split('\n').map(l => JSON.parse(l) as Record<string, unknown>)
      const final = lines.pop() as { final: string }
      resolve({ steps: lines as AloneRun['steps'], final: final.final })
    })
  })
}
