/**
 * Weight pulls over UCX vs over our TCP path, same run, same publisher, two
 * local agent processes per transport set: agent A publishes a MODEL_MIB
 * version with weights.transports ["ucx", "tcp"]; agent B pulls it with
 * ["ucx", "tcp"] (tensor bytes read one-sided with UCX) and agent C with
 * ["tcp"] (the TCP path), alternating, RUNS times each; medians and the
 * ratio UCX / TCP. With --tp T, every pull is rank 0 of the llama preset's
 * tp T layout (row-parallel o_proj/down_proj slices are gathers: one get per
 * row over UCX, checked with CHECKSUM; the server gathers them over TCP). Then the idle CPU of B (a UCX worker open) and C
 * (TCP only) over IDLE_S seconds, from /proc (goal: indistinguishable).
 * Per UCX_TLS set (default tcp, then posix,self: shared memory between the
 * processes). Needs the addon built with UCX (libucx-dev).
 * Usage: node test/bench/weights-ucx.bench.ts [--model-mib M] [--runs R] [--streams S] [--idle-s N] [--tls tcp,posix] [--tp T]
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { capabilities } from '../../native/index.ts'
import { generateClusterKey } from '../../mesh/membership/cluster-key.ts'
import { spawnAgent, waitReady, type AgentProcess } from '../helpers/agent-process.ts'
import { median, MiB } from './bench-stats.ts'
import { llamaLike, llamaLikeTensors, writeSafetensors } from './weights-bench-model.ts'

const { values } = parseArgs({ options: { 'model-mib': { type: 'string' }, runs: { type: 'string' }, streams: { type: 'string' }, 'idle-s': { type: 'string' }, tls: { type: 'string' }, tp: { type: 'string' } } })
const modelMiB = Number(values['model-mib'] ?? 1024)
const runs = Number(values.runs ?? 3)
const streams = Number(values.streams ?? 4)
const idleSeconds = Number(values['idle-s'] ?? 10)
const tp = Number(values.tp ?? 1)
const tlsSets = (values.tls ?? 'tcp,posix').split(',').map(x => x === 'posix' ? 'posix,self' : x)

if (!capabilities.ucx.compiled) {
  console.log('skipped: the native addon was built without UCX (install libucx-dev and rebuild)')
  process.exit(0)
}

const teardowns: Array<() => unknown> = []
const t = { teardown: (fn: () => unknown) => { teardowns.push(fn) } }
const dir = mkdtempSync(join(tmpdir(), 'agentd-wucx-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

/** CPU seconds (user + system) a process used so far, from /proc/<pid>/stat. */
function cpuSeconds (pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

try {
  const keyFile = join(dir, 'cluster.key')
  writeFileSync(keyFile, generateClusterKey(), { mode: 0o600 })
  const { tensors, bytes: total } = llamaLikeTensors(modelMiB)
  const file = join(dir, 'model.safetensors')
  writeSafetensors(file, tensors, { num_attention_heads: String(llamaLike.heads), num_key_value_heads: String(llamaLike.kvHeads) })
  const layout = tp > 1 ? { layout: { tp, rank: 0, preset: 'llama' as const } } : {}
  console.log(`model: ${tensors.length} tensors, ${(total / MiB).toFixed(0)} MiB; pulls ${tp > 1 ? `of rank 0 of tp ${tp} (llama preset) ` : ''}with ${streams} streams; ${runs} runs per transport`)
  for (const tls of tlsSets) {
    const agents: AgentProcess[] = []
    const start = async (name: string, transports: string, poolFactor: number): Promise<AgentProcess> => {
      const state = join(dir, `${name}-${tls.replace(/\W/g, '')}`)
      const agent = await spawnAgent(t, {
        stateDir: state,
        waitReady: false,
        env: { UCX_TLS: tls },
        args: ['--dev', '--state-dir', state, '--cluster-key', keyFile, '--log-level', 'warn', '--set', 'mesh.enabled=false',
          '--set', `state.hostPoolBytes=${Math.ceil(total * poolFactor / MiB) * MiB}`, '--set', `state.nvmeCapacityBytes=${4 * total}`, '--set', `weights.transports=${transports}`, '--set', 'weights.ucxOverTcp=true'],
      })
      agents.push(agent)
      return agent
    }
    // A pins the version whole for UCX readers (at most half its pool).
    const a = await start('a', '["ucx","tcp"]', 2.5)
    const b = await start('b', '["ucx","tcp"]', 1.3)
    const c = await start('c', '["tcp"]', 1.3)
    for (const agent of agents) await waitReady(agent, 180_000)
    const version = (await a.client.weightsPublish({ model: 'bench', source: { kind: 'safetensors', path: file } })).version
    const address = (await a.client.status()).weights!.address
    const ucx: number[] = []; const tcp: number[] = []; let carried = ''
    for (let r = 0; r < runs; r++) {
      for (const [agent, into] of (r % 2 === 0 ? [[b, ucx], [c, tcp]] : [[c, tcp], [b, ucx]]) as Array<[AgentProcess, number[]]>) {
        await agent.client.call('POST', '/v1/state/drop', { prefix: 'weights/' })
        const res = await agent.client.weightsPull({ from: address, model: 'bench', version, streams, ...layout })
        if (tp === 1 && res.bytesReceived !== total) throw new Error(`received ${res.bytesReceived}, expected ${total}`)
        if (agent === b && res.ucx?.bytes !== res.bytesReceived) throw new Error(`B read ${res.ucx?.bytes ?? 0} bytes over UCX, not ${res.bytesReceived}: ${res.ucx?.fallback ?? 'no UCX report'}`)
        if (agent === b) carried = res.ucx!.transports.join(', ')
        into.push(res.bytesReceived / res.seconds / 2 ** 30)
      }
    }
    const list = (xs: number[]): string => `[${xs.map(x => x.toFixed(2)).join(', ')}]`
    console.log(`UCX_TLS=${tls}: pull over UCX (${carried}) median ${median(ucx).toFixed(2)} GiB/s ${list(ucx)}; over TCP median ${median(tcp).toFixed(2)} GiB/s ${list(tcp)}; UCX / TCP ${(median(ucx) / median(tcp)).toFixed(2)}`)
    // Idle: no pulls, B's UCX worker open (it pulled), C TCP only.
    const before = [b, c].map(x => cpuSeconds(x.proc.pid!))
    await new Promise(resolve => setTimeout(resolve, idleSeconds * 1000))
    const [idleB, idleC] = [b, c].map((x, i) => (cpuSeconds(x.proc.pid!) - before[i]!) / idleSeconds * 100)
    console.log(`UCX_TLS=${tls}: idle CPU over ${idleSeconds} s: with UCX ${idleB!.toFixed(2)} % of a core, TCP only ${idleC!.toFixed(2)} %`)
    for (const agent of agents) agent.proc.kill('SIGTERM')
    await Promise.all(agents.map(x => x.exited))
  }
} finally {
  for (const fn of teardowns.reverse()) await fn()
}
