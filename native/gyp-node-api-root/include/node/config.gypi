# Read by node-gyp when --nodedir is given; the Node-API-only build needs no
# settings from Node's own build.
{ 'variables': {} }
