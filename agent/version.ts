/** The agent's version, from package.json (one source of truth). */
import { readFileSync } from 'node:fs'

const packageJson = new URL('../../package.json', import.meta.url)

function readVersion (): string {
  // Source runs from agent/, the build from dist/agent/ and its bundle from dist/bundle/:
  // look one level further up if needed.
  for (const url of [new URL('../package.json', import.meta.url), packageJson]) {
    try {
      const parsed = JSON.parse(readFileSync(url, 'utf8')) as { name?: string, version?: string }
      if (parsed.name === 'agentd' && typeof parsed.version === 'string') return parsed.version
    } catch {}
  }
  return '0.0.0-unknown'
}

export const agentVersion = readVersion()
