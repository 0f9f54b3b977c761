// Prints the CUDA toolkit root the addon should compile against, or nothing.
// Used by binding.gyp at configure time. A build without CUDA is a supported
// configuration: the addon then reports cuda.available = false with a reason.
//
// Order: AGENTD_CUDA=0 disables CUDA; CUDA_HOME / CUDA_PATH; /usr/local/cuda;
// the directory above the first `nvcc` on PATH. A root counts only when it has
// the runtime header and the static runtime library (the addon links
// libcudart_static so it loads on machines without the CUDA driver).
import { existsSync } from 'node:fs'
import { delimiter, dirname, join } from 'node:path'

function isToolkit (root) {
  return existsSync(join(root, 'include', 'cuda_runtime_api.h')) &&
    existsSync(join(root, 'lib64', 'libcudart_static.a'))
}

function candidates () {
  const roots = [process.env.CUDA_HOME, process.env.CUDA_PATH, '/usr/local/cuda']
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir !== '' && existsSync(join(dir, 'nvcc'))) roots.push(dirname(dir))
  }
  return roots.filter((root) => typeof root === 'string' && root !== '')
}

const disabled = process.env.AGENTD_CUDA === '0'
process.stdout.write(disabled ? '' : (candidates().find(isToolkit) ?? ''))
