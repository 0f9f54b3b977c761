/**
 * Spawns real `agentd` processes (on the project's Node; the bundles or the
 * sources, testEntries below) with a temp state dir, for tests that need the
 * daemon as users run it. Every agent is killed in the test's teardown.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAgentClient, type AgentClient } from '../../agent/client/client.ts'
import { agentEnvironment, agentNodeFlags } from '../../agent/node-flags.ts'

export const repoRoot = fileURLToPath(new URL('../../', import.meta.url))
/**
 * The built agent and agentctl as installed: the single-file bundles of the
 * compiled sources (`npm run build:bundle`). Running the sources instead costs
 * ~25 MB more RSS (type stripping, 1,400 module records and their source text).
 */
export const builtAgentMain = join(repoRoot, 'dist/bundle/agentd.js')
export const builtAgentctl = join(repoRoot, 'dist/bundle/agentctl.js')
/** The compiled modules the bundle is made from: how the agent ran before, a benchmark baseline. */
export const unbundledAgentMain = join(repoRoot, 'dist/agent/main.js')

/** The folders the bundles are built from. */
const sourceFolders = ['agent', 'mesh', 'core', 'cli']

/** Newest modification time of a .ts file under `dir`, ms (0 when there is none). */
function newestSource (dir: string): number {
  let newest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(join(entry.parentPath, entry.name)).mtimeMs)
  }
  return newest
}

/**
 * What the tests run as the agent and agentctl: the bundles when they were
 * built after the last change to the sources (`npm test` builds first), else
 * the sources themselves, so a test run right after an edit never runs stale
 * code. Starting the bundle costs a third of the CPU of starting the sources
 * (0.4 s against 1.3 s for `--version`), and the suite starts hundreds of
 * agents. AGENTD_TEST_ENTRY=sources or =bundle decides instead.
 */
function testEntries (): { agent: string, agentctl: string } {
  const sources = { agent: join(repoRoot, 'agent/main.ts'), agentctl: join(repoRoot, 'cli/agentctl.ts') }
  const bundles = { agent: builtAgentMain, agentctl: builtAgentctl }
  const forced = process.env.AGENTD_TEST_ENTRY
  if (forced === 'sources') return sources
  if (forced === 'bundle') return bundles
  if (forced !== undefined && forced !== '') throw new Error(`AGENTD_TEST_ENTRY=${forced}: sources or bundle`)
  let built: number
  try { built = Math.min(statSync(builtAgentMain).mtimeMs, statSync(builtAgentctl).mtimeMs) } catch { return sources }
  return sourceFolders.every(f => newestSource(join(repoRoot, f)) <= built) ? bundles : sources
}
const entries = testEntries()
/** The agent's entry point the tests run (testEntries). */
export const agentMain = entries.agent
/** agentctl's entry point the tests run (testEntries). */
export const agentctlMain = entries.agentctl

export interface Teardown { teardown(fn: () => unknown): void }

/**
 * Every child this module started and that is still running. tap kills a test
 * file that times out, and then no teardown runs: these children are killed
 * when the test process exits or is told to stop, so none outlives it. Agents
 * also run with --exit-with-stdin: when the test process dies without a word
 * (SIGKILL) their stdin pipe closes and they stop on their own.
 */
const children = new Set<ChildProcess>()
const killChildren = (): void => { for (const child of children) child.kill('SIGKILL') }
process.once('exit', killChildren)
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
  process.once(signal, () => { killChildren(); process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGHUP' ? 1 : 15)) })
}
function track<T extends ChildProcess> (child: T): T {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

export interface AgentProcess {
  proc: ChildProcess
  stateDir: string
  socketPath: string
  client: AgentClient
  /** stdout + stderr so far (pino JSON lines). */
  output(): string
  /** Resolves with the exit code / signal. */
  exited: Promise<{ code: number | null, signal: NodeJS.Signals | null }>
}

/** A fresh temp dir removed at teardown. Short, so socket paths fit in 107 bytes. */
export function tempDir (t: Teardown, prefix = 'agentd-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export interface SpawnOptions {
  args?: string[]
  env?: NodeJS.ProcessEnv
  stateDir?: string
  /** Wait until the API answers (default true). */
  waitReady?: boolean
  /**
   * Run the built agent (needs `npm run build`) whatever testEntries chose,
   * for memory and CPU figures: true = its bundle, as installed; 'unbundled' =
   * the compiled modules (a baseline); { entry }: another build's agentd entry
   * point (a previous version, as a benchmark's baseline). Default false.
   */
  built?: boolean | 'unbundled' | { entry: string }
  /** Run the agent inside this network namespace (test/helpers/netns-lab.ts); `ip netns exec` execs it, so `proc` is the agent. */
  netns?: string
  /**
   * Append the agent's stdout and stderr to this file instead of pipes, as
   * systemd connects both to one journal stream; `output()` reads the file.
   */
  outputFile?: string
}

function agentEntry (built: SpawnOptions['built']): string {
  if (typeof built === 'object') return built.entry
  if (built === 'unbundled') return unbundledAgentMain
  return built === true ? builtAgentMain : agentMain
}

export async function spawnAgent (t: Teardown, options: SpawnOptions = {}): Promise<AgentProcess> {
  const stateDir = options.stateDir ?? tempDir(t)
  const socketPath = join(stateDir, 'agentd.sock')
  const args = options.args ?? ['--dev', '--state-dir', stateDir]
  const env = { ...agentEnvironment, ...withoutAgentdEnv(process.env), ...options.env }
  const command = [process.execPath, ...agentNodeFlags, agentEntry(options.built), ...args, '--exit-with-stdin']
  if (options.netns !== undefined) command.unshift('ip', 'netns', 'exec', options.netns)
  const outputFd = options.outputFile !== undefined ? openSync(options.outputFile, 'a') : undefined
  const proc = track(spawn(command[0]!, command.slice(1), { env, stdio: outputFd !== undefined ? ['pipe', outputFd, outputFd] : ['pipe', 'pipe', 'pipe'] }))
  if (outputFd !== undefined) closeSync(outputFd) // the child has its own copy
  let output = ''
  proc.stdout?.on('data', (c: Buffer) => { output += c.toString() })
  proc.stderr?.on('data', (c: Buffer) => { output += c.toString() })
  const exited = new Promise<{ code: number | null, signal: NodeJS.Signals | null }>(resolve => {
    proc.once('exit', (code, signal) => resolve({ code, signal }))
  })
  t.teardown(async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL')
      await exited
    }
  })
  const agent: AgentProcess = { proc, stateDir, socketPath, client: createAgentClient({ socketPath, timeoutMs: 5000 }), output: () => options.outputFile !== undefined ? readFileSync(options.outputFile, 'utf8') : output, exited }
  if (options.waitReady !== false) await waitReady(agent)
  return agent
}

/**
 * Polls GET /v1/leader until this (single dev) agent acts as leader with its
 * leader tasks started, so a decision made next is taken: being named leader
 * comes first, and until it acts a decision is ERR_NOT_LEADER.
 */
export async function untilActing (agent: AgentProcess, timeoutMs = 20_000): Promise<void> {
  for (let deadline = Date.now() + timeoutMs; ;) {
    const v = await agent.client.call<{ self: string, acting: boolean }>('GET', '/v1/leader')
    if (v.self === 'leader' && v.acting) return
    if (Date.now() > deadline) throw new Error(`the dev agent never acted as leader (last view: ${JSON.stringify(v)})`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

/** Polls /healthz until the agent answers; throws with its output if it exits or takes > 60 s (generous: CI machines are small and shared). */
export async function waitReady (agent: AgentProcess, timeoutMs = 60_000): Promise<void> {
  const began = Date.now()
  for (;;) {
    if (agent.proc.exitCode !== null || agent.proc.signalCode !== null) {
      throw new Error(`agentd exited before it was ready:\n${agent.output()}`)
    }
    try {
      await agent.client.health()
      return
    } catch {
      if (Date.now() - began > timeoutMs) throw new Error(`agentd not ready after ${timeoutMs} ms:\n${agent.output()}`)
      await sleep(25)
    }
  }
}

/** The environment without AGENTD_* variables of the developer's shell. */
export function withoutAgentdEnv (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith('AGENTD_')))
}

/** Runs a node entry point to completion: exit code, stdout, stderr. */
export function runNode (entry: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null, stdout: string, stderr: string }> {
  return new Promise(resolve => {
    const proc = track(spawn(process.execPath, [entry, ...args], { env: { ...withoutAgentdEnv(process.env), ...env }, stdio: ['ignore', 'pipe', 'pipe'] }))
    let stdout = ''
    let stderr = ''
    proc.stdout.on('data', (c: Buffer) => { stdout += c.toString() })
    proc.stderr.on('data', (c: Buffer) => { stderr += c.toString() })
    proc.once('exit', code => resolve({ code, stdout, stderr }))
  })
}
