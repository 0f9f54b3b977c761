# Minimal "node dir" for node-gyp (passed as --nodedir by the build:native
# script). The addon uses Node-API only, whose headers come from the
# node-api-headers package, so node-gyp needs neither the full Node headers nor
# a network download. This file supplies the build defaults that Node's own
# common.gypi would otherwise provide.
{
  'variables': {
    'target_arch%': 'x64',
    'host_arch%': 'x64',
    'library%': 'shared_library',
    'visibility%': 'hidden',
    'standalone_static_library%': 0,
  },
  'target_defaults': {
    'default_configuration': 'Release',
    'configurations': {
      'Release': {
        'cflags': [ '-O3' ],
      },
      'Debug': {
        'cflags': [ '-O0', '-g' ],
        'defines': [ 'DEBUG' ],
      },
    },
    'cflags': [ '-fPIC', '-pthread', '-Wall', '-Wextra' ],
    'ldflags': [ '-pthread' ],
  },
}
