// Request bodies shaped like the ones the Codex and Claude Code CLIs send
// (issue 23's captures, rewritten), on a hybrid golden model whose prefix
// cache resumes from checkpoints: a two-turn tool round trip reuses >= 95 %
// of the second turn's prompt on both APIs. Raw HTTP, so every header and
// field is the test's own.
import assert from 'node:assert/strict';
import zlib from 'node:zlib';
import { after, before, test } from 'node:test';

import { GOLDEN_EOS, goldenModel, haveGolden, requireGoldenInCi, startServer } from './helpers.mjs';

requireGoldenInCi();
const skip = !haveGolden && 'no golden data';

let srv;
before(async () => {
  if (!haveGolden) return;
  srv = await startServer(['-m', goldenModel('tiny-qwen35-F32.gguf'), '--chat-template', 'qwen35', '--ctx', '16384', '--api-key', 'agent-key',
    // random weights rarely say </s>: this bias ends answers after a few tokens, as a real model would
    '--logit-bias', `${GOLDEN_EOS}=6`]);
});
after(async () => {
  if (srv) assert.equal((await srv.stop()).code, 0, srv.log());
});

// SSE with "event:" lines (both APIs name their events).
function namedEvents(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    const ev = /^event: (.+)$/m.exec(block);
    const data = /^data: (.+)$/m.exec(block);
    if (data) out.push({ event: ev ? ev[1] : null, data: JSON.parse(data[1]) });
  }
  return out;
}

const fn = (name, props) => ({ type: 'function', name, description: `The ${name} tool.`, strict: false,
  parameters: { type: 'object', properties: props, required: Object.keys(props), additionalProperties: false } });

// ---- Codex CLI: POST /v1/responses ---------------------------------------------

const codexDeveloper = 'You are a coding agent running in a terminal harness. Follow the repository conventions. '.repeat(50);
const codexTools = [
  fn('exec_command', { cmd: { type: 'string' }, workdir: { type: 'string' } }),
  fn('write_stdin', { session_id: { type: 'integer' }, chars: { type: 'string' } }),
  fn('apply_patch', { input: { type: 'string' } }),
  fn('view_image', { path: { type: 'string' } }),
  fn('update_plan', { plan: { type: 'array', items: { type: 'string' } } }),
  fn('request_user_input', { question: { type: 'string' } }),
  fn('get_goal', { id: { type: 'string' } }),
  { type: 'namespace', name: 'multi_agent', description: 'Sub-agents.', tools: [
    fn('spawn_agent', { task: { type: 'string' } }), fn('send_input', { id: { type: 'string' }, text: { type: 'string' } }),
    fn('wait', { id: { type: 'string' } }), fn('close_agent', { id: { type: 'string' } }), fn('list_agents', {}),
  ] },
  { type: 'web_search', external_web_access: false },
];

function codexBody(input) {
  return {
    model: 'gpt-5.5-codex', instructions: null, input, tools: codexTools, tool_choice: 'auto', parallel_tool_calls: true,
    reasoning: { summary: 'auto' }, store: false, stream: true, include: ['reasoning.encrypted_content'],
    prompt_cache_key: '0199-session', text: { verbosity: 'low' }, client_metadata: { 'x-codex-turn': 't1' },
  };
}

async function postResponses(body, { gzip = false } = {}) {
  const json = Buffer.from(JSON.stringify(body));
  const r = await fetch(srv.url + '/v1/responses', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer agent-key', 'accept-encoding': 'zstd,gzip',
      ...(gzip ? { 'Content-Encoding': 'gzip' } : {}) },
    body: gzip ? zlib.gzipSync(json) : json,
  });
  assert.equal(r.status, 200, await r.clone().text());
  return namedEvents(await r.text());
}

test('Codex-shaped two-turn tool round trip: the full event sequence, and turn 2 reuses >= 95 % of its prompt', { skip }, async (t) => {
  const turn1Input = [
    { type: 'message', id: 'msg_dev', role: 'developer', content: [{ type: 'input_text', text: codexDeveloper }] },
    { type: 'message', id: 'msg_env', role: 'user', content: [{ type: 'input_text', text: '<environment_context><cwd>/work</cwd></environment_context>' }] },
    { type: 'message', id: 'msg_u1', role: 'user', content: [{ type: 'input_text', text: 'List the files here.' }] },
  ];
  const ev1 = await postResponses(codexBody(turn1Input));
  const names = ev1.map((e) => e.event);
  assert.deepEqual(names.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(names.includes('response.output_item.added'));
  assert.ok(names.includes('response.output_item.done'), 'Codex needs output_item.done with the whole item');
  assert.equal(names.at(-1), 'response.completed', 'Codex retries without response.completed');
  const done1 = ev1.at(-1).data.response;
  assert.match(done1.id, /^resp_/);
  assert.ok(done1.usage.input_tokens > 3000);
  // every event's data says its own type, sequence numbers count from 0
  ev1.forEach((e, i) => {
    assert.equal(e.data.type, e.event);
    assert.equal(e.data.sequence_number, i);
  });
  const itemsDone = ev1.filter((e) => e.event === 'response.output_item.done').map((e) => e.data.item);
  assert.deepEqual(itemsDone.map((i) => i.id), done1.output.map((i) => i.id));

  // turn 2: the history comes back with a function call and its output (what
  // Codex re-sends after running a tool), gzip-compressed this time
  const turn2Input = [
    ...turn1Input,
    ...done1.output,
    { type: 'function_call', id: 'fc_1', call_id: 'call_ls', name: 'exec_command', arguments: '{"cmd":"ls","workdir":"/work"}' },
    { type: 'function_call_output', call_id: 'call_ls', output: 'a.c\nb.c\nREADME.md' },
  ];
  const ev2 = await postResponses(codexBody(turn2Input), { gzip: true });
  assert.equal(ev2.at(-1).event, 'response.completed');
  const u = ev2.at(-1).data.response.usage;
  const reuse = u.input_tokens_details.cached_tokens / u.input_tokens;
  t.diagnostic(`turn 2 reused ${u.input_tokens_details.cached_tokens} of ${u.input_tokens} prompt tokens`);
  assert.ok(reuse >= 0.95, `turn 2 reused ${u.input_tokens_details.cached_tokens} of ${u.input_tokens} (${(100 * reuse).toFixed(1)} %)`);
  assert.match(await srv.waitLog(/POST \/v1\/responses 200 resp_/), /POST \/v1\/responses 200 resp_\S+ \(stream\), prompt \d+ \(cached \d+/);
});

test('Responses errors: 401 without the key, 400 in OpenAI shape for a bad item', { skip }, async () => {
  const no = await fetch(srv.url + '/v1/responses', { method: 'POST', body: '{"input":"x"}' });
  assert.equal(no.status, 401);
  const bad = await fetch(srv.url + '/v1/responses', {
    method: 'POST', headers: { Authorization: 'Bearer agent-key' },
    body: JSON.stringify({ input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '[1, 2]' }] }),
  });
  assert.equal(bad.status, 400);
  const e = (await bad.json()).error;
  assert.equal(e.param, 'input[0].arguments');
  assert.equal(e.type, 'invalid_request_error');
});

// ---- Claude Code: POST /v1/messages?beta=true ---------------------------------------

const claudeSystem = [
  { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.0; cc_entrypoint=sdk-cli;' },
  { type: 'text', text: 'You are Claude Code, a coding agent.', cache_control: { type: 'ephemeral' } },
  { type: 'text', text: 'Use the tools to inspect and change the repository. '.repeat(100), cache_control: { type: 'ephemeral' } },
];
const schemaOf = (props) => ({ $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object', properties: props,
  required: Object.keys(props), additionalProperties: false });
const claudeTools = [
  { name: 'Bash', description: 'Run a shell command. '.repeat(10), input_schema: schemaOf({ command: { type: 'string' }, timeout: { type: 'number' } }) },
  { name: 'Read', description: 'Read a file. '.repeat(10), input_schema: schemaOf({ file_path: { type: 'string' } }) },
  { name: 'Edit', description: 'Edit a file. '.repeat(10), input_schema: schemaOf({ file_path: { type: 'string' }, old_string: { type: 'string' }, new_string: { type: 'string' } }) },
  { name: 'Write', description: 'Write a file. '.repeat(10), input_schema: schemaOf({ file_path: { type: 'string' }, content: { type: 'string' } }) },
];

function claudeBody(messages) {
  return {
    model: 'claude-opus-4-7', max_tokens: 32000, stream: true, system: claudeSystem, messages, tools: claudeTools,
    thinking: { type: 'adaptive' }, output_config: { effort: 'medium' }, context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    metadata: { user_id: '{"device_id":"d","session_id":"s"}' }, temperature: 1,
  };
}

async function postMessages(body) {
  const r = await fetch(srv.url + '/v1/messages?beta=true', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'agent-key', 'anthropic-version': '2023-06-01',
      'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27' },
    body: JSON.stringify(body),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return namedEvents(await r.text());
}

test('Claude-Code-shaped two-turn tool round trip: HEAD /, the event stream, and turn 2 reuses >= 95 % of its prompt', { skip }, async (t) => {
  const head = await fetch(srv.url + '/', { method: 'HEAD' });
  assert.equal(head.status, 200);
  const messages1 = [
    { role: 'user', content: [{ type: 'text', text: '<system-reminder>Project notes.</system-reminder>' },
      { type: 'text', text: 'Fix the failing test.', cache_control: { type: 'ephemeral' } }] },
    { role: 'system', content: [{ type: 'text', text: 'Skills and reminders for this session. '.repeat(20), cache_control: { type: 'ephemeral' } }] },
  ];
  // max_tokens far beyond the context: clamped, never refused
  const ev1 = await postMessages({ ...claudeBody(messages1), max_tokens: 12 });
  const names = ev1.map((e) => e.event);
  assert.equal(names[0], 'message_start', 'Claude Code retries without streaming otherwise');
  assert.ok(names.includes('message_delta'));
  assert.equal(names.at(-1), 'message_stop');
  const delta = ev1.find((e) => e.event === 'message_delta').data;
  assert.ok(['end_turn', 'max_tokens'].includes(delta.delta.stop_reason));
  assert.ok(delta.usage.input_tokens + delta.usage.cache_read_input_tokens > 3000);
  // the answer as Claude Code puts it back into the history
  const blocks = [];
  for (const e of ev1) {
    if (e.event === 'content_block_start') blocks.push({ ...e.data.content_block });
    if (e.event === 'content_block_delta') {
      const b = blocks[e.data.index];
      if (e.data.delta.type === 'text_delta') b.text += e.data.delta.text;
      if (e.data.delta.type === 'thinking_delta') b.thinking += e.data.delta.thinking;
    }
  }
  const messages2 = [
    ...messages1,
    { role: 'assistant', content: [...blocks, { type: 'tool_use', id: 'toolu_01', name: 'Bash', input: { command: 'make test', timeout: 60 } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: 'FAIL: test_parse (1 of 12)' }] },
  ];
  const ev2 = await postMessages({ ...claudeBody(messages2), max_tokens: 12 });
  assert.equal(ev2.at(-1).event, 'message_stop');
  const u = ev2.find((e) => e.event === 'message_delta').data.usage;
  const total = u.input_tokens + u.cache_read_input_tokens;
  const reuse = u.cache_read_input_tokens / total;
  t.diagnostic(`turn 2 reused ${u.cache_read_input_tokens} of ${total} prompt tokens`);
  assert.ok(reuse >= 0.95, `turn 2 reused ${u.cache_read_input_tokens} of ${total} (${(100 * reuse).toFixed(1)} %)`);
});

test('Anthropic errors in Anthropic\'s shape; the log names each with its reason', { skip }, async () => {
  const r = await fetch(srv.url + '/v1/messages', {
    method: 'POST', headers: { 'x-api-key': 'agent-key' },
    body: JSON.stringify({ model: 'c', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] }),
  });
  assert.equal(r.status, 400);
  const j = await r.json();
  assert.equal(j.type, 'error');
  assert.equal(j.error.type, 'invalid_request_error');
  assert.match(j.error.message, /^messages\[0\]\.content\[0\]\.tool_use_id: must be a string/);
  const unauth = await fetch(srv.url + '/v1/messages', { method: 'POST', headers: { 'x-api-key': 'nope' }, body: '{}' });
  assert.equal(unauth.status, 401);
  assert.equal((await unauth.json()).error.type, 'authentication_error');
  assert.match(srv.log(), /POST \/v1\/messages 400: messages\[0\]\.content\[0\]\.tool_use_id: must be a string/);
  assert.match(await srv.waitLog(/POST \/v1\/messages 401/), /POST \/v1\/messages 401: Invalid or missing API key/);
});
