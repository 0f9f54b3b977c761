/**
 * Node.js flags every agentd process runs with. V8 sizes the young generation
 * for throughput (semi-spaces growing to 16+ MiB each), which costs an idle
 * agent ~25 MB of resident memory for nothing: its own objects are small and
 * short-lived, and bulk data lives outside the V8 heap (native pool, Buffers).
 * The flag must be on the command line: V8 fixes the young generation's size
 * when the isolate is created, so setting it from the agent's code is too late.
 *
 * Where agentd is started, these flags and the environment below are passed:
 * the `agentd` wrapper that systemd/install.sh writes, `npm start`
 * (cli/dev-agent.ts), the test harness (test/helpers/agent-process.ts);
 * test/systemd/install.test.ts keeps the wrapper in step with both lists.
 */
export const agentNodeFlags: readonly string[] = ['--max-semi-space-size=1']

/**
 * Environment defaults of every agentd process (a value already set wins).
 * MALLOC_ARENA_MAX=2: glibc gives each thread that allocates (V8's platform
 * workers, libuv's pool) an arena of its own, up to 8 per core; the agent's
 * native allocations are few and not contended, and two arenas save ~5 MB of
 * resident memory. Read by glibc at process start, so it cannot be set later.
 */
export const agentEnvironment: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' }
