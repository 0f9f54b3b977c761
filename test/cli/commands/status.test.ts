// agentctl status's rendering of where the agent is in its life.
import t from 'tap'
import { renderStatus } from '../../../cli/commands/status.ts'
import type { StatusBody } from '../../../agent/api/wire/status.ts'

const status = (state?: StatusBody['state']): StatusBody => ({
  node: { id: 'id-1', name: 'n1' },
  ...(state !== undefined ? { state } : {}),
  version: '1.2.3',
  uptimeS: 2,
  dev: false,
  subsystems: [{ id: 'api', state: 'ok', startMs: 3 }, { id: 'state', state: 'pending' }],
})

t.test('a starting agent says so above the subsystem table; a ready one (or one too old to say) adds no line', async t => {
  t.match(renderStatus(status('starting')), /^state {4}starting \(subsystems still pending below; other requests answer ERR_STARTING\)$/m)
  t.match(renderStatus(status('stopping')), /^state {4}stopping$/m)
  t.notMatch(renderStatus(status('ready')), /^state {4}\S/m)
  t.notMatch(renderStatus(status()), /^state {4}\S/m)
  t.match(renderStatus(status('starting')), /state\s+pending/)
})

t.test('the native line names UCX and its transports; the weights line what the data server serves, and why not UCX', async t => {
  const native = { addon: { loaded: true }, cuda: { available: false, reason: 'no driver', devices: [] }, memlockLimitBytes: null, crc32c: 'sse4.2' }
  const built = renderStatus({ ...status(), native: { ...native, ucx: { compiled: true, version: '1.13.1', transports: [{ transport: 'tcp', device: 'lo' }, { transport: 'tcp', device: 'eth0' }, { transport: 'posix', device: 'memory' }] } }, weights: { address: '0.0.0.0:7461', transports: ['ucx', 'tcp'] } })
  t.match(built, /^native .*, ucx 1\.13\.1 \(tcp posix\)$/m)
  t.match(built, /^weights {2}data 0\.0\.0\.0:7461, serves ucx \+ tcp$/m)
  const without = renderStatus({ ...status(), native: { ...native, ucx: { compiled: false, version: '', transports: [] } }, weights: { address: '127.0.0.1:1', transports: ['tcp'], ucxUnavailable: 'its native addon was built without UCX' } })
  t.match(without, /^native .*, ucx not built$/m)
  t.match(without, /^weights {2}data 127\.0\.0\.1:1, serves tcp \(no ucx: its native addon was built without UCX\)$/m)
})
