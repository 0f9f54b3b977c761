/**
 * Yamux window updates at half the window, as go-yamux sends them.
 *
 * @chainsafe/libp2p-yamux 8 answers every data frame it receives with a
 * window update, a frame of its own that is encrypted, written, read and
 * decrypted by the peer. On the mesh's long-lived streams (gossipsub, small
 * messages) that is one extra frame per message each way: profiled on an
 * idle 6-agent mesh, sending them was 8 % of an agent's busy CPU, before
 * the peer's cost of receiving them. The protocol needs an update only
 * before the sender runs out of window; go-yamux (and hashicorp/yamux,
 * which defined it) send one when less than half the window is left, or
 * when a flag (SYN, ACK) must go out. This makes the JS streams do the
 * same: a stream that still has more than half its receive window skips
 * the update. Flow control is unchanged (the sender still has at least half
 * a window in hand when the update goes out).
 *
 * Importing this module patches YamuxStream once (libp2p-node.ts does).
 * `yamux-window-updates.test.ts` pins the behaviour against the installed
 * version: if the library changes what these fields mean, it fails.
 */
import { StreamState, YamuxStream } from '@chainsafe/libp2p-yamux/stream'

interface StreamWindow { state: StreamState, recvWindow: number, recvWindowCapacity: number }

const patched = Symbol.for('agentd.yamuxHalfWindowUpdates')
const proto = YamuxStream.prototype as unknown as { sendWindowUpdate(): void, [patched]?: true }

if (typeof proto.sendWindowUpdate !== 'function' || StreamState?.Init === undefined || StreamState.Paused === undefined) {
  throw new Error('@chainsafe/libp2p-yamux has changed: YamuxStream.sendWindowUpdate or StreamState is gone (mesh/membership/yamux-window-updates.ts)')
}
if (proto[patched] !== true) {
  const sendWindowUpdate = proto.sendWindowUpdate
  proto.sendWindowUpdate = function (this: StreamWindow) {
    // Init and SYNReceived streams send a flag (SYN, ACK) with the update: always sent.
    const flagDue = this.state === StreamState.Init || this.state === StreamState.SYNReceived
    if (!flagDue && this.state !== StreamState.Paused && this.recvWindowCapacity * 2 > this.recvWindow) return
    sendWindowUpdate.call(this)
  }
  proto[patched] = true
}
