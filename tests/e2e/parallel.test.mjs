// --parallel: 16 concurrent streaming clients of mixed prompt lengths at temperature
// 0 against a server that runs them in shared batched steps (prompt chunks beside
// decode tokens), some of them cancelled mid-stream and some resuming a cached
// prefix; every stream that completes equals, delta for delta, what a --parallel 1
// server streams for the same request sent alone. On the golden tiny models: a
// hybrid one (recurrent state: cache hits copy a checkpoint) and a pure-attention one.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { goldenModel, haveGolden, parseSse, requireGoldenInCi, startServer } from './helpers.mjs';

requireGoldenInCi();
const servers = [];
after(async () => {
  for (const s of servers) assert.equal((await s.stop()).code, 0, s.log());
});

const N_CLIENTS = 16;
const CANCELLED = new Set([3, 8, 13]);
// Prompts that start with a distinct byte share only the BOS with each other; the
// "hit" ones extend the warm-up prompt (cached before the burst) with a distinct byte.
const WARM = 'Shared system preamble that every hit resumes from: ' + 'lorem ipsum '.repeat(6);
const HITS = new Set([2, 6, 10, 14]);
function prompt(i) {
  const lead = String.fromCharCode(65 + i);
  const body = `${lead}${i} words `.repeat(2 + ((i * 7) % 16) * 3); // 2..47 repeats: 10..300 tokens
  return HITS.has(i) ? WARM + lead + ' ' + body.slice(0, 40) : lead + ' ' + body;
}

// One streaming completion: its delta texts, finish reason and usage.
async function stream(s, i, { cancelAfterFirst = false } = {}) {
  const ac = new AbortController();
  const r = await fetch(s.url + '/v1/completions', {
    method: 'POST',
    signal: ac.signal,
    body: JSON.stringify({ prompt: prompt(i), max_tokens: 24, temperature: 0, stream: true,
      stream_options: { include_usage: true } }),
  });
  assert.equal(r.status, 200);
  if (cancelAfterFirst) {
    const reader = r.body.getReader();
    await reader.read();
    ac.abort();
    return null;
  }
  const { events, done } = parseSse(await r.text());
  assert.ok(done, `stream ${i} ended without [DONE]`);
  const deltas = [];
  let finish = null;
  let usage = null;
  for (const e of events) {
    if (e.usage) usage = e.usage;
    for (const c of e.choices || []) {
      if (c.text) deltas.push(c.text);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { deltas, finish, completion_tokens: usage && usage.completion_tokens, cached: usage && usage.prompt_tokens_details.cached_tokens };
}

const warm = (s) => fetch(s.url + '/v1/completions', {
  method: 'POST', body: JSON.stringify({ prompt: WARM, max_tokens: 1, temperature: 0 }),
}).then((r) => r.json());

async function check(model) {
  const common = ['-m', goldenModel(model), '-t', '2', '-c', '1024', '--ubatch', '16', '--cache-slots', '24'];
  const seq = await startServer([...common, '--parallel', '1']);
  const par = await startServer([...common, '--parallel', String(N_CLIENTS)]);
  servers.push(seq, par);
  await warm(seq);
  await warm(par);
  const expected = [];
  for (let i = 0; i < N_CLIENTS; i++) expected.push(CANCELLED.has(i) ? null : await stream(seq, i));
  const got = await Promise.all([...Array(N_CLIENTS).keys()].map((i) => stream(par, i, { cancelAfterFirst: CANCELLED.has(i) })));
  let hits = 0;
  for (let i = 0; i < N_CLIENTS; i++) {
    if (CANCELLED.has(i)) continue;
    assert.deepEqual(got[i], expected[i], `${model}: stream ${i} differs from its --parallel 1 result`);
    assert.equal(got[i].completion_tokens, 24);
    if (HITS.has(i)) {
      assert.ok(got[i].cached > 0, `${model}: stream ${i} should resume the cached preamble`);
      hits++;
    }
  }
  assert.equal(hits, HITS.size);
  // the server is still well: a request after the burst (and the cancellations) gives
  // the same answer (from its cached prompt now)
  const again = await stream(par, 0);
  assert.deepEqual([again.deltas, again.finish], [expected[0].deltas, expected[0].finish]);
}

test('16 concurrent streams equal their sequential results (hybrid model)', { skip: !haveGolden && 'no golden data' }, async () => {
  await check('tiny-qwen35-F32.gguf');
});

test('16 concurrent streams equal their sequential results (pure attention model)', { skip: !haveGolden && 'no golden data' }, async () => {
  await check('tiny-qwen3-Q8_0.gguf');
});

// Under --parallel each token's host work (sampling, the grammar's mask, stop strings, the
// client's events) runs beside the other sequences' (generate.c): 8 concurrent chat streams,
// each with its own sampler state (seeded temperature with top-p and a presence penalty, a
// logit bias, a stop string, a json_schema grammar), equal what each gives alone.
const SCHEMA = { type: 'object', properties: { answer: { type: 'string' }, n: { type: 'integer' } },
  required: ['answer', 'n'], additionalProperties: false };
function chatBody(i) {
  const body = { messages: [{ role: 'user', content: `Request ${i}: ` + 'tell me more '.repeat(1 + i) }],
    max_tokens: 40, stream: true, stream_options: { include_usage: true } };
  switch (i % 4) {
    case 0: return { ...body, temperature: 0.9, top_p: 0.9, presence_penalty: 0.5, seed: 1000 + i };
    case 1: return { ...body, temperature: 0, logit_bias: { 65: 5, 66: -100 }, stop: ['e '] };
    case 2: return { ...body, temperature: 0, max_tokens: 120,
      response_format: { type: 'json_schema', json_schema: { name: 'reply', schema: SCHEMA, strict: true } } };
    default: return { ...body, temperature: 0.7, top_k: 20, seed: 2000 + i };
  }
}

async function chatStream(s, i) {
  const r = await fetch(s.url + '/v1/chat/completions', { method: 'POST', body: JSON.stringify(chatBody(i)) });
  assert.equal(r.status, 200);
  const { events, done } = parseSse(await r.text());
  assert.ok(done, `chat stream ${i} ended without [DONE]`);
  let text = '';
  let finish = null;
  let tokens = null;
  for (const e of events) {
    if (e.usage) tokens = e.usage.completion_tokens;
    for (const c of e.choices || []) {
      if (c.delta && c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, tokens };
}

test('8 concurrent chat streams with their own samplers, stops and grammars equal each alone', { skip: !haveGolden && 'no golden data' }, async () => {
  const common = ['-m', goldenModel('tiny-qwen3-Q8_0.gguf'), '--chat-template', 'qwen3', '-t', '2', '-c', '2048',
    '--ubatch', '32'];
  const seq = await startServer([...common, '--parallel', '1']);
  const par = await startServer([...common, '--parallel', '8']);
  servers.push(seq, par);
  const expected = [];
  for (let i = 0; i < 8; i++) expected.push(await chatStream(seq, i));
  const got = await Promise.all([...Array(8).keys()].map((i) => chatStream(par, i)));
  for (let i = 0; i < 8; i++) assert.deepEqual(got[i], expected[i], `chat stream ${i} differs from its --parallel 1 result`);
  for (const i of [2, 6]) {
    const out = JSON.parse(got[i].text);
    assert.equal(typeof out.answer, 'string');
    assert.ok(Number.isInteger(out.n));
  }
});
