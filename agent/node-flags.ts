/**
 * Node.js flags every agentd process runs with. The agent's own objects are
 * few, small and short-lived; bulk data lives outside the V8 heap (the native
 * pool, Buffers). V8's defaults size the heap for throughput instead:
 * - --max-semi-space-size=1: semi-spaces grow to 16+ MiB each by default,
 *   ~25 MB of resident memory for nothing in an idle agent.
 * - --heap-growing-percent=25: the next full collection comes when the old
 *   generation has grown by a quarter (the default lets a small heap grow
 *   several-fold first). At 20 agents an idle agent's live heap is ~30 MB and
 *   the default let it reach 55-60 MB before collecting, and keep the pages:
 *   RSS 115-116 MB with the flag against 119-126 MB without (sampled every 10 s for 90 s), the same CPU
 *   (4.15 % and 4.44 % of a core; test/bench/mesh.bench.ts).
 * They must be on the command line: V8 fixes the heap's configuration when
 * the isolate is created, so setting them from the agent's code is too late.
 *
 * Where agentd is started, these flags and the environment below are passed:
 * the `agentd` wrapper that systemd/install.sh writes, `npm start`
 * (cli/dev-agent.ts), the test harness (test/helpers/agent-process.ts);
 * test/systemd/install.test.ts keeps the wrapper in step with both lists.
 */
export const agentNodeFlags: readonly string[] = ['--max-semi-space-size=1', '--heap-growing-percent=25']

/**
 * Environment defaults of every agentd process (a value already set wins).
 * MALLOC_ARENA_MAX=2: glibc gives each thread that allocates (V8's platform
 * workers, libuv's pool) an arena of its own, up to 8 per core; the agent's
 * native allocations are few and not contended, and two arenas save ~5 MB of
 * resident memory. Read by glibc at process start, so it cannot be set later.
 */
export const agentEnvironment: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' }
