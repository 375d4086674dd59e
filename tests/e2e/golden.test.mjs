// The server on the golden tiny models (byte-level SPM vocab, no chat
// template): prefix reuse on a pure-attention model (any common prefix) and
// on a hybrid one (qwen35: only when the new prompt extends the whole cached
// sequence, since recurrent state cannot be cut back), and chat through
// --chat-template.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';

import { sourceDir, startServer } from './helpers.mjs';

const golden = process.env.WICK_GOLDEN || path.resolve(sourceDir, '../shared/golden');
const have = fs.existsSync(path.join(golden, 'models/tiny-qwen3-F32.gguf'));
if (!have && process.env.CI === 'true') throw new Error('golden models missing at ' + golden);
const servers = [];
after(async () => {
  for (const s of servers) assert.equal((await s.stop()).code, 0, s.log());
});

async function serve(model, extra = []) {
  const s = await startServer(['-m', path.join(golden, 'models', model), ...extra]);
  servers.push(s);
  return s;
}
const post = (s, p, body) => fetch(s.url + p, { method: 'POST', body: JSON.stringify(body) }).then(async (r) => ({ status: r.status, ...(await r.json()) }));
const complete = (s, prompt) => post(s, '/v1/completions', { prompt, max_tokens: 1, temperature: 0 });

test('pure attention model reuses the longest common token prefix', { skip: !have && 'no golden data' }, async () => {
  const s = await serve('tiny-qwen3-F32.gguf');
  const a = 'The cache keeps this part. Then the two prompts go apart here';
  const b = 'The cache keeps this part. But now something else follows';
  const r1 = await complete(s, a);
  assert.equal(r1.usage.prompt_tokens_details.cached_tokens, 0);
  const r2 = await complete(s, b);
  const ta = (await post(s, '/v1/tokenize', { content: a })).tokens;
  const tb = (await post(s, '/v1/tokenize', { content: b })).tokens;
  let lcp = 0;
  while (lcp < ta.length && lcp < tb.length && ta[lcp] === tb[lcp]) lcp++;
  // The BOS the completion prompt gets adds one shared token in front.
  assert.equal(r2.usage.prompt_tokens, tb.length + 1);
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, lcp + 1);
  assert.equal(r2.timings.recomputed_tokens, r2.usage.prompt_tokens - lcp - 1);
});

test('hybrid model reuses only when the prompt extends the whole cached sequence', { skip: !have && 'no golden data' }, async () => {
  const s = await serve('tiny-qwen35-F32.gguf');
  const base = 'Hello world, this is a test';
  const r1 = await complete(s, base);
  const r2 = await complete(s, base + ' of reuse');
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens);
  const r3 = await complete(s, 'Hello world, this was a test');
  assert.equal(r3.usage.prompt_tokens_details.cached_tokens, 0, 'diverging inside the sequence: no reuse without checkpoints');
  assert.equal(r3.timings.recomputed_tokens, r3.usage.prompt_tokens);
});

test('a model without a chat template serves chat with --chat-template, and says why without it', { skip: !have && 'no golden data' }, async () => {
  const plain = await serve('tiny-qwen3-F32.gguf');
  const no = await post(plain, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  assert.equal(no.status, 400);
  assert.match(no.error.message, /--chat-template/);
  const s = await serve('tiny-qwen3-F32.gguf', ['--chat-template', 'chatml']);
  const r = await post(s, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, temperature: 0 });
  assert.equal(r.status, 200);
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.usage.completion_tokens, 3);
});
