/**
 * Node.js flags every agentd process runs with. V8 sizes the young generation
 * for throughput (semi-spaces growing to 16+ MiB each), which costs an idle
 * agent ~25 MB of resident memory for nothing: its own objects are small and
 * short-lived, and bulk data lives outside the V8 heap (native pool, Buffers).
 * The flag must be on the command line: V8 fixes the young generation's size
 * when the isolate is created, so setting it from the agent's code is too late.
 *
 * Where agentd is started, these flags are passed: the `agentd` wrapper that
 * systemd/install.sh writes, `npm start` (cli/dev-agent.ts), the test harness
 * (test/helpers/agent-process.ts); test/systemd/install.test.ts keeps the
 * wrapper in step with this list.
 */
export const agentNodeFlags: readonly string[] = ['--max-semi-space-size=1']
