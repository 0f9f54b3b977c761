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
