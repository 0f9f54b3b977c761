// GPU sampling: parsing nvidia-smi's CSV, matching samples to the inventory, and the sampler
// process loop against a stand-in nvidia-smi (test/helpers/fake-nvidia-smi) that fails like the real one.
import t from 'tap'
import pino from 'pino'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { changeThresholdBytes, createGpuSampler, parseBusyUuids, parseGpuRows, samplesFor } from '../../../agent/inventory/gpu-sampler.ts'
import type { GpuDevice } from '../../../agent/inventory/schema.ts'
import { repoRoot } from '../../helpers/agent-process.ts'

const MiB = 2 ** 20
const device = (index: number, uuid: string): GpuDevice => ({ index, model: 'NVIDIA H100 80GB HBM3', memoryBytes: 81559 * MiB, uuid, pciBus: `0000:${index}:00.0` })
const devices = [device(0, 'GPU-aaaa'), device(1, 'GPU-bbbb')]

t.test('parses nvidia-smi rows, error values and N/A', async t => {
  t.same(parseGpuRows('0, GPU-aaaa, 81000\n1, GPU-bbbb, 512.5\n\n'), [
    { index: 0, uuid: 'GPU-aaaa', memoryFreeBytes: 81000 * MiB, failed: false },
    { index: 1, uuid: 'GPU-bbbb', memoryFreeBytes: 512.5 * MiB, failed: false },
  ])
  t.match(parseGpuRows('0, GPU-aaaa, [GPU is lost]\n1, GPU-bbbb, ERR!'), [{ failed: true, memoryFreeBytes: null }, { failed: true }])
  t.match(parseGpuRows('0, GPU-aaaa, [N/A]'), [{ failed: false, memoryFreeBytes: null }], 'unknown free memory is not a failure')
  t.same(parseGpuRows('No devices were found\n'), [], 'a message line is no row')
  t.same([...parseBusyUuids('GPU-aaaa, 4242\nGPU-aaaa, 4243\n')], ['GPU-aaaa'])
  t.same([...parseBusyUuids('No running processes found\n')], [])
})

t.test('samples are matched to the inventory by uuid (index without one); a missing GPU has failed', async t => {
  const rows = parseGpuRows('1, GPU-bbbb, 100\n0, GPU-aaaa, 200')
  t.same(samplesFor(devices, rows, new Set(['GPU-bbbb'])), [
    { memoryFreeBytes: 200 * MiB, health: 'ok', inUse: false },
    { memoryFreeBytes: 100 * MiB, health: 'ok', inUse: true },
  ])
  t.same(samplesFor(devices, parseGpuRows('0, GPU-aaaa, 200'), null)[1], { memoryFreeBytes: null, health: 'failed', inUse: null }, 'fell off the bus')
  t.same(samplesFor([device(0, '')], parseGpuRows('0, GPU-zzzz, 7'), null), [{ memoryFreeBytes: 7 * MiB, health: 'ok', inUse: null }], 'by index')
})

t.test('the sampler follows nvidia-smi, reports changes, and says failed / unknown when it cannot sample', async t => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-smi-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(join(dir, 'gpus.csv'), '0, GPU-aaaa, 80000\n1, GPU-bbbb, 80000\n')
  writeFileSync(join(dir, 'apps.csv'), '')
  process.env.FAKE_NVIDIA_SMI_DIR = dir
  let changes = 0
  const controller = new AbortController()
  t.teardown(() => controller.abort())
  const sampler = createGpuSampler({ command: join(repoRoot, 'test/helpers/fake-nvidia-smi'), intervalMs: 50, timeoutMs: 2000 },
    { devices, logger: pino({ level: 'silent' }), onChange: () => { changes++ } })
  t.same(sampler.samples().map(s => s.health), ['unknown', 'unknown'], 'before the first sample')
  sampler.start({ signal: controller.signal })
  const until = async (check: () => boolean, what: string): Promise<void> => {
    for (let i = 0; i < 100 && !check(); i++) await sleep(20)
    t.ok(check(), what)
  }
  await until(() => sampler.samples()[0]!.health === 'ok', 'first sample')
  t.equal(sampler.samples()[1]!.memoryFreeBytes, 80000 * MiB)
  const afterFirst = changes
  t.ok(afterFirst >= 1, 'the first sample is a change')

  writeFileSync(join(dir, 'gpus.csv'), `0, GPU-aaaa, ${80000 - 10}\n1, GPU-bbbb, 80000\n`)
  await sleep(200)
  t.equal(changes, afterFirst, `a small change in free memory (< ${changeThresholdBytes} bytes) waits for the heartbeat`)
  writeFileSync(join(dir, 'apps.csv'), 'GPU-bbbb, 777\n')
  writeFileSync(join(dir, 'gpus.csv'), '0, GPU-aaaa, 1000\n1, GPU-bbbb, 80000\n')
  await until(() => sampler.samples()[1]!.inUse === true && sampler.samples()[0]!.memoryFreeBytes === 1000 * MiB, 'holder and big drop seen')
  t.ok(changes > afterFirst, 'and reported as a change')

  writeFileSync(join(dir, 'gpus.csv'), '0, GPU-aaaa, [GPU is lost]\n1, GPU-bbbb, 80000\n')
  await until(() => sampler.samples()[0]!.health === 'failed', 'a lost GPU has failed')
  t.equal(sampler.samples()[1]!.health, 'ok', 'the other one is fine')
  writeFileSync(join(dir, 'fail'), '')
  await until(() => sampler.samples().every(s => s.health === 'failed'), 'nvidia-smi failing: every GPU failed')
  sampler.stop()

  const missing = createGpuSampler({ command: join(dir, 'no-such-nvidia-smi'), intervalMs: 50, timeoutMs: 2000 },
    { devices, logger: pino({ level: 'silent' }), onChange: () => {} })
  missing.start({ signal: controller.signal })
  await sleep(200)
  t.same(missing.samples().map(s => s.health), ['unknown', 'unknown'], 'no nvidia-smi: unknown, not failed')
  missing.stop()
})
