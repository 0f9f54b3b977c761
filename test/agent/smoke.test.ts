import t from 'tap'
const x: number = 1
t.equal(x, 1, 'ok')
t.equal(process.version.startsWith('v26'), true, 'node 26')
