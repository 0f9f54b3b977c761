/**
 * A fix for xsalsa20 1.2.0, the stream cipher of @libp2p/pnet (the cluster
 * key's private network), applied once on import.
 *
 * Every cipher keeps a Uint8Array view of the one WebAssembly memory all
 * ciphers share. When one cipher gets a chunk larger than that memory (TCP
 * hands over several mesh messages at once, e.g. a peer catching up on
 * decisions after a partition heals), it grows the memory, and the views of
 * every other cipher are detached (length 0). Each of their next updates then
 * "grows" the memory again by its whole size, because it compares against
 * length 0, until WebAssembly's maximum is reached and the agent crashes
 * (RangeError: WebAssembly.Memory.grow(): Maximum memory size exceeded, seen
 * on every agent of a 5-node cluster with 130 KB job tables within seconds of
 * a heal). The fix gives a detached view the current memory before each
 * update; nothing else of the cipher changes.
 *
 * The package's internals are checked at import: a version of it that no
 * longer has them fails loudly here rather than leaving the crash in place
 * unnoticed.
 */
import XSalsa20 from 'xsalsa20'

const zeroNonce = new Uint8Array(XSalsa20.NONCEBYTES)
const zeroKey = new Uint8Array(XSalsa20.KEYBYTES)

/** The shared memory's current view, from a fresh cipher (whose view is taken now). */
function currentView (): Uint8Array {
  const probe = XSalsa20(zeroNonce, zeroKey)
  const view = probe._xor!._memory
  probe.finalize()
  return view!
}

const probe = XSalsa20(zeroNonce, zeroKey)
const internalsFound = probe._xor !== null && probe._xor._memory instanceof Uint8Array
probe.finalize()
// Without WebAssembly the package falls back to a JavaScript cipher that has no shared memory (and no bug).
if ('WebAssembly' in globalThis && !internalsFound) {
  throw new Error('xsalsa20: the cipher no longer keeps a view of its WebAssembly memory where this fix expects it; check that the detached-view bug is fixed in this version and remove mesh/membership/xsalsa20-shared-memory.ts')
}

const update = XSalsa20.prototype.update
XSalsa20.prototype.update = function (this: XSalsa20, input: Uint8Array, output?: Uint8Array): Uint8Array {
  const xor = this._xor
  if (xor?._memory !== undefined && xor._memory.length === 0) xor._memory = currentView()
  return update.call(this, input, output)
}
