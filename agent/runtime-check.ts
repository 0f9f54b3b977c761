/**
 * Imported first by the entry points: refuses to run on a Node.js older than
 * the project's runtime with a message that says which binary to use.
 */
const major = Number(process.versions.node.split('.')[0])
if (major < 24) {
  process.stderr.write(`agentd needs Node.js >= 24 but runs on ${process.version} (${process.execPath}).\n` +
    'Use the runtime the project installs: npx agentd / npx agentctl, or node_modules/.bin/node.\n')
  process.exit(78)
}
export {}
