import t from 'tap'
import { formatKey, parseKey, dtypeBytes } from '../../../agent/state/keys.ts'

t.test('parses the example key and computes its byte size', async t => {
  const k = parseKey('job42/actor/model.layers.3.mlp.up_proj.weight:param@[0,0]/[4096,1024]:bf16#v17')
  t.match(k, { namespace: 'job42/actor', fqn: 'model.layers.3.mlp.up_proj.weight', role: 'param', offsets: [0, 0], shape: [4096, 1024], dtype: 'bf16', version: 17, bytes: 4096 * 1024 * 2 })
  t.equal(formatKey(k), k.text)
  t.match(parseKey('j/opt/w:optim.exp_avg_sq@[128]/[64]:f32#v0'), { role: 'optim.exp_avg_sq', bytes: 256 })
  t.match(parseKey('j/s:buffer@[]/[]:i64#v3'), { shape: [], bytes: 8 }, 'a scalar')
  t.match(parseKey('weights/m/embed.weight:param@[0,0]/[0,64]:bf16#v2', { allowEmpty: true }), { fqn: 'embed.weight', shape: [0, 64], dtype: 'bf16', bytes: 0 }, 'a tensor of no elements, where asked for (a pull\'s all-padding slice)')
})

t.test('rejects what does not parse, with the reason', async t => {
  const cases: Array<[unknown, RegExp]> = [
    ['', /length must be/],
    [42, /must be a string/],
    ['w:param@[0]/[1]:f32#v1', /missing namespace/],
    ['job/w:weight@[0]/[1]:f32#v1', /role must be param, grad, buffer or optim/],
    ['job/w:param@[0]/[1]:f33#v1', /unknown dtype "f33"/],
    ['job/w:param@[0,0]/[1]:f32#v1', /offsets have rank 2 but the shape has rank 1/],
    ['job/w:param@[0]/[0]:f32#v1', /every shape dimension must be >= 1/],
    ['job/w:param@[01]/[1]:f32#v1', /without leading zeros/],
    ['job/w:param@[0]/[1]:f32#v01', /version must be/],
    ['job/w:param@[0]/[1]:f32', /missing #v/],
    ['job//w:param@[0]/[1]:f32#v1', /non-empty parts/],
    ['job/w x:param@[0]/[1]:f32#v1', /may only contain/],
    ['job/w:param@[0,0,0,0,0,0,0,0,0]/[1,1,1,1,1,1,1,1,1]:f32#v1', /rank 9 exceeds 8/],
    ['job/w:param@[0]/[99999999999999999]:f64#v1', /too large/],
    [`job/${'x'.repeat(1100)}:param@[0]/[1]:f32#v1`, /length must be/],
  ]
  for (const [text, reason] of cases) t.throws(() => parseKey(text), { code: 'ERR_KEY_INVALID', message: reason }, String(text).slice(0, 60))
})

t.test('fuzz: random mutations of valid keys either parse to the same canonical text or are rejected', async t => {
  let seed = 7
  const rand = (n: number): number => { seed = (seed * 1103515245 + 12345) % 2 ** 31; return seed % n }
  const alphabet = 'abz09_-./:@[],#vfbi'
  const dtypes = Object.keys(dtypeBytes)
  let parsed = 0
  let rejected = 0
  for (let i = 0; i < 5000; i++) {
    const rank = rand(4)
    const shape = Array.from({ length: rank }, () => 1 + rand(5000))
    const base = formatKey({ namespace: `job${rand(9)}/m`, fqn: `layer.${rand(99)}.w`, role: ['param', 'grad', 'buffer', 'optim.m'][rand(4)]!, offsets: shape.map(() => rand(10000)), shape, dtype: dtypes[rand(dtypes.length)] as never, version: rand(1000) })
    const chars = [...base]
    for (let m = rand(3); m > 0; m--) {
      const at = rand(chars.length + 1)
      const op = rand(3)
      if (op === 0) chars.splice(at, 1)
      else if (op === 1) chars.splice(at, 0, alphabet[rand(alphabet.length)]!)
      else chars[at] = alphabet[rand(alphabet.length)]!
    }
    const text = chars.join('')
    try {
      const k = parseKey(text)
      parsed++
      if (formatKey(k) !== text) t.fail(`non-canonical key accepted: ${text}`)
      if (k.bytes !== k.shape.reduce((a, d) => a * d, 1) * dtypeBytes[k.dtype]) t.fail(`wrong size for ${text}`)
    } catch (err) {
      rejected++
      if ((err as { code?: string }).code !== 'ERR_KEY_INVALID') t.fail(`unexpected error for ${text}: ${(err as Error).message}`)
    }
  }
  t.ok(parsed > 0 && rejected > 0, `both outcomes seen (parsed ${parsed}, rejected ${rejected})`)
})
