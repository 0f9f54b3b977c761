/**
 * Argument validation and error translation at the native boundary. The
 * addon throws plain Errors with a `code`; callers of native/ only ever see
 * AgentError.
 */
import { AgentError, isErrorCode } from '../core/errors.ts'

/** Turns an error thrown by the addon into an AgentError (keeping it as `cause`). */
export function fromNativeError (err: unknown): AgentError {
  if (err instanceof AgentError) return err
  const native = err as { code?: unknown, message?: unknown, errno?: unknown, syscall?: unknown, cudaError?: unknown }
  const code = isErrorCode(native?.code) ? native.code : 'ERR_INTERNAL'
  const message = typeof native?.message === 'string' ? native.message : String(err)
  const details: Record<string, unknown> = {}
  for (const key of ['errno', 'syscall', 'cudaError'] as const) {
    if (typeof native?.[key] === 'string') details[key] = native[key]
  }
  return new AgentError(code, message, { cause: err, details: Object.keys(details).length > 0 ? details : undefined })
}

/** Calls into the addon, translating what it throws. */
export function callNative<T> (call: () => T): T {
  try {
    return call()
  } catch (err) {
    throw fromNativeError(err)
  }
}

/** Awaits an addon promise, translating its rejection. */
export async function awaitNative<T> (call: () => Promise<T>): Promise<T> {
  try {
    return await call()
  } catch (err) {
    throw fromNativeError(err)
  }
}

function invalid (message: string): AgentError {
  return new AgentError('ERR_ARG_INVALID', message)
}

/** A byte count or offset: an integer in [min, Number.MAX_SAFE_INTEGER]. */
export function checkBytes (value: unknown, name: string, min = 0): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw invalid(`${name} must be an integer >= ${min}, got ${String(value)}`)
  }
  return value
}

export function checkInteger (value: unknown, name: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalid(`${name} must be an integer in [${min}, ${max}], got ${String(value)}`)
  }
  return value
}

export function checkPowerOfTwo (value: number, name: string): number {
  if (value <= 0 || (value & (value - 1)) !== 0 || !Number.isSafeInteger(value)) {
    throw invalid(`${name} must be a power of two, got ${value}`)
  }
  return value
}

/** Throws ERR_OUT_OF_RANGE unless [offset, offset + length) lies in [0, size). */
export function checkRange (offset: number, length: number, size: number, what: string): void {
  if (offset > size) {
    throw new AgentError('ERR_OUT_OF_RANGE', `${what}: offset ${offset} is past the end (${size} bytes)`)
  }
  if (length > size - offset) {
    throw new AgentError('ERR_OUT_OF_RANGE',
      `${what}: range [${offset}, ${offset + length}) exceeds the size of ${size} bytes`)
  }
}
