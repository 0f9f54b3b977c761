// The text-format writer (agent/metrics/exposition.ts) and the strict parser the other metrics tests read it with.
import t from 'tap'
import { renderExposition, type MetricFamily } from '../../../agent/metrics/exposition.ts'
import { parsePrometheusText, sampleValue } from './prometheus-text.ts'

t.test('renders HELP, TYPE and samples, one group per family; an empty family is left out', async t => {
  const text = renderExposition([
    { name: 'agentd_state_copies_total', help: 'Copies.', type: 'counter', samples: [{ labels: { direction: 'offload' }, value: 4 }, { labels: { direction: 'onload' }, value: 1 }] },
    { name: 'agentd_gpu_memory_free_bytes', help: 'Free.', type: 'gauge', samples: [] },
    { name: 'agentd_uptime_seconds', help: 'Up.', type: 'gauge', samples: [{ value: 1.5 }] },
    { name: 'agentd_event_loop_delay_seconds', help: 'Delay.', type: 'summary', samples: [{ labels: { quantile: '0.5' }, value: 0.001 }, { suffix: '_sum', value: 2 }, { suffix: '_count', value: 10 }] },
  ])
  t.equal(text, [
    '# HELP agentd_state_copies_total Copies.',
    '# TYPE agentd_state_copies_total counter',
    'agentd_state_copies_total{direction="offload"} 4',
    'agentd_state_copies_total{direction="onload"} 1',
    '# HELP agentd_uptime_seconds Up.',
    '# TYPE agentd_uptime_seconds gauge',
    'agentd_uptime_seconds 1.5',
    '# HELP agentd_event_loop_delay_seconds Delay.',
    '# TYPE agentd_event_loop_delay_seconds summary',
    'agentd_event_loop_delay_seconds{quantile="0.5"} 0.001',
    'agentd_event_loop_delay_seconds_sum 2',
    'agentd_event_loop_delay_seconds_count 10',
    '',
  ].join('\n'))
  const parsed = parsePrometheusText(text)
  t.same([...parsed.keys()], ['agentd_state_copies_total', 'agentd_uptime_seconds', 'agentd_event_loop_delay_seconds'])
  t.equal(sampleValue(parsed, 'agentd_event_loop_delay_seconds_count'), 10)
  t.equal(renderExposition([]), '', 'nothing to say: an empty body')
})

t.test('escapes HELP text and label values; special values round-trip through the parser', async t => {
  const labels = { namespace: 'job"42"/actor\\x\nnext', empty: '' }
  const text = renderExposition([
    { name: 'm_bytes', help: 'a \\ back\nslash', type: 'gauge', samples: [{ labels, value: 1 }] },
    { name: 'v', help: 'values', type: 'gauge', samples: ['NaN', '+Inf', '-Inf', '1e+21', '-0.5', '0'].map((k, i) => ({ labels: { k }, value: [NaN, Infinity, -Infinity, 1e21, -0.5, 0][i]! })) },
  ])
  t.match(text, /^# HELP m_bytes a \\\\ back\\nslash$/m)
  t.match(text, /^m_bytes\{namespace="job\\"42\\"\/actor\\\\x\\nnext",empty=""\} 1$/m)
  t.match(text, /^v\{k="NaN"\} NaN$/m)
  t.match(text, /^v\{k="\+Inf"\} \+Inf$/m)
  t.match(text, /^v\{k="-Inf"\} -Inf$/m)
  const parsed = parsePrometheusText(text)
  t.equal(parsed.get('m_bytes')!.help, 'a \\ back\nslash')
  t.same(parsed.get('m_bytes')!.samples[0]!.labels, labels)
  t.same(parsed.get('v')!.samples.map(s => s.value), [NaN, Infinity, -Infinity, 1e21, -0.5, 0])
})

t.test('the writer refuses malformed families (a collector bug, caught here)', async t => {
  const bad = (family: Partial<MetricFamily>, message: RegExp, more: MetricFamily[] = []): void => {
    t.throws(() => renderExposition([...more, { name: 'agentd_x', help: 'h', type: 'gauge', samples: [{ value: 1 }], ...family }]), { message }, message.source)
  }
  bad({ name: '1x' }, /does not match/)
  bad({ name: 'agentd-x' }, /does not match/)
  bad({ name: 'agentd_x', type: 'counter' }, /must end in _total/)
  bad({ name: 'agentd_x_total', type: 'gauge' }, /must not end in _total/)
  bad({ samples: [{ labels: { 'bad-name': 'v' }, value: 1 }] }, /label name/)
  bad({ samples: [{ labels: { __name__: 'v' }, value: 1 }] }, /label name/)
  bad({ samples: [{ labels: { a: '1' }, value: 1 }, { labels: { a: '1' }, value: 2 }] }, /twice/)
  bad({}, /rendered twice/, [{ name: 'agentd_x', help: 'h', type: 'gauge', samples: [{ value: 1 }] }])
  bad({ name: 'agentd_s', type: 'summary', samples: [{ value: 1 }] }, /quantile, _sum or _count/)
  bad({ samples: [{ suffix: '_sum', value: 1 }] }, /belong to summaries/)
})

t.test('the parser rejects what Prometheus would, and what the agent must never serve', async t => {
  const ok = '# HELP a_total h\n# TYPE a_total counter\na_total{x="1"} 1\n'
  t.ok(parsePrometheusText(ok).has('a_total'))
  t.ok(parsePrometheusText('# HELP a h\n# TYPE a gauge\na{x="1",} 1 1700000000000\n').has('a'), 'trailing comma and a timestamp are allowed')
  t.ok(parsePrometheusText('# a comment\n# HELP a h\n# TYPE a gauge\na 1\n').has('a'), 'comments are allowed')
  const rejects: Array<[string, RegExp]> = [
    ['# HELP a h\n# TYPE a gauge\na 1', /last line/],
    ['# TYPE a gauge\na 1\n', /no HELP/],
    ['# HELP a h\na 1\n', /no TYPE/],
    ['a 1\n', /no TYPE/],
    ['# HELP 1a h\n# TYPE 1a gauge\n', /invalid metric name/],
    ['# HELP a h\n# TYPE a gauge\na{x="1\\t"} 1\n', /invalid escape/],
    ['# HELP a h\n# TYPE a gauge\na{x="1} 1\n', /unterminated|expected/],
    ['# HELP a h\n# TYPE a gauge\na{x="1",x="2"} 1\n', /twice/],
    ['# HELP a h\n# TYPE a gauge\na{1x="1"} 1\n', /label name/],
    ['# HELP a h\n# TYPE a gauge\na{x=1} 1\n', /expected ="/],
    ['# HELP a h\n# TYPE a gauge\na one\n', /invalid value/],
    ['# HELP a h\n# TYPE a gauge\na\n', /expected a value/],
    ['# HELP a h\n# TYPE a gauge\na 1 1.5\n', /invalid timestamp/],
    ['# HELP a h\n# TYPE a gauge\na 1\na 2\n', /twice/],
    ['# HELP a h\n# TYPE a gauge\n# HELP a again\na 1\n', /second HELP/],
    ['# HELP a h\n# TYPE a gauge\n# TYPE a gauge\na 1\n', /second TYPE/],
    ['# HELP a h\n# TYPE a gauge\na 1\n# TYPE b gauge\n# HELP b h\nb 1\na{x="2"} 1\n', /one group/],
    ['# HELP a h\n# TYPE a gauge\na 1\n\n', /blank line/],
    ['# HELP a h\n# TYPE a gauges\na 1\n', /unknown type/],
    ['# HELP a h\n# TYPE a summary\na 1\n', /quantile/],
    ['# HELP a h\n# TYPE a gauge\na_sum 1\n', /no TYPE/],
    ['# HELP a h\n# HELP b h\n# TYPE b gauge\nb 1\n# TYPE a gauge\n', /after another family|one group/],
  ]
  for (const [text, message] of rejects) t.throws(() => parsePrometheusText(text), { message }, JSON.stringify(text))
})
