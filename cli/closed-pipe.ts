/**
 * A closed output pipe (`agentctl … | head`) ends agentctl the way it ends
 * git, kubectl and every C or Go tool: killed by SIGPIPE, so the shell reports
 * status 141 (128 + 13) and prints nothing. Node.js ignores SIGPIPE and turns
 * it into an EPIPE 'error' event on the stream, which, unhandled, crashed
 * agentctl with a stack trace. Other write errors still throw.
 */

/** Installs the EPIPE handling on stdout and stderr; call once, before any output. */
export function dieOnClosedPipe (streams: NodeJS.WriteStream[] = [process.stdout, process.stderr]): void {
  for (const stream of streams) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') throw err
      // Node set SIGPIPE to "ignore"; libuv restores the default action when its last listener goes.
      const restore = (): void => {}
      process.on('SIGPIPE', restore)
      process.off('SIGPIPE', restore)
      process.kill(process.pid, 'SIGPIPE')
      process.exit(128 + 13) // not reached unless the signal could not be delivered
    })
  }
}
