// End-to-end API tests: the real `openai` SDK against a live `wick serve`
// (synthetic demo model: random weights, so tests check behaviour, not words).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';

import { parsePrometheus, parseSse, sleep, startServer } from './helpers.mjs';

let srv;
let client;
let model;

before(async () => {
  srv = await startServer(['--keepalive-ms', '50', '--max-queue', '64']);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'not-needed-on-loopback', maxRetries: 0, timeout: 300000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, 'server exits cleanly on SIGTERM:\n' + srv.log());
});

const user = (content) => [{ role: 'user', content }];
const greedy = { temperature: 0, wick: { fresh: true } };

test('models lists the served model and says the demo model is synthetic', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].object, 'model');
  assert.match(list.data[0].description, /SYNTHETIC/);
  assert.equal(list.data[0].meta.synthetic, true);
  assert.match(srv.log(), /SYNTHETIC random-weight demo model/);
});

test('non-streamed chat returns content, usage and timings that add up', async () => {
  const r = await client.chat.completions.create({ model, messages: user('Hello, who are you?'), max_tokens: 6, ...greedy });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  const u = r.usage;
  assert.ok(u.prompt_tokens > 5);
  assert.ok(u.completion_tokens >= 1 && u.completion_tokens <= 6);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(u.prompt_tokens_details.cached_tokens, 0, 'fresh request reuses nothing');
  assert.equal(r.timings.recomputed_tokens + r.timings.cached_tokens, u.prompt_tokens);
  assert.equal(r.timings.completion_tokens, u.completion_tokens);
  // the short names the monitor and docs use
  assert.equal(r.timings.prompt_n, u.prompt_tokens);
  assert.equal(r.timings.cached_n, r.timings.cached_tokens);
  assert.equal(r.timings.recomputed_n, r.timings.recomputed_tokens);
  assert.equal(r.timings.decode_n, u.completion_tokens);
  assert.ok(r.timings.prefill_ms > 0 && r.timings.prefill_tok_per_s > 0);
  assert.ok(r.timings.ttft_ms >= r.timings.prefill_ms);
});

test('streamed chat matches the non-streamed answer and ends with usage and [DONE]', async () => {
  const messages = user('Write one short sentence about rivers.');
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 8, ...greedy });
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 8, ...greedy, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let first = true;
  let finish = null;
  let usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.choices.length === 0) {
      usage = chunk.usage;
      continue;
    }
    const d = chunk.choices[0].delta;
    if (first) {
      assert.equal(d.role, 'assistant');
      first = false;
    }
    if (d.content) text += d.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(ids.size, 1, 'one id for the whole stream');
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.ok(usage, 'include_usage sends a final usage chunk');
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, plain.usage.prompt_tokens);
});

test('raw SSE framing: data lines, keep-alive comments during prefill, [DONE] last', async () => {
  const long = 'The quick brown fox jumps over the lazy dog. '.repeat(150);
  const r = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: user(long), max_tokens: 3, stream: true, ...greedy }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const body = await r.text();
  assert.ok(body.endsWith('data: [DONE]\n\n'));
  const sse = parseSse(body);
  assert.ok(sse.done);
  assert.ok(sse.comments > 0, 'a long prefill sends ": keep-alive" comments');
  assert.equal(sse.events.at(-1).choices[0].finish_reason !== null, true);
});

test('a follow-up turn reports cached tokens; fresh bypasses the cache', async () => {
  const q1 = user('Tell me about prefix caches in inference servers.');
  const r1 = await client.chat.completions.create({ model, messages: q1, max_tokens: 6, temperature: 0 });
  const q2 = [...q1, { role: 'assistant', content: r1.choices[0].message.content }, { role: 'user', content: 'And why do they help?' }];
  const r2 = await client.chat.completions.create({ model, messages: q2, max_tokens: 4, temperature: 0 });
  const cached = r2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= r1.usage.prompt_tokens, `cached ${cached} covers the first prompt (${r1.usage.prompt_tokens})`);
  assert.ok(cached < r2.usage.prompt_tokens);
  assert.equal(r2.timings.recomputed_tokens, r2.usage.prompt_tokens - cached);
  assert.equal(r2.timings.checkpoint.pos, cached, 'timings name the state the request resumed from');
  assert.equal(typeof r2.timings.checkpoint.kind, 'string');
  const r3 = await client.chat.completions.create({ model, messages: q2, max_tokens: 2, temperature: 0, wick: { fresh: true } });
  assert.equal(r3.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r3.timings.recomputed_tokens, r3.usage.prompt_tokens);
  // Identical prompt again: everything but the last token is reused.
  const r4 = await client.chat.completions.create({ model, messages: q2, max_tokens: 2, temperature: 0 });
  assert.equal(r4.usage.prompt_tokens_details.cached_tokens, r4.usage.prompt_tokens - 1);
});

test('stop strings cut the answer before the stop text', async () => {
  const messages = user('Count slowly and keep talking.');
  const base = await client.chat.completions.create({ model, messages, max_tokens: 16, ...greedy });
  const text = base.choices[0].message.content;
  assert.ok(text.length >= 4, `need some output to pick a stop string from: ${JSON.stringify(text)}`);
  const at = Math.floor(text.length / 2);
  const stop = text.slice(at, at + 2);
  const cut = text.indexOf(stop);
  const r = await client.chat.completions.create({ model, messages, max_tokens: 16, ...greedy, stop: [stop, 'never-appears-xyz'] });
  assert.equal(r.choices[0].message.content, text.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, 'stop');
  // Same through the stream.
  const s = await client.chat.completions.create({ model, messages, max_tokens: 16, ...greedy, stop, stream: true });
  let streamed = '';
  for await (const ch of s) streamed += ch.choices[0]?.delta?.content || '';
  assert.equal(streamed, text.slice(0, cut));
});

test('the same seed gives the same sampled text; other seeds differ', async () => {
  const ask = (seed) =>
    client.chat.completions
      .create({ model, messages: user('Say something random.'), max_tokens: 10, temperature: 1.5, top_p: 1, top_k: 0, min_p: 0, seed, wick: { fresh: true } })
      .then((r) => r.choices[0].message.content);
  const a = await ask(1234);
  const b = await ask(1234);
  assert.equal(a, b);
  const others = [await ask(1), await ask(2), await ask(3)];
  assert.ok(others.some((o) => o !== a), 'different seeds give different samples');
});

test('tool definitions and a tool-call round trip are accepted and rendered', async () => {
  const tools = [{
    type: 'function',
    function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  }];
  const q = user('What is the weather in Oslo?');
  const plain = await client.chat.completions.create({ model, messages: q, max_tokens: 4, ...greedy });
  const withTools = await client.chat.completions.create({ model, messages: q, tools, tool_choice: 'auto', max_tokens: 4, ...greedy });
  assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 20, 'tool definitions are in the prompt');
  const m = withTools.choices[0].message;
  assert.ok(typeof m.content === 'string' || Array.isArray(m.tool_calls));
  assert.ok(['stop', 'length', 'tool_calls'].includes(withTools.choices[0].finish_reason));
  // Second leg: the assistant called the tool, here is its result.
  const history = [
    ...q,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 3, "sky": "snow"}' },
  ];
  const r = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 4, ...greedy });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.usage.prompt_tokens > withTools.usage.prompt_tokens, 'call and result are rendered');
  // tool_choice none drops the tools from the prompt.
  const none = await client.chat.completions.create({ model, messages: q, tools, tool_choice: 'none', max_tokens: 2, ...greedy });
  assert.equal(none.usage.prompt_tokens, plain.usage.prompt_tokens);
});

test('logit_bias forces or bans tokens', async () => {
  const tok = await fetch(srv.url + '/v1/tokenize', { method: 'POST', body: JSON.stringify({ content: 'Q' }) }).then((r) => r.json());
  assert.equal(tok.tokens.length, 1);
  const q = tok.tokens[0];
  const forced = await client.chat.completions.create({ model, messages: user('anything'), max_tokens: 4, ...greedy, logit_bias: { [q]: 100 } });
  assert.equal(forced.choices[0].message.content, 'QQQQ');
  const base = await client.chat.completions.create({ model, messages: user('anything'), max_tokens: 4, ...greedy });
  const first = (await fetch(srv.url + '/v1/tokenize', { method: 'POST', body: JSON.stringify({ content: base.choices[0].message.content }) }).then((r) => r.json())).tokens[0];
  const banned = await client.chat.completions.create({ model, messages: user('anything'), max_tokens: 4, ...greedy, logit_bias: { [first]: -100 } });
  assert.notEqual(banned.choices[0].message.content, base.choices[0].message.content);
  await assert.rejects(
    client.chat.completions.create({ model, messages: user('x'), max_tokens: 1, logit_bias: { 999999: 5 } }),
    (e) => e.status === 400,
  );
});

test('completions endpoint returns text_completion', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('streamed completions carry text pieces, then usage', async () => {
  const params = { model, prompt: 'The river flows', max_tokens: 6, temperature: 0, wick: { fresh: true } };
  const plain = await client.completions.create(params);
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const ch of stream) {
    assert.equal(ch.object, 'text_completion');
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) text += c.text || '';
  }
  assert.equal(text, plain.choices[0].text);
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
});

test('tokenize and detokenize round-trip, special tokens parsed', async () => {
  const post = (p, b) => fetch(srv.url + p, { method: 'POST', body: JSON.stringify(b) }).then((r) => r.json());
  const t = await post('/v1/tokenize', { content: 'hello <|im_start|>world' });
  assert.ok(t.tokens.length >= 3);
  const d = await post('/v1/detokenize', { tokens: t.tokens });
  assert.equal(d.content, 'hello <|im_start|>world');
  const plain = await post('/v1/tokenize', { content: '<|im_start|>', parse_special: false });
  const special = await post('/v1/tokenize', { content: '<|im_start|>' });
  assert.equal(special.tokens.length, 1);
  assert.ok(plain.tokens.length > 1);
});

test('aborting a stream stops the work; the next request is served promptly', async () => {
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages: user('Go on forever.'), max_tokens: 3000, ignore_eos: true, temperature: 0, stream: true, wick: { fresh: true } },
    { signal: ac.signal },
  );
  let chunks = 0;
  let finished = false;
  try {
    for await (const ch of stream) {
      if (ch.choices[0]?.delta?.content) chunks++;
      if (ch.choices[0]?.finish_reason) finished = true;
      if (chunks >= 2) ac.abort();
    }
  } catch (e) {
    assert.match(String(e.name || e), /Abort/); // the SDK may end the loop quietly or throw an abort error
  }
  assert.ok(chunks >= 2);
  assert.equal(finished, false, 'the stream was cut, not finished');
  const t0 = Date.now();
  const r = await client.chat.completions.create({ model, messages: user('Hi'), max_tokens: 2, temperature: 0 });
  assert.equal(r.choices.length, 1);
  assert.ok(Date.now() - t0 < 15000, 'the aborted generation did not run to max_tokens');
  let state;
  for (let i = 0; i < 50; i++) {
    state = await fetch(srv.url + '/monitor/api/state').then((x) => x.json());
    if (state.recent.some((x) => x.status === 'cancelled')) break;
    await sleep(100);
  }
  assert.ok(state.recent.some((x) => x.status === 'cancelled'), 'the monitor lists the cancelled request');
});

test('a client that leaves during prefill cancels it within a chunk', async () => {
  const long = 'Cancel me while I am still being read by the model. '.repeat(120);
  const ac = new AbortController();
  const r = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: user(long), max_tokens: 3000, ignore_eos: true, stream: true, wick: { fresh: true } }),
    signal: ac.signal,
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const { value } = await reader.read(); // role chunk or keep-alive: the request is running
  assert.ok(value.length > 0);
  ac.abort();
  const t0 = Date.now();
  let state;
  for (let i = 0; i < 150; i++) {
    state = await fetch(srv.url + '/monitor/api/state').then((x) => x.json());
    if (state.active.length === 0 && state.recent[0]?.status === 'cancelled') break;
    await sleep(100);
  }
  assert.equal(state.active.length, 0, 'nothing left running');
  const last = state.recent[0];
  assert.equal(last.status, 'cancelled');
  assert.ok(last.counters.completion_tokens < 3000);
  assert.ok(Date.now() - t0 < 15000);
  const ok = await client.chat.completions.create({ model, messages: user('Still there?'), max_tokens: 2, temperature: 0 });
  assert.equal(ok.choices.length, 1);
});

test('32 concurrent clients are all served (queued, none lost)', async () => {
  const before = parsePrometheus(await fetch(srv.url + '/metrics').then((r) => r.text()));
  const n = 32;
  const results = await Promise.allSettled(
    Array.from({ length: n }, (_, i) =>
      client.chat.completions.create({ model, messages: user(`Client ${i} says hi.`), max_tokens: 2, temperature: 0 })),
  );
  const ok = results.filter((r) => r.status === 'fulfilled').map((r) => r.value);
  assert.equal(ok.length, n, JSON.stringify(results.filter((r) => r.status === 'rejected').map((r) => String(r.reason))));
  assert.equal(new Set(ok.map((r) => r.id)).size, n, 'distinct ids');
  for (const r of ok) assert.ok(r.usage.completion_tokens >= 1);
  const afterM = parsePrometheus(await fetch(srv.url + '/metrics').then((r) => r.text()));
  const done = (m) => m.samples.get('wick_requests_completed_total');
  assert.equal(done(afterM) - done(before), n);
});

test('/metrics is Prometheus text with request, token and histogram series', async () => {
  const r = await fetch(srv.url + '/metrics');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/plain/);
  const m = parsePrometheus(await r.text());
  for (const name of ['wick_cache_refused_total', 'wick_cache_ram_bytes', 'wick_prompt_tokens_total', 'wick_cached_tokens_total', 'wick_recomputed_tokens_total',
    'wick_generated_tokens_total', 'wick_queue_depth', 'wick_cache_hits_total', 'wick_cache_misses_total',
    'wick_prefill_seconds_count', 'wick_decode_seconds_sum'])
    assert.ok(m.samples.has(name), name);
  assert.ok(m.samples.get('wick_http_requests_total{route="chat",status="200"}') > 0);
  assert.equal(m.types.get('wick_prefill_seconds'), 'histogram');
  assert.equal(m.samples.get('wick_prompt_tokens_total'),
    m.samples.get('wick_cached_tokens_total') + m.samples.get('wick_recomputed_tokens_total'));
  assert.ok(m.samples.get('wick_prefill_seconds_bucket{le="+Inf"}') === m.samples.get('wick_prefill_seconds_count'));
});

test('wick measure reports server counters, TTFT, streamed speed and the file hash', async () => {
  const { execFile } = await import('node:child_process');
  const { createHash } = await import('node:crypto');
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const { wickBin } = await import('./helpers.mjs');
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'wick-measure-')), 'prompt.txt');
  fs.writeFileSync(file, 'Measure me: a short document about prefill and decode speed. '.repeat(20));
  const run = (...extra) => new Promise((resolve, reject) =>
    execFile(wickBin(), ['measure', '--url', srv.url, '--file', file, '--max-tokens', '6', '--ignore-eos', '--json', ...extra],
      { timeout: 120000 }, (err, stdout, stderr) => (err ? reject(new Error(stderr || err.message)) : resolve(JSON.parse(stdout)))));
  const a = await run('--fresh');
  assert.equal(a.sha256, createHash('sha256').update(fs.readFileSync(file)).digest('hex'));
  assert.ok(a.prompt_tokens > 100);
  assert.equal(a.cached_tokens, 0);
  assert.equal(a.recomputed_tokens, a.prompt_tokens);
  assert.equal(a.completion_tokens, 6);
  assert.ok(a.prefill_ms > 0 && a.prefill_tok_per_s > 0);
  assert.ok(a.ttft_ms > 0 && a.ttft_ms >= a.server_ttft_ms * 0.5);
  assert.ok(a.stream_tok_per_s > 0);
  assert.equal(a.finish_reason, 'length');
  const b = await run('--show-answer');
  assert.equal(b.cached_tokens, b.prompt_tokens - 1, 'same file again: all but the last token reused');
  assert.equal(typeof b.answer, 'string');
  // Human-readable form names the numbers.
  const text = await new Promise((resolve, reject) =>
    execFile(wickBin(), ['measure', '--url', srv.url, '--file', file, '--max-tokens', '2'], (err, out) => (err ? reject(err) : resolve(out))));
  assert.match(text, /prompt +\d+ tokens: \d+ cached, \d+ recomputed/);
  assert.match(text, /sha256 +[0-9a-f]{64}/);
});
