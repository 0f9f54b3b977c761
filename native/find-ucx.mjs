// Prints the linker flags of the system's UCX (pkg-config ucx) when the addon
// should compile its UCX transport, or nothing. Used by binding.gyp at
// configure time. A build without UCX is a supported configuration: the addon
// then reports ucx.compiled = false and the weights transport is TCP only.
// AGENTD_UCX=0 disables it.
import { execFileSync } from 'node:child_process'

function ucxLibs () {
  if (process.env.AGENTD_UCX === '0') return ''
  try {
    execFileSync('pkg-config', ['--exists', 'ucx'], { stdio: 'ignore' })
    return execFileSync('pkg-config', ['--libs', 'ucx'], { encoding: 'utf8' }).trim()
  } catch {
    return ''
  }
}

process.stdout.write(ucxLibs())
