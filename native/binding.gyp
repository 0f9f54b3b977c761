# Build of the agentd native addon (Node-API, C++17).
# Run through `npm run build:native`, which passes --nodedir=gyp-node-api-root
# so node-gyp never downloads Node headers (see that folder's common.gypi).
# CUDA support is compiled in only when find-cuda.mjs finds a toolkit, UCX
# support only when find-ucx.mjs finds libucx (pkg-config ucx).
{
  'variables': {
    'cuda_root%': '<!(node find-cuda.mjs)',
    'ucx_libs%': '<!(node find-ucx.mjs)',
  },
  'targets': [
    {
      'target_name': 'agentd_native',
      'sources': [
        'src/addon.cc',
        'src/capabilities.cc',
        'src/checksum.cc',
        'src/crc32c.cc',
        'src/cuda_ipc.cc',
        'src/direct_file.cc',
        'src/file_lock.cc',
        'src/host_copy.cc',
        'src/host_region.cc',
        'src/native_error.cc',
        'src/task_pool.cc',
        'src/ucx_transport.cc',
        'src/unix_socket.cc',
      ],
      'include_dirs': [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<!(node -p \"require('node-api-headers').include_dir\")",
      ],
      'defines': [
        'NAPI_VERSION=8',
        'NAPI_CPP_EXCEPTIONS',
        'NODE_ADDON_API_DISABLE_DEPRECATED',
        '_GNU_SOURCE',
      ],
      'cflags_cc': [ '-std=c++17', '-fexceptions', '-Wno-missing-field-initializers' ],
      'cflags_cc!': [ '-fno-exceptions', '-fno-rtti' ],
      'conditions': [
        ['cuda_root!=""', {
          'defines': [ 'AGENTD_WITH_CUDA=1' ],
          'include_dirs': [ '<(cuda_root)/include' ],
          # Static runtime: it loads libcuda.so.1 lazily, so the addon still
          # loads (and reports why CUDA is unavailable) on a machine without
          # the driver, and needs no library path at run time.
          'libraries': [ '<(cuda_root)/lib64/libcudart_static.a', '-ldl', '-lrt' ],
        }],
        ['ucx_libs!=""', {
          'defines': [ 'AGENTD_WITH_UCX=1' ],
          # uct is asked directly for the machine's transports (capabilities).
          'libraries': [ '<(ucx_libs)', '-luct' ],
        }],
      ],
    },
  ],
}
