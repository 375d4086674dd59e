// Speculative decoding through the API: the server's --spec default and a request's
// {"wick": {"spec": ...}} give the greedy answer of plain decoding, with the drafts
// counted in timings and /metrics; a source the server does not have is a 400.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';

import { parsePrometheus, startServer } from './helpers.mjs';

let srv;
let client;
let model;

before(async () => {
  srv = await startServer(['--spec', 'ngram']);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 300000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  const r = await srv.stop();
  assert.equal(r.code, 0, 'server exits cleanly on SIGTERM:\n' + srv.log());
});

// repeated text: prompt lookup finds continuations to propose
const messages = [{ role: 'user', content: 'one two three four, one two three four, one two three four, one two' }];
const ask = (wick) =>
  client.chat.completions.create({ model, messages, max_tokens: 48, temperature: 0, ignore_eos: true, wick });

test('a speculative answer is the plain answer, with its drafts in timings', async () => {
  const spec = await ask({ fresh: true });
  const plain = await ask({ fresh: true, spec: 'off' });
  assert.equal(spec.choices[0].message.content, plain.choices[0].message.content);
  assert.equal(spec.usage.completion_tokens, 48);
  assert.equal(spec.timings.draft_source, 'ngram');
  assert.ok(spec.timings.draft_n > 0, 'drafts were proposed');
  assert.ok(spec.timings.draft_n_accepted <= spec.timings.draft_n);
  assert.equal(plain.timings.draft_source, undefined);
  const m = parsePrometheus(await (await fetch(srv.url + '/metrics')).text());
  assert.equal(m.samples.get('wick_draft_tokens_total{source="ngram"}'), spec.timings.draft_n);
  assert.equal(m.samples.get('wick_draft_accepted_total{source="ngram"}'), spec.timings.draft_n_accepted);
});

test('a source the server does not have is a 400 in OpenAI shape', async () => {
  const r = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages, max_tokens: 4, wick: { spec: 'draft' } }),
  });
  assert.equal(r.status, 400);
  const body = await r.json();
  assert.match(body.error.message, /draft model/);
  const bad = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages, max_tokens: 4, wick: { spec: 'eagle' } }),
  });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, 'wick.spec');
});
