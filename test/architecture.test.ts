/**
 * The layout of ../shared DESIGN's "Layout" section, checked on every import
 * of every .ts file under core/, native/, mesh/, agent/ and cli/:
 *
 * - layers: imports only go down cli → agent → mesh, native → core
 *   (core imports none of the others, native only core, mesh only native and
 *   core, agent anything but cli);
 * - rooms inside mesh/: policies/ is pure (core only), sim/ drives the
 *   policies, membership/ is the bottom of the mesh, election/ sits on
 *   membership, control/ (the cluster control plane) may use them all;
 * - agent/client/ speaks wire types only: agent/api/wire/, core/ and node:
 *   builtins, so it can be read and versioned apart from the server;
 * - no cycle between folders (a folder is the directory holding the file:
 *   agent/config, agent/state, mesh/election, cli/commands, …).
 *
 * Imports are found with a regex over `from '…'`, `import '…'`, `import('…')`
 * and `require('…')` after stripping comments; type-only imports count too.
 */
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..')
const layers = ['core', 'native', 'mesh', 'agent', 'cli'] as const
type Layer = typeof layers[number]

/** What each layer may import besides itself (package specifiers are not restricted here). */
const layerAllows: Record<Layer, readonly Layer[]> = {
  core: [],
  native: ['core'],
  mesh: ['native', 'core'],
  agent: ['mesh', 'native', 'core'],
  cli: ['agent', 'mesh', 'native', 'core'],
}

/** Rooms of mesh/ (the first folder under mesh/) and what each may import, inside mesh/ and outside it. */
const meshRooms: Record<string, { mesh: readonly string[], layers: readonly Layer[] }> = {
  policies: { mesh: ['policies'], layers: ['core'] },
  sim: { mesh: ['sim', 'policies'], layers: ['core'] },
  membership: { mesh: ['membership'], layers: ['core', 'native'] },
  election: { mesh: ['election', 'membership'], layers: ['core'] },
  control: { mesh: ['control', 'election', 'membership', 'policies', 'sim'], layers: ['core'] },
}

interface Import {
  /** Importing file, relative to the repository root (posix separators). */
  file: string
  specifier: string
  /** The imported file relative to the root, for relative specifiers; undefined for packages and builtins. */
  target?: string
}

function sourceFiles (dir: string): string[] {
  const out: string[] = []
  for (const entry of readdirSync(join(repoRoot, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && entry.name !== 'build') out.push(...sourceFiles(path))
    } else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) {
      out.push(path)
    }
  }
  return out
}

const importPattern = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*)(['"])([^'"\n]+)\1/g

function importsOf (file: string): Import[] {
  const text = readFileSync(join(repoRoot, file), 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/^\s*\/\/.*$/gm, '')
  const found: Import[] = []
  for (const match of text.matchAll(importPattern)) {
    const specifier = match[2]!
    const target = specifier.startsWith('.')
      ? relative(repoRoot, normalize(join(repoRoot, dirname(file), specifier))).split('\\').join('/')
      : undefined
    found.push({ file, specifier, ...(target !== undefined ? { target } : {}) })
  }
  return found
}

const layerOf = (path: string): Layer | undefined => layers.find(l => path.startsWith(`${l}/`))
const folderOf = (path: string): string => dirname(path)
const describe = (i: Import): string => `${i.file} imports '${i.specifier}'`

const files = layers.flatMap(sourceFiles)
const imports = files.flatMap(importsOf)
/** Imports of one source file by another under the five layers. */
const internal = imports.filter((i): i is Import & { target: string } => i.target !== undefined && layerOf(i.target) !== undefined)

t.test('the scan sees the tree', async t => {
  t.ok(files.length > 100, `${files.length} source files found`)
  t.ok(internal.length > 300, `${internal.length} imports between source files found`)
  for (const layer of layers) t.ok(files.some(f => layerOf(f) === layer), `${layer}/ has source files`)
})

t.test('imports only go down the layers: cli → agent → mesh, native → core', async t => {
  const offending = internal
    .filter(i => {
      const from = layerOf(i.file)!
      const to = layerOf(i.target)!
      return from !== to && !layerAllows[from].includes(to)
    })
    .map(i => `${describe(i)} (${layerOf(i.file)}/ may import only ${layerAllows[layerOf(i.file)!].map(l => `${l}/`).join(', ') || 'itself'})`)
  t.strictSame(offending, [], 'no import goes up or across the layers')
})

t.test('mesh rooms: policies pure, sim over policies, election over membership, control over all', async t => {
  const roomOf = (path: string): string => path.split('/')[1]!
  const offending: string[] = []
  for (const file of files.filter(f => layerOf(f) === 'mesh')) {
    if (meshRooms[roomOf(file)] === undefined || file.split('/').length < 3) offending.push(`${file} is in no room of mesh/ (${Object.keys(meshRooms).join(', ')})`)
  }
  for (const i of internal.filter(i => layerOf(i.file) === 'mesh')) {
    const rule = meshRooms[roomOf(i.file)]
    if (rule === undefined) continue
    const to = layerOf(i.target)!
    const allowed = to === 'mesh' ? rule.mesh.includes(roomOf(i.target)) : rule.layers.includes(to)
    if (!allowed) {
      offending.push(`${describe(i)} (mesh/${roomOf(i.file)}/ may import only ${[...rule.mesh.map(r => `mesh/${r}/`), ...rule.layers.map(l => `${l}/`)].join(', ')})`)
    }
  }
  t.strictSame(offending, [], 'every mesh file is in a room and imports only the rooms below it')
})

t.test('agent/client/ imports only wire types, core/ and node: builtins', async t => {
  const offending = imports
    .filter(i => i.file.startsWith('agent/client/'))
    .filter(i => i.target === undefined
      ? !i.specifier.startsWith('node:')
      : !['agent/client/', 'agent/api/wire/', 'core/'].some(prefix => i.target!.startsWith(prefix)))
    .map(i => `${describe(i)} (the client may import only agent/api/wire/, core/ and node: builtins)`)
  t.strictSame(offending, [], 'the client can be read apart from the server')
})

t.test('no cycle between folders', async t => {
  const edges = new Map<string, Map<string, Array<Import & { target: string }>>>()
  for (const i of internal) {
    const from = folderOf(i.file)
    const to = folderOf(i.target)
    if (from === to) continue
    const out = edges.get(from) ?? new Map<string, Array<Import & { target: string }>>()
    edges.set(from, out)
    out.set(to, [...(out.get(to) ?? []), i])
  }
  // Tarjan's strongly connected components over the folder graph.
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const components: string[][] = []
  const visit = (v: string): void => {
    index.set(v, index.size)
    low.set(v, index.get(v)!)
    stack.push(v)
    onStack.add(v)
    for (const w of edges.get(v)?.keys() ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!))
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        component.push(w)
      } while (w !== v)
      if (component.length > 1) components.push(component.sort())
    }
  }
  for (const folder of [...new Set(files.map(folderOf))].sort()) if (!index.has(folder)) visit(folder)

  // One line per import inside a cycle, each naming the cycle's folders.
  const cycles = components.flatMap(component => {
    const members = new Set(component)
    return component.flatMap(from => [...(edges.get(from) ?? [])]
      .filter(([to]) => members.has(to))
      .flatMap(([to, list]) => list.map(i => `${describe(i)} (${from} → ${to}, in the cycle ${component.join(' ⇄ ')})`)))
  })
  t.strictSame(cycles, [], 'the folders form no cycle')
})
