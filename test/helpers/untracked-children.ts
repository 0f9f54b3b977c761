/**
 * Loaded into every test process (package.json "tap"."node-arg"), after tap's
 * own hook. tap's process tracking (@tapjs/processinfo: its coverage, which
 * this suite turns off) rewrites every spawn of a test process so that the
 * child loads tracking too, through NODE_OPTIONS: each agent, agentctl run,
 * engine double or worker a test starts paid for a module-load hook it never
 * used (+0.3 s of CPU per agentctl run, +0.1 s per agent start). Here the
 * spawn hook is taken back and the loader dropped from the environment the
 * children inherit. If a tap version tracks children some other way, this
 * does nothing and they are tracked as before.
 */
const spawnHook = (globalThis as Record<symbol, { listeners?: unknown[] } | undefined>)[Symbol.for('process-on-spawn@*:singletonId')]
if (Array.isArray(spawnHook?.listeners)) spawnHook.listeners.length = 0
const options = process.env.NODE_OPTIONS
if (options !== undefined) {
  const kept = options.split(/\s+/).filter(o => o !== '' && !o.includes('@tapjs/processinfo')).join(' ')
  if (kept === '') delete process.env.NODE_OPTIONS
  else process.env.NODE_OPTIONS = kept
}
