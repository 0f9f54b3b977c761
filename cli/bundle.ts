/**
 * `npm run build:bundle`: the single-file bundles that agentd and agentctl run
 * from as installed (dist/bundle/agentd.js, dist/bundle/agentctl.js), made by
 * esbuild from tsc's output in dist/ (run `npm run build:ts` first).
 *
 * Why a bundle: loading ~1,400 modules costs the agent a second of CPU at
 * start and ~12 MB of resident memory for their records and source text.
 * Identifiers are kept (whitespace and syntax are minified), so stack traces
 * still name the functions.
 *
 * The output is pure ASCII: V8 keeps a script's source for lazy compilation,
 * and one non-ASCII character makes the whole 3 MB source a two-byte string
 * (+3 MB per agent). esbuild escapes strings but not regular expressions, so
 * what is left is written as \uXXXX, which means the same character in a
 * string, a template's cooked value, a regular expression and an identifier.
 * (Not in a template's raw value: the build refuses a String.raw template
 * with non-ASCII text.) Licence comments go to a separate file beside each
 * bundle (*.LEGAL.txt).
 */
import { build } from 'esbuild'
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const dist = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? '../dist/' : '../', import.meta.url))

/** Every character outside ASCII as a \uXXXX escape (UTF-16 code units: astral characters as their surrogate pair). */
function escapeNonAscii (source: string): string {
  return source.replace(/[\x80-\uffff]/g, c => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** A template literal with non-ASCII text would change meaning under String.raw: refuse rather than guess. */
function checkNoRawTemplates (path: string, source: string): void {
  const raw = /String\.raw`[^`]*[\x80-\uffff]/.exec(source)
  if (raw !== null) throw new Error(`${path}: String.raw template with non-ASCII text at offset ${raw.index}: escaping would change it`)
}

const result = await build({
  entryPoints: { agentd: `${dist}agent/main.js`, agentctl: `${dist}cli/agentctl.js` },
  outdir: `${dist}bundle`,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'external',
  logLevel: 'warning',
  write: false,
  // Bundled CommonJS packages call require(); an ES module has none of its own.
  banner: { js: "import { createRequire as bundleCreateRequire } from 'node:module'; const require = bundleCreateRequire(import.meta.url);" },
})
mkdirSync(`${dist}bundle`, { recursive: true })
for (const file of result.outputFiles) {
  if (!file.path.endsWith('.js')) { writeFileSync(file.path, file.contents); continue }
  checkNoRawTemplates(file.path, file.text)
  writeFileSync(file.path, escapeNonAscii(file.text))
  chmodSync(file.path, 0o755)
}
