// The parts of xsalsa20 1.2.0 (no types of its own) that xsalsa20-shared-memory.ts uses.
declare module 'xsalsa20' {
  interface XSalsa20 {
    /** The WebAssembly cipher (with its view of the shared memory) or the JavaScript fallback; null once finalized. */
    _xor: { _memory?: Uint8Array } | null
    update(input: Uint8Array, output?: Uint8Array): Uint8Array
    finalize(): void
  }
  interface XSalsa20Constructor {
    (nonce: Uint8Array, key: Uint8Array): XSalsa20
    new (nonce: Uint8Array, key: Uint8Array): XSalsa20
    readonly prototype: XSalsa20
    readonly NONCEBYTES: number
    readonly KEYBYTES: number
  }
  const XSalsa20: XSalsa20Constructor
  export default XSalsa20
}
