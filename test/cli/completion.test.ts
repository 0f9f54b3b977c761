// agentctl completion bash: a bash completion script generated from the command table, loaded into a
// real bash and asked to complete command lines the way readline would.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentctlMain, runNode, tempDir } from '../helpers/agent-process.ts'

const bash = spawnSync('bash', ['-c', 'true']).status === 0

t.test('completion needs a shell it knows', async t => {
  const none = await runNode(agentctlMain, ['completion'])
  t.equal(none.code, 2)
  t.match(none.stderr, /^agentctl: completion needs the shell: bash\nusage: agentctl completion SHELL\n/)
  const zsh = await runNode(agentctlMain, ['completion', 'zsh'])
  t.equal(zsh.code, 2)
  t.match(zsh.stderr, /^agentctl: no completion for shell "zsh"; agentctl completes bash/)
})

t.test('the script completes commands, subcommands, flags and their values', { skip: bash ? false : 'no bash here' }, async t => {
  const res = await runNode(agentctlMain, ['completion', 'bash'])
  t.equal(res.code, 0, res.stderr)
  t.match(res.stdout, /^complete -F _agentctl agentctl$/m)
  const dir = tempDir(t)
  const script = join(dir, 'agentctl.bash')
  writeFileSync(script, res.stdout)
  t.equal(spawnSync('bash', ['-n', script]).status, 0, 'bash -n: the script parses')
  writeFileSync(join(dir, 'trace.json'), '{}')

  /** What bash offers for the line, the cursor at its end (a trailing space starts a new word). */
  const complete = (line: string): string[] => {
    const words = line.split(' ')
    const run = spawnSync('bash', ['-c', `source "$0"; COMP_WORDS=("\${@}"); COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)); _agentctl; printf '%s\\n' "\${COMPREPLY[@]}"`, script, ...words], { cwd: dir, encoding: 'utf8' })
    t.equal(run.stderr, '', `no error completing "${line}"`)
    return run.stdout.split('\n').filter(w => w !== '').sort()
  }
  t.same(complete('agentctl we'), ['weights'])
  t.ok(complete('agentctl ').includes('status') && complete('agentctl ').includes('completion') && complete('agentctl ').includes('sim'), 'top-level words')
  t.same(complete('agentctl weights '), ['list', 'publish', 'pull', 'retire'])
  t.same(complete('agentctl sim '), ['placement', 'reward', 'rollout', 'seeding', 'trace'])
  t.same(complete('agentctl rollout '), ['deregister', 'generate', 'register', 'status', 'terminate'])
  t.same(complete('agentctl sim trace '), ['placement', 'reward', 'rollout'])
  t.same(complete('agentctl --socket /tmp/a.sock --json weights p'), ['publish', 'pull'], 'global flags and their values are skipped')
  t.same(complete('agentctl weights publish --mo'), ['--model'])
  t.same(complete('agentctl weights publish --from-'), ['--from-keys', '--from-region', '--from-safetensors'])
  t.ok(complete('agentctl weights publish --').includes('--json'), 'global flags too')
  t.same(complete('agentctl sim placement --trace x.json --policy '), ['all', 'isolated', 'pack', 'spread', 'spread-backfill'])
  t.same(complete('agentctl sim placement --trace tr'), ['trace.json'], 'file values complete file names')
  t.same(complete('agentctl weights publish --model '), [], 'a free value: nothing offered')
  t.same(complete('agentctl jobs submit tr'), ['trace.json'], 'a file argument')
  t.same(complete('agentctl help weights pu'), ['publish', 'pull'], 'help completes command words')
  t.same(complete('agentctl help weights publish --'), ['--help', '--json', '--socket'], 'after help: the global flags')
  t.same(complete('agentctl completion '), ['bash'])
})
