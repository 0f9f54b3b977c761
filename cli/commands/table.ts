/** Plain-text tables and byte sizes for agentctl's human output. */

/** Left-aligned columns separated by two spaces; `rows` are already strings. */
export function formatTable (header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map(r => (r[i] ?? '').length)))
  const line = (cells: readonly string[]): string => cells.map((c, i) => i === cells.length - 1 ? c : c.padEnd(widths[i]!)).join('  ').trimEnd()
  return [line(header), ...rows.map(line)].join('\n')
}

/** 1536 → "1.5 KiB". */
export function formatBytes (bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB']
  let value = bytes
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++ }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value >= 100 ? 0 : 1)} ${units[unit]}`
}

/** 3725.4 → "1h2m5s". */
export function formatDuration (seconds: number): string {
  const s = Math.floor(seconds)
  const h = Math.floor(s / 3600)
  const m = Math.floor((s % 3600) / 60)
  if (h > 0) return `${h}h${m}m${s % 60}s`
  if (m > 0) return `${m}m${s % 60}s`
  return `${seconds.toFixed(1)}s`
}
