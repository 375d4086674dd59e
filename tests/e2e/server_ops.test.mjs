// Operating the server: a port of its own (a busy one is refused, naming
// the process holding it; --port 0 picks one and prints it), the startup
// lines, one log line per request with its reason (text and JSON), and the
// model names a request may use (--alias, --strict-model-id).
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { cacheDir, goldenModel, haveGolden, requestLines, requireGoldenInCi, runBounded, startServer, wickBin } from './helpers.mjs';

requireGoldenInCi();
const skip = !haveGolden && 'no golden data';
const servers = [];
after(async () => {
  for (const s of servers) assert.equal((await s.stop()).code, 0, s.log());
});
async function serve(args, opts) {
  const s = await startServer(args, opts);
  servers.push(s);
  return s;
}
const model = () => ['-m', goldenModel('tiny-qwen3-F32.gguf'), '--chat-template', 'qwen3'];
const chat = (s, body, headers = {}) =>
  fetch(s.url + '/v1/chat/completions', { method: 'POST', headers, body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, ...body }) });

test('--port 0 prints the port it picked; a second server on a busy port is refused, naming the port and its holder', { skip }, async () => {
  const first = await serve(model());
  assert.match(first.log(), new RegExp(`listening on http://127\\.0\\.0\\.1:${first.port} `));
  const r = await runBounded(wickBin(), ['serve', ...model(), '--port', String(first.port), '-t', '1'],
    { env: { ...process.env, XDG_CACHE_HOME: cacheDir() }, timeoutMs: 60000 });
  assert.notEqual(r.code, 0, 'refused, not shared');
  assert.match(r.stderr, new RegExp(`wick serve: not ready: port: 127\\.0\\.0\\.1:${first.port} is in use by pid ${first.proc.pid} \\(wick\\); pick another --port \\(nothing was stopped\\)`));
  assert.doesNotMatch(r.stderr, /listening on/);
  // the first server is untouched and still answers
  assert.equal((await chat(first, {})).status, 200);
});

test('startup lines name the chat template, the context and why, KV type, attention policy and cache', { skip }, async () => {
  const s = await serve([...model(), '--ctx', '2048', '--kv-type', 'q8_0']);
  const log = s.log();
  assert.match(log, /model 'tiny-qwen3-F32' \(qwen3, F32\), chat template qwen3 \(--chat-template\)/);
  assert.match(log, /context 2048 tokens \(--ctx; the model was trained for 4096\)/);
  assert.match(log, /KV cache q8_0, attention dense/);
  assert.match(log, /prefix cache: slots 4, RAM 2\.00 GiB, no disk archive \(--cache-dir DIR\)/);
});

test('one log line per request: method, route, status, the reason of refusals, counters of generations', { skip }, async () => {
  const s = await serve(model());
  await chat(s, { temperature: 'hot' });
  await chat(s, { messages: [{ role: 'user', content: 'x' }, { role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: 'nope' } }] }] });
  await fetch(s.url + '/v1/nothing');
  const ok = await (await chat(s, { temperature: 0 })).json();
  const lines = requestLines(await s.waitLog((log) => requestLines(log).filter((l) => / 40[04]/.test(l) || l.includes(ok.id)).length >= 4));
  assert.ok(lines.some((l) => /POST \/v1\/chat\/completions 400: 'temperature' must be a number, got a string/.test(l)), lines.join('\n'));
  assert.ok(lines.some((l) => /POST \/v1\/chat\/completions 400: messages\[1\]\.tool_calls\[0\]\.function\.arguments: must be a JSON object/.test(l)));
  assert.ok(lines.some((l) => /GET \/v1\/nothing 404: no such route/.test(l)));
  const gen = lines.find((l) => l.includes(ok.id));
  assert.match(gen, /POST \/v1\/chat\/completions 200 chatcmpl-\S+, prompt \d+ \(cached \d+, recomputed \d+\), ttft [\d.]+ ms, \d+ tokens [\d.]+ tok\/s, finish (stop|length)/);
  assert.equal(lines.filter((l) => l.includes(ok.id)).length, 1, 'exactly one line for the request');
});

test('--log-format json: every line is a JSON object; request lines carry the fields', { skip }, async () => {
  const s = await serve([...model(), '--log-format', 'json']);
  const r = await (await chat(s, { temperature: 0 })).json();
  await chat(s, { max_tokens: 0 });
  const objs = (await s.waitLog(/"status":400/)).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  assert.ok(objs.length >= 5);
  for (const o of objs) {
    assert.match(o.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(['debug', 'info', 'warn', 'error'].includes(o.level));
    assert.equal(typeof o.msg, 'string');
  }
  assert.ok(objs.some((o) => /listening on http:/.test(o.msg)));
  const line = objs.find((o) => o.event === 'request' && o.id === r.id);
  assert.equal(line.method, 'POST');
  assert.equal(line.path, '/v1/chat/completions');
  assert.equal(line.route, 'chat');
  assert.equal(line.status, 200);
  assert.equal(line.prompt_tokens, r.usage.prompt_tokens);
  assert.equal(line.cached_tokens + line.recomputed_tokens, r.usage.prompt_tokens);
  assert.equal(line.finish_reason, r.choices[0].finish_reason);
  const refused = objs.find((o) => o.event === 'request' && o.status === 400);
  assert.match(refused.reason, /'max_tokens' must be between 1/);
});

test('model names: any name is answered by the loaded model; --strict-model-id accepts only the id and its aliases', { skip }, async () => {
  const loose = await serve([...model(), '--alias', 'tiny', '--alias', 'tiny-also']);
  const models = await (await fetch(loose.url + '/v1/models')).json();
  assert.equal(models.data[0].id, 'tiny');
  assert.deepEqual(models.data[0].aliases, ['tiny', 'tiny-also']);
  const any = await (await chat(loose, { model: 'gpt-4o' })).json();
  assert.equal(any.model, 'tiny');
  const strict = await serve([...model(), '--alias', 'tiny', '--alias', 'tiny-also', '--strict-model-id']);
  assert.equal((await chat(strict, { model: 'tiny-also' })).status, 200);
  const refused = await chat(strict, { model: 'gpt-4o' });
  assert.equal(refused.status, 404);
  assert.equal((await refused.json()).error.code, 'model_not_found');
  assert.equal((await fetch(strict.url + '/v1/models/tiny-also')).status, 200);
  assert.equal((await fetch(strict.url + '/v1/models/gpt-4o')).status, 404);
});

test('compressed request bodies: gzip and deflate accepted, an unknown coding 415, a corrupt body 400', { skip }, async () => {
  const zlib = await import('node:zlib');
  const s = servers[0];
  const body = Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: 'compressed hi' }], max_tokens: 2 }));
  for (const [enc, data] of [['gzip', zlib.gzipSync(body)], ['deflate', zlib.deflateSync(body)]]) {
    const r = await fetch(s.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Encoding': enc }, body: data });
    assert.equal(r.status, 200, enc);
  }
  const br = await fetch(s.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Encoding': 'br' }, body: zlib.brotliCompressSync(body) });
  assert.equal(br.status, 415);
  const bad = await fetch(s.url + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Encoding': 'gzip' }, body: Buffer.from('not gzip') });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.code, 'invalid_encoding');
});
