/**
 * Canonical state keys (DESIGN "StateManager", PlexRL §4.5): the unit of
 * deduplication. Data-parallel replicas offloading the same chunk produce the
 * same key, so it is stored once.
 *
 * Grammar (ABNF; the whole key is at most 1024 bytes):
 *
 *   key       = namespace "/" fqn ":" role "@[" dims "]/[" dims "]:" dtype "#v" version
 *   namespace = segment *( "/" segment )          ; job/model, may contain "/"
 *   fqn       = segment                           ; fully-qualified tensor name, no "/"
 *   segment   = 1*( ALPHA / DIGIT / "_" / "-" / "." )
 *   role      = "param" / "grad" / "buffer" / "optim." 1*( ALPHA / DIGIT / "_" )
 *   dims      = [ uint *( "," uint ) ]            ; offsets, then the local shape
 *   dtype     = "bool" / "u8" / "i8" / "i16" / "i32" / "i64" / "f16" / "bf16"
 *             / "f32" / "f64" / "f8_e4m3" / "f8_e5m2"
 *   version   = uint
 *   uint      = "0" / %x31-39 *DIGIT                ; no leading zeros: one spelling per key
 *
 * The offsets are the chunk's global offsets and the shape its local shape:
 * both have the same rank (0 for a scalar, at most 8), every shape dimension
 * is >= 1, and the byte size is product(shape) × sizeof(dtype).
 * Example: job42/actor/model.layers.3.mlp.up_proj.weight:param@[0,0]/[4096,1024]:bf16#v17
 */
import { AgentError } from '../../core/errors.ts'

export const dtypeBytes = {
  bool: 1, u8: 1, i8: 1, i16: 2, i32: 4, i64: 8, f16: 2, bf16: 2, f32: 4, f64: 8, f8_e4m3: 1, f8_e5m2: 1,
} as const

export type Dtype = keyof typeof dtypeBytes

export interface StateKey {
  /** The canonical text, exactly as parsed. */
  text: string
  namespace: string
  fqn: string
  role: string
  offsets: number[]
  shape: number[]
  dtype: Dtype
  version: number
  /** product(shape) × sizeof(dtype). */
  bytes: number
}

export const maxKeyLength = 1024
export const maxRank = 8

const segment = '[A-Za-z0-9_.-]+'
const uint = '(?:0|[1-9][0-9]*)'
const dims = `(?:${uint}(?:,${uint})*)?`
const namespacePattern = new RegExp(`^${segment}(?:/${segment})*$`)
const keyPattern = new RegExp(
  `^(?<namespace>${segment}(?:/${segment})*)/(?<fqn>${segment}):(?<role>param|grad|buffer|optim\\.[A-Za-z0-9_]+)` +
  `@\\[(?<offsets>${dims})\\]/\\[(?<shape>${dims})\\]:(?<dtype>[a-z0-9_]+)#v(?<version>${uint})$`)

/**
 * Parses a canonical key; ERR_KEY_INVALID with the reason otherwise.
 * `allowEmpty`: a shape dimension may be 0 — a key that names a tensor of no
 * elements (a pull's slice of a rank whose vocab part is all padding), which
 * is never stored.
 */
export function parseKey (text: unknown, options: { allowEmpty?: boolean } = {}): StateKey {
  if (typeof text !== 'string') throw invalid(text, 'a key must be a string')
  if (text.length === 0 || text.length > maxKeyLength) throw invalid(text, `length must be 1..${maxKeyLength}`)
  const m = keyPattern.exec(text)
  if (m === null) throw invalid(text, explainMismatch(text))
  const g = m.groups!
  const dtype = g.dtype!
  if (!Object.hasOwn(dtypeBytes, dtype)) throw invalid(text, `unknown dtype "${dtype}" (one of ${Object.keys(dtypeBytes).join(' ')})`)
  const offsets = splitDims(g.offsets!)
  const shape = splitDims(g.shape!)
  if (offsets.length !== shape.length) throw invalid(text, `offsets have rank ${offsets.length} but the shape has rank ${shape.length}`)
  if (shape.length > maxRank) throw invalid(text, `rank ${shape.length} exceeds ${maxRank}`)
  if (shape.some(d => d < (options.allowEmpty === true ? 0 : 1))) throw invalid(text, 'every shape dimension must be >= 1')
  const version = Number(g.version)
  const bytes = shape.reduce((a, d) => a * d, 1) * dtypeBytes[dtype as Dtype]
  if (![version, bytes, ...offsets].every(Number.isSafeInteger)) throw invalid(text, 'a number is too large')
  return { text, namespace: g.namespace!, fqn: g.fqn!, role: g.role!, offsets, shape, dtype: dtype as Dtype, version, bytes }
}

/** Whether `text` is a namespace as the grammar spells one (1024 characters at most). */
export function isNamespace (text: unknown): text is string {
  return typeof text === 'string' && text.length <= maxKeyLength && namespacePattern.test(text)
}

export function formatKey (key: Omit<StateKey, 'text' | 'bytes'>): string {
  return `${key.namespace}/${key.fqn}:${key.role}@[${key.offsets.join(',')}]/[${key.shape.join(',')}]:${key.dtype}#v${key.version}`
}

function splitDims (text: string): number[] {
  return text === '' ? [] : text.split(',').map(Number)
}

function invalid (text: unknown, reason: string): AgentError {
  const shown = typeof text === 'string' && text.length > 120 ? `${text.slice(0, 117)}...` : text
  return new AgentError('ERR_KEY_INVALID', `invalid state key ${JSON.stringify(shown)}: ${reason}`)
}

/** Names the first part of the grammar that `text` breaks, for the error message. */
function explainMismatch (text: string): string {
  const colon = text.indexOf(':')
  if (colon < 0) return 'expected <namespace>/<fqn>:<role>@[offsets]/[shape]:<dtype>#v<version>'
  const path = text.slice(0, colon)
  if (!path.includes('/')) return 'missing namespace: expected <namespace>/<fqn> before the first ":"'
  if (!namespacePattern.test(path)) return `namespace/fqn "${path}" may only contain letters, digits, "_", "-", "." and "/" between non-empty parts`
  const rest = text.slice(colon + 1)
  const role = /^(param|grad|buffer|optim\.[A-Za-z0-9_]+)@/.exec(rest)
  if (role === null) return `role must be param, grad, buffer or optim.<name> followed by "@", got "${rest.split('@')[0]}"`
  const afterRole = rest.slice(role[0].length)
  if (!new RegExp(`^\\[${dims}\\]/\\[${dims}\\]:`).test(afterRole)) return 'expected @[offsets]/[shape]: with comma-separated non-negative integers without leading zeros'
  if (!/#v/.test(afterRole)) return 'missing #v<version>'
  return 'version must be a non-negative integer without leading zeros'
}
