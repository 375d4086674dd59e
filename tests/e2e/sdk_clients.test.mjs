// The official SDKs against wick on a golden model (random weights: the
// tests check protocol and behaviour, never words): the `openai` package's
// chat completions and Responses API, and `@anthropic-ai/sdk`'s Messages
// API, streamed and not, with tools, tool_choice, count_tokens and errors.
// Some assert what only constrained decoding makes true on a random-weight
// model: a forced tool call is a valid call of an offered tool with
// schema-valid arguments, json_schema output validates. The golden models'
// vocabularies spell text nearly byte by byte, so a forced call takes ~90
// tokens at least: those requests leave it 160 (within the budget the loop
// closes the answer along the grammar's shortest completion).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { goldenModel, haveGolden, requireGoldenInCi, startServer } from './helpers.mjs';

requireGoldenInCi();
const skip = !haveGolden && 'no golden data';

let srv;
let keyed;
let openai;
let anthropic;

before(async () => {
  if (!haveGolden) return;
  srv = await startServer(['-m', goldenModel('tiny-qwen35-F32.gguf'), '--chat-template', 'qwen35', '--ctx', '4096']);
  keyed = await startServer(['-m', goldenModel('tiny-qwen3-F32.gguf'), '--chat-template', 'qwen3', '--api-key', 'sekrit']);
  openai = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'local', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: srv.url, apiKey: 'local', maxRetries: 0 });
});

after(async () => {
  for (const s of [srv, keyed]) if (s) assert.equal((await s.stop()).code, 0, s.log());
});

const weather = {
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'], additionalProperties: false },
};
const user = (text) => [{ role: 'user', content: text }];

// A minimal JSON Schema check for what the tests' schemas use.
function validates(schema, v) {
  if (schema.type === 'object') {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
    for (const k of schema.required || []) if (!(k in v)) return false;
    for (const [k, x] of Object.entries(v)) {
      const p = (schema.properties || {})[k];
      if (!p) { if (schema.additionalProperties === false) return false; continue; }
      if (!validates(p, x)) return false;
    }
    return true;
  }
  if (schema.type === 'string') return typeof v === 'string';
  if (schema.type === 'integer') return Number.isInteger(v);
  if (schema.type === 'number') return typeof v === 'number';
  if (schema.type === 'boolean') return typeof v === 'boolean';
  if (schema.type === 'array') return Array.isArray(v) && v.every((x) => validates(schema.items || {}, x));
  return true;
}

// ---- OpenAI chat completions ------------------------------------------------------

test('chat: tools offered, answer and usage in OpenAI shape (streamed and not)', { skip }, async () => {
  const params = { model: 'any-name', messages: user('Weather in Oslo?'), tools: [{ type: 'function', function: weather }], max_tokens: 6, temperature: 0 };
  const r = await openai.chat.completions.create(params);
  assert.equal(r.model, 'tiny-qwen35-F32', 'the loaded model answers, under its own id');
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  let finish = null;
  let chunks = 0;
  for await (const ch of await openai.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } })) {
    chunks++;
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.ok(chunks >= 2);
  assert.equal(finish, r.choices[0].finish_reason);
});

test('chat: tool_choice required gives a valid call of an offered tool, streamed as OpenAI deltas', { skip }, async () => {
  const tools = [{ type: 'function', function: weather }];
  const r = await openai.chat.completions.create({ model: 'x', messages: user('Weather?'), tools, tool_choice: 'required', max_tokens: 160 });
  const call = r.choices[0].message.tool_calls?.[0];
  assert.ok(call, 'a tool call');
  assert.equal(call.function.name, 'get_weather');
  assert.ok(validates(weather.parameters, JSON.parse(call.function.arguments)));
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  // streamed: id/type/name in the first fragment, then argument pieces; the SDK's runner reassembles them
  const stream = openai.chat.completions.stream({ model: 'x', messages: user('Weather?'), tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 160 });
  const final = await stream.finalChatCompletion();
  const sc = final.choices[0].message.tool_calls[0];
  assert.equal(sc.function.name, 'get_weather');
  assert.ok(validates(weather.parameters, JSON.parse(sc.function.arguments)));
});

test('chat: response_format json_schema output validates', { skip }, async () => {
  const schema = { type: 'object', properties: { answer: { type: 'string' }, n: { type: 'integer' } }, required: ['answer', 'n'], additionalProperties: false };
  const r = await openai.chat.completions.create({
    model: 'x', messages: user('Reply in JSON.'), max_tokens: 96,
    response_format: { type: 'json_schema', json_schema: { name: 'reply', schema, strict: true } },
  });
  assert.ok(validates(schema, JSON.parse(r.choices[0].message.content)));
});

test('chat: a bad schema or an unknown forced tool is a 400 naming the field', { skip }, async () => {
  await assert.rejects(
    openai.chat.completions.create({ model: 'x', messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'objekt' } } } }),
    (e) => e.status === 400 && e.param === 'response_format.json_schema.schema',
  );
  await assert.rejects(
    openai.chat.completions.create({ model: 'x', messages: user('x'), tools: [{ type: 'function', function: weather }], tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e.status === 400 && e.param === 'tool_choice.function.name',
  );
});

// ---- OpenAI Responses -------------------------------------------------------------

test('responses.create: output items, output_text and usage (not streamed)', { skip }, async () => {
  const r = await openai.responses.create({ model: 'gpt-x', instructions: 'Be brief.', input: 'Hello?', max_output_tokens: 6, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(r.status));
  assert.equal(r.model, 'tiny-qwen35-F32');
  assert.ok(r.output.length >= 1);
  assert.equal(typeof r.output_text, 'string', 'the SDK finds the message text');
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens <= 6);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.store, false);
});

test('responses.create streamed: the event sequence Codex needs, ending in response.completed/incomplete with usage', { skip }, async () => {
  const stream = await openai.responses.create({ model: 'gpt-x', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }], max_output_tokens: 5, stream: true, temperature: 0 });
  const types = [];
  let last;
  const seqs = [];
  for await (const ev of stream) {
    types.push(ev.type);
    seqs.push(ev.sequence_number);
    last = ev;
  }
  assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(types.includes('response.output_item.added') && types.includes('response.output_item.done'));
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)));
  assert.deepEqual(seqs, seqs.map((_, i) => i), 'sequence numbers count the events');
  assert.ok(last.response.usage.input_tokens > 0);
  assert.ok(last.response.output.every((it) => it.status === 'completed'));
});

test('responses: tool_choice required and text.format json_schema are enforced', { skip }, async () => {
  const tool = { type: 'function', ...weather, strict: true };
  const r = await openai.responses.create({ model: 'x', input: 'Weather?', tools: [tool, { type: 'web_search' }], tool_choice: 'required', max_output_tokens: 160 });
  const fc = r.output.find((it) => it.type === 'function_call');
  assert.ok(fc, 'a function_call item');
  assert.equal(fc.name, 'get_weather');
  assert.ok(validates(weather.parameters, JSON.parse(fc.arguments)));
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  const j = await openai.responses.create({ model: 'x', input: 'JSON please', max_output_tokens: 64, text: { format: { type: 'json_schema', name: 'r', schema, strict: true } } });
  assert.ok(validates(schema, JSON.parse(j.output_text)));
});

test('responses: previous_response_id is a clear 400 (nothing is stored)', { skip }, async () => {
  await assert.rejects(
    openai.responses.create({ model: 'x', input: 'again', previous_response_id: 'resp_123' }),
    (e) => e.status === 400 && e.param === 'previous_response_id' && /stores no responses/.test(e.message),
  );
});

// ---- Anthropic Messages ------------------------------------------------------------

test('anthropic messages.create: content blocks, stop_reason and usage', { skip }, async () => {
  const m = await anthropic.messages.create({
    model: 'claude-sonnet-9', max_tokens: 6, temperature: 0, system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
  });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.model, 'tiny-qwen35-F32');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.ok(m.content.length >= 1);
  assert.ok(m.usage.output_tokens <= 6);
  // the same request again: the prefix cache serves it, Anthropic-style accounting
  const again = await anthropic.messages.create({
    model: 'claude-sonnet-9', max_tokens: 6, temperature: 0, system: [{ type: 'text', text: 'Be brief.' }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
  });
  assert.ok(again.usage.cache_read_input_tokens > 0);
  assert.equal(again.usage.input_tokens + again.usage.cache_read_input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('anthropic messages.stream: message_start first, message_stop last, finalMessage assembled', { skip }, async () => {
  const stream = anthropic.messages.stream({ model: 'c', max_tokens: 6, temperature: 0, messages: user('Stream please') });
  const types = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.ok(types.includes('message_delta'));
  assert.ok(['end_turn', 'max_tokens'].includes(final.stop_reason));
  assert.ok(final.usage.output_tokens >= 1);
});

test('anthropic stop_sequences end the turn with stop_reason stop_sequence', { skip }, async () => {
  const base = await anthropic.messages.create({ model: 'c', max_tokens: 16, temperature: 0, thinking: { type: 'disabled' }, messages: user('Count slowly') });
  const text = base.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.ok(text.length >= 4, 'some output to pick a stop string from: ' + JSON.stringify(base.content));
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2);
  const m = await anthropic.messages.create({ model: 'c', max_tokens: 16, temperature: 0, thinking: { type: 'disabled' }, messages: user('Count slowly'), stop_sequences: [stop] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
});

test('anthropic tools: tool_use / tool_result history accepted; count_tokens matches the request', { skip }, async () => {
  const tools = [{ name: 'get_weather', description: weather.description, input_schema: { $schema: 'https://json-schema.org/draft/2020-12/schema', ...weather.parameters } }];
  const messages = [
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: [{ type: 'thinking', thinking: 'I need the tool.', signature: 'x' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: '3 C, snow' }] }] },
  ];
  const count = await anthropic.messages.countTokens({ model: 'c', tools, messages });
  const m = await anthropic.messages.create({ model: 'c', max_tokens: 4, temperature: 0, tools, tool_choice: { type: 'auto' }, messages });
  assert.equal(count.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens, 'count_tokens counts what the request sends');
  const none = await anthropic.messages.countTokens({ model: 'c', tools, tool_choice: { type: 'none' }, messages: user('x') });
  const some = await anthropic.messages.countTokens({ model: 'c', tools, messages: user('x') });
  assert.ok(some.input_tokens > none.input_tokens + 50, 'tool_choice none keeps the tools out of the prompt');
});

test('anthropic tool_choice any / tool gives a valid tool_use block', { skip }, async () => {
  const tools = [{ name: 'get_weather', input_schema: weather.parameters }];
  for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
    const m = await anthropic.messages.create({ model: 'c', max_tokens: 160, tools, tool_choice, messages: user('Weather?') });
    const tu = m.content.find((b) => b.type === 'tool_use');
    assert.ok(tu, 'a tool_use block');
    assert.equal(tu.name, 'get_weather');
    assert.ok(validates(weather.parameters, tu.input));
    assert.equal(m.stop_reason, 'tool_use');
  }
});

test('anthropic errors have Anthropic\'s shape: bad request 400, wrong key 401', { skip }, async () => {
  await assert.rejects(
    anthropic.messages.create({ model: 'c', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
    (e) => e.status === 400 && e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error' && /text only/.test(e.message),
  );
  const bad = new Anthropic({ baseURL: keyed.url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model: 'c', max_tokens: 2, messages: user('x') }),
    (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');
  const good = new Anthropic({ baseURL: keyed.url, apiKey: 'sekrit', maxRetries: 0 });
  const m = await good.messages.create({ model: 'c', max_tokens: 2, messages: user('x') });
  assert.equal(m.type, 'message');
  // the overflow error speaks Anthropic's shape on this route, in OpenAI's words clients recognise
  await assert.rejects(
    anthropic.messages.create({ model: 'c', max_tokens: 4, messages: user('long '.repeat(1200)) }),
    (e) => e.status === 400 && /maximum context length is 4096 tokens/.test(e.message),
  );
});
