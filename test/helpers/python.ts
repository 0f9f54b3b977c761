/**
 * The Python interpreter the tests run Python clients and workers with: $PYTHON
 * if set; otherwise the first of `python3` on PATH and the system's
 * /usr/bin/python3 that can import torch (so the torch paths run wherever one
 * of them has it, e.g. Debian's python3-torch beside a python3 of one's own),
 * else `python3`.
 */
import { spawnSync } from 'node:child_process'

const candidates = process.env.PYTHON !== undefined ? [process.env.PYTHON] : ['python3', '/usr/bin/python3']

export const hasTorch = (exe: string): boolean => spawnSync(exe, ['-c', 'import torch'], { stdio: 'ignore' }).status === 0

export const python = candidates.find(hasTorch) ?? candidates[0]!

/** Why the torch-based tests cannot run here (printed as the skip reason), or false when they can. */
export function torchSkipReason (): string | false {
  return hasTorch(python) ? false : `no Python with torch (${candidates.join(', ')} tried; CI installs python3-torch)`
}
