// The real coding CLIs, headless, against `wick serve` on a golden model:
// Claude Code (Anthropic Messages), Codex (Responses) and qwen-code (chat
// completions). Loopback only: HOME is a fresh temp folder, the CLIs get a
// minimal environment (no proxies, no real keys), every auto-update,
// telemetry, analytics, feedback and plugin feature is off, and each run is
// bounded by a timeout (its whole process group is killed past it).
//
// Settings used (README "Coding CLIs" shows the same):
//   claude -p PROMPT --output-format json, with ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY,
//     DISABLE_AUTOUPDATER=1, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1;
//   codex exec with $CODEX_HOME/config.toml: a model provider whose base_url is
//     wick's /v1 (wire_api "responses"), update check, analytics, feedback, apps,
//     plugins and web search off;
//   qwen --auth-type openai -p PROMPT with OPENAI_BASE_URL, OPENAI_API_KEY,
//     OPENAI_MODEL and ~/.qwen/settings.json turning auto-update, usage statistics
//     and telemetry off.
// To keep CI fast on a byte-level random-weight model the prompts are made
// smaller with each CLI's own options (a short system prompt, fewer tools,
// bundled skills off); the full-size requests are covered by
// agent_shapes.test.mjs. The model's weights are random: it ends its answers
// only if </s> is made likely (--logit-bias) or a cap stops it (--max-tokens;
// Claude Code and Codex take a capped answer as an error, qwen-code does not).
// Claude Code and Codex run on the golden hybrid model with --ctx 16384: it was
// made with a trained context of 4096, smaller than their prompts. qwen-code
// runs as a new user would start: the model wick ships (trained context 16384,
// its own chat template), no --ctx, only the cap on answers.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { GOLDEN_EOS, goldenModel, haveGolden, requestLines, requireGoldenInCi, runBounded, sourceDir, startServer } from './helpers.mjs';

requireGoldenInCi();
const bin = (name) => path.join(sourceDir, 'node_modules/.bin', name);
const haveClis = ['claude', 'codex', 'qwen'].every((n) => fs.existsSync(bin(n)));
if (!haveClis && process.env.CI === 'true') throw new Error('coding CLIs missing in node_modules (run tests/e2e/setup.sh)');
const skip = (!haveGolden && 'no golden data') || (!haveClis && 'coding CLIs not installed (tests/e2e/setup.sh)');
const KEY = 'cli-test-key';

let ended; // ends answers at once: Claude Code and Codex
let capped; // short capped answers of the shipped model: qwen-code needs some text
before(async () => {
  if (skip) return;
  const base = ['-m', goldenModel('tiny-qwen35-F32.gguf'), '--chat-template', 'qwen35', '--ctx', '16384', '--api-key', KEY];
  ended = await startServer([...base, '--logit-bias', `${GOLDEN_EOS}=100`]);
  capped = await startServer(['-m', path.join(sourceDir, 'models/wick-coder.gguf'), '--max-tokens', '8', '--api-key', KEY]);
});
after(async () => {
  for (const s of [ended, capped]) if (s) assert.equal((await s.stop()).code, 0, s.log());
});

// A fresh HOME and working folder, and an environment with nothing from ours
// but PATH (no proxy or key leaks in, and the CLIs' state stays in the temp folder).
function sandbox() {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'wick-cli-home-'));
  const work = path.join(home, 'work');
  fs.mkdirSync(work);
  return { home, work, env: { PATH: process.env.PATH, HOME: home, TMPDIR: os.tmpdir(), LANG: 'C.UTF-8', NO_COLOR: '1' } };
}

const lines = (s) => requestLines(s.log());
// "prompt N (cached C, ..." of a request log line.
const promptOf = (l) => {
  const m = /prompt (\d+) \(cached (\d+)/.exec(l);
  return m ? { prompt: Number(m[1]), cached: Number(m[2]) } : null;
};

test('Claude Code (claude -p) finishes a turn against /v1/messages', { skip, timeout: 300000 }, async () => {
  const sb = sandbox();
  const before = lines(ended).length;
  const r = await runBounded(bin('claude'), ['-p', 'Say hello.', '--output-format', 'json', '--tools', 'Read',
    '--system-prompt', 'You are a coding agent in a test. Answer briefly.'], {
    cwd: sb.work, timeoutMs: 240000,
    env: { ...sb.env, ANTHROPIC_BASE_URL: ended.url, ANTHROPIC_API_KEY: KEY, DISABLE_AUTOUPDATER: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1' },
  });
  assert.equal(r.timedOut, false, 'claude did not finish in time:\n' + r.stdout + r.stderr);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.is_error, false, r.stdout);
  assert.equal(out.subtype, 'success');
  const mine = lines(ended).slice(before);
  assert.ok(mine.length >= 1 && mine.every((l) => /POST \/v1\/messages 200 msg_\S+ \(stream\)/.test(l)), mine.join('\n'));
});

function codexConfig(sb, server) {
  const dir = path.join(sb.home, '.codex');
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'instructions.md'), 'You are a coding agent in a test. Answer briefly.\n');
  fs.writeFileSync(path.join(dir, 'config.toml'), `model = "wick-local"
model_provider = "wick"
check_for_update_on_startup = false
model_instructions_file = "${path.join(dir, 'instructions.md')}"
include_apps_instructions = false
include_collaboration_mode_instructions = false
web_search = "disabled"

[model_providers.wick]
name = "wick"
base_url = "${server.url}/v1"
wire_api = "responses"
env_key = "WICK_API_KEY"

[analytics]
enabled = false

[feedback]
enabled = false

[agents]
enabled = false

[features]
goals = false
apps = false
plugins = false
remote_plugin = false
image_generation = false
view_image = false
browser_use = false
computer_use = false
in_app_updates = false
daemon_auto_start = false
tool_suggest = false
skill_search = false
shell_snapshot = false
`);
  return dir;
}

test('Codex (codex exec) finishes a turn against /v1/responses', { skip, timeout: 300000 }, async () => {
  const sb = sandbox();
  const codexHome = codexConfig(sb, ended);
  const before = lines(ended).length;
  const r = await runBounded(bin('codex'), ['exec', '--skip-git-repo-check', 'Say hello.'], {
    cwd: sb.work, timeoutMs: 240000, env: { ...sb.env, CODEX_HOME: codexHome, WICK_API_KEY: KEY },
  });
  assert.equal(r.timedOut, false, 'codex did not finish in time:\n' + r.stdout + r.stderr);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.doesNotMatch(r.stdout + r.stderr, /^ERROR/m);
  const mine = lines(ended).slice(before);
  assert.ok(mine.length >= 1 && mine.every((l) => /POST \/v1\/responses 200 resp_\S+ \(stream\)/.test(l)), mine.join('\n'));
});

function qwenSettings(sb) {
  const dir = path.join(sb.home, '.qwen');
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'settings.json'), JSON.stringify({
    general: { enableAutoUpdate: false }, privacy: { usageStatisticsEnabled: false }, telemetry: { enabled: false },
    ui: { enableFollowupSuggestions: false }, tools: { eager: ['read_file'] },
    skills: { disabledLevels: ['bundled', 'user', 'project', 'extension'] },
    // built-in tools whose schemas or listing would only lengthen the prompt
    permissions: { deny: ['agent', 'cron_create', 'cron_delete', 'cron_list', 'enter_worktree', 'exit_worktree', 'get_goal',
      'list_agents', 'loop_wakeup', 'read_mcp_resource', 'record_artifact', 'report_findings', 'send_message', 'skill',
      'task_stop', 'update_goal', 'web_fetch', 'zoom_image', 'glob', 'grep_search'] },
    memory: { enableManagedAutoMemory: false, enableManagedAutoDream: false, enableAutoSkill: false },
  }));
}

test('qwen-code (qwen --auth-type openai -p): three runs succeed, the second run\'s main request reuses >= 95 % of its prompt', { skip, timeout: 600000 }, async (t) => {
  const sb = sandbox();
  qwenSettings(sb);
  const firsts = [];
  for (let run = 0; run < 3; run++) {
    const before = lines(capped).length;
    const r = await runBounded(bin('qwen'), ['--auth-type', 'openai', '-p', 'Say hello.', '--output-format', 'json',
      '--system-prompt', 'You are a coding agent in a test. Answer briefly.'], {
      cwd: sb.work, timeoutMs: 240000,
      env: { ...sb.env, OPENAI_BASE_URL: capped.url + '/v1', OPENAI_API_KEY: KEY, OPENAI_MODEL: 'wick-local' },
    });
    assert.equal(r.timedOut, false, `qwen run ${run + 1} did not finish in time:\n` + r.stdout + r.stderr);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const result = JSON.parse(r.stdout).find((e) => e.type === 'result');
    assert.equal(result.is_error, false, r.stdout);
    const mine = lines(capped).slice(before);
    assert.ok(mine.length >= 1 && mine.every((l) => /POST \/v1\/chat\/completions 200 chatcmpl-\S+ \(stream\)/.test(l)), mine.join('\n'));
    firsts.push(promptOf(mine[0]));
  }
  // the context wick chose by itself: the model's trained one, which fits this machine
  assert.match(capped.log(), /context 16384 tokens \(default: the model's trained context 16384/);
  const second = firsts[1];
  t.diagnostic(`main requests: ${firsts.map((f) => `${f.cached}/${f.prompt}`).join(', ')} cached/prompt tokens`);
  assert.ok(second.cached / second.prompt >= 0.95, `run 2 reused ${second.cached} of ${second.prompt}`);
});
