// Robustness: bad input gets the right OpenAI-shaped error, hostile or
// broken clients cannot wedge the server, and a normal request still works
// afterwards. All traffic stays on 127.0.0.1.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';

import { cacheDir, parsePrometheus, rawPost, rawRequest, sleep, startServer, wickBin } from './helpers.mjs';

let srv; // limits: 1 MiB body, 2 s idle timeout, 512-token context
let keyed; // --api-key
let tiny; // --max-queue 1

before(async () => {
  srv = await startServer(['--max-body-mb', '1', '--timeout', '2', '--ctx', '512']);
  keyed = await startServer(['--api-key', 'sekrit-key']);
  tiny = await startServer(['--max-queue', '1']);
});

after(async () => {
  for (const s of [srv, keyed, tiny]) {
    const r = await s.stop();
    assert.equal(r.code, 0, 'clean exit:\n' + s.log());
  }
});

const chatBody = (extra = {}) => JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, temperature: 0, ...extra });

async function healthyChat(s) {
  const r = await fetch(s.url + '/v1/chat/completions', { method: 'POST', body: chatBody() });
  assert.equal(r.status, 200);
  const j = await r.json();
  assert.equal(j.object, 'chat.completion');
}

function errorOf(res) {
  const j = JSON.parse(res.body);
  assert.ok(j.error, 'OpenAI error shape');
  assert.equal(typeof j.error.message, 'string');
  assert.equal(typeof j.error.type, 'string');
  return j.error;
}

test('malformed JSON is 400 invalid_json', async () => {
  const r = await rawPost(srv.port, '/v1/chat/completions', '{"messages": [');
  assert.equal(r.status, 400);
  const e = errorOf(r);
  assert.equal(e.type, 'invalid_request_error');
  assert.equal(e.code, 'invalid_json');
  assert.equal((await rawPost(srv.port, '/v1/chat/completions', '')).status, 400);
  assert.equal((await rawPost(srv.port, '/v1/chat/completions', '"just a string"')).status, 400);
});

test('wrong types are 400 naming the field', async () => {
  for (const [body, param] of [
    ['{"messages": "hello"}', 'messages'],
    ['{"messages": [{"role": "user", "content": "x"}], "temperature": "warm"}', 'temperature'],
    ['{"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}', 'max_tokens'],
    ['{"messages": [{"role": "user", "content": 12}]}', 'messages[0].content'],
    ['{"messages": [{"role": "user", "content": "x"}], "stop": {"a": 1}}', 'stop'],
    ['{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "nope"}]}', 'tools[0]'],
    ['{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]}',
      'messages[1].tool_calls[0].function.arguments'],
    ['{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "objekt"}}}}',
      'response_format.json_schema.schema'],
  ]) {
    const r = await rawPost(srv.port, '/v1/chat/completions', body);
    assert.equal(r.status, 400, body);
    assert.equal(errorOf(r).param, param, body);
  }
  const deep = '{"messages":[{"role":"user","content":"x"}],"x":' + '['.repeat(200) + ']'.repeat(200) + '}';
  const r = await rawPost(srv.port, '/v1/chat/completions', deep);
  assert.equal(r.status, 400);
  assert.equal(errorOf(r).code, 'json_too_deep');
});

test('invalid UTF-8 in content is 400', async () => {
  const body = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"bad '), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}]}')]);
  const r = await rawPost(srv.port, '/v1/chat/completions', body);
  assert.equal(r.status, 400);
  assert.equal(errorOf(r).code, 'invalid_utf8');
  const esc = await rawPost(srv.port, '/v1/chat/completions', '{"messages":[{"role":"user","content":"\\udc00"}]}');
  assert.equal(esc.status, 400);
});

test('a body over the limit is 413, announced or chunked', async () => {
  // Announced: refused from the headers, before the body is read.
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${3 << 20}\r\n\r\n`;
  const r = await rawRequest(srv.port, Buffer.from(head + '{"messages":'));
  assert.equal(r.status, 413);
  assert.equal(errorOf(r).code, 'body_too_large');
  // Chunked, no length up front: counted while it arrives.
  const piece = 'x'.repeat(256 * 1024);
  let chunked = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`;
  for (let i = 0; i < 6; i++) chunked += piece.length.toString(16) + '\r\n' + piece + '\r\n';
  chunked += '0\r\n\r\n';
  const c = await rawRequest(srv.port, Buffer.from(chunked));
  assert.equal(c.status, 413);
});

test('another model name is answered by the loaded model; unknown route 404, wrong method 405', async () => {
  // raw requests with Connection: close: srv's 2 s idle timeout races pooled keep-alive connections
  const models = await rawRequest(srv.port, Buffer.from('GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'));
  const served = JSON.parse(models.body).data[0].id;
  const r = await rawPost(srv.port, '/v1/chat/completions', chatBody({ model: 'gpt-nonexistent' }));
  assert.equal(r.status, 200);
  assert.equal(JSON.parse(r.body).model, served, 'the response names the model that answered');
  const nf = await fetch(srv.url + '/v1/nothing-here');
  assert.equal(nf.status, 404);
  assert.equal((await nf.json()).error.type, 'not_found_error');
  const get = await fetch(srv.url + '/v1/chat/completions');
  assert.equal(get.status, 405);
  // query strings are not part of the route (Claude Code posts /v1/messages?beta=true)
  const q = await rawPost(srv.port, '/v1/chat/completions?beta=true', chatBody());
  assert.equal(q.status, 200);
});

test('a prompt longer than the context is 400 context_length_exceeded in OpenAI wording; a large max_tokens is clamped', async () => {
  const r = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    body: JSON.stringify({ messages: [{ role: 'user', content: 'many words here '.repeat(400) }], max_tokens: 2 }),
  });
  assert.equal(r.status, 400);
  const e = (await r.json()).error;
  assert.equal(e.type, 'invalid_request_error');
  assert.equal(e.code, 'context_length_exceeded');
  assert.match(e.message, /^This model's maximum context length is 512 tokens\. However, your messages resulted in \d+ tokens/);
  assert.match(await srv.waitLog(/context length is 512/), /POST \/v1\/chat\/completions 400: This model's maximum context length is 512 tokens/);
  // max_tokens beyond the room left: clamped, not refused (finish_reason length)
  const big = await fetch(srv.url + '/v1/chat/completions', { method: 'POST', body: chatBody({ max_tokens: 100000, ignore_eos: true, wick: { fresh: true } }) });
  assert.equal(big.status, 200);
  const j = await big.json();
  assert.equal(j.choices[0].finish_reason, 'length');
  assert.equal(j.usage.prompt_tokens + j.usage.completion_tokens, 512, 'generated up to the end of the context');
});

test('API key: missing or wrong is 401, right key works, /health stays public', async () => {
  const body = chatBody();
  const none = await fetch(keyed.url + '/v1/chat/completions', { method: 'POST', body });
  assert.equal(none.status, 401);
  assert.equal((await none.json()).error.type, 'authentication_error');
  const wrong = await fetch(keyed.url + '/v1/chat/completions', { method: 'POST', body, headers: { Authorization: 'Bearer sekrit-kez' } });
  assert.equal(wrong.status, 401);
  const right = await fetch(keyed.url + '/v1/chat/completions', { method: 'POST', body, headers: { Authorization: 'Bearer sekrit-key' } });
  assert.equal(right.status, 200);
  const xkey = await fetch(keyed.url + '/v1/models', { headers: { 'X-Api-Key': 'sekrit-key' } });
  assert.equal(xkey.status, 200);
  assert.equal((await fetch(keyed.url + '/v1/models')).status, 401);
  assert.equal((await fetch(keyed.url + '/metrics')).status, 401);
  assert.equal((await fetch(keyed.url + '/monitor/api/state')).status, 401);
  assert.equal((await fetch(keyed.url + '/monitor/api/reset-cache', { method: 'POST' })).status, 401);
  assert.equal((await fetch(keyed.url + '/health')).status, 200);
  assert.equal((await fetch(keyed.url + '/monitor')).status, 200);
  const sdk = new OpenAI({ baseURL: keyed.url + '/v1', apiKey: 'bad', maxRetries: 0 });
  await assert.rejects(sdk.models.list(), (e) => e.status === 401);
  const good = new OpenAI({ baseURL: keyed.url + '/v1', apiKey: 'sekrit-key', maxRetries: 0 });
  assert.equal((await good.models.list()).data.length, 1);
});

test('a non-loopback host without an API key refuses to start', async () => {
  const env = { ...process.env, XDG_CACHE_HOME: cacheDir() };
  delete env.WICK_API_KEY;
  const p = spawn(wickBin(), ['serve', '--host', '0.0.0.0', '--port', '0'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d) => (err += d));
  const code = await new Promise((res) => p.on('exit', res));
  assert.notEqual(code, 0);
  assert.match(err, /without an API key/);
  assert.doesNotMatch(err, /listening on/);
});

test('browser requests from another origin or a rebinding host are refused', async () => {
  const body = chatBody();
  const cross = await rawPost(srv.port, '/v1/chat/completions', body, { Origin: 'http://evil.example' });
  assert.equal(cross.status, 403);
  const rebind = await rawRequest(srv.port, Buffer.from('GET /v1/models HTTP/1.1\r\nHost: evil.example:8008\r\nConnection: close\r\n\r\n'));
  assert.equal(rebind.status, 403);
  const same = await rawPost(srv.port, '/v1/chat/completions', body, { Origin: `http://127.0.0.1:${srv.port}` });
  assert.equal(same.status, 200);
});

test('a slow-loris client is cut off by the idle timeout while others are served', async () => {
  const sock = net.connect(srv.port, '127.0.0.1');
  await new Promise((r) => sock.on('connect', r));
  sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le');
  const closed = new Promise((r) => sock.on('close', r));
  sock.on('error', () => {});
  const t0 = Date.now();
  await healthyChat(srv);
  await Promise.race([closed, sleep(15000).then(() => assert.fail('slow client still connected after 15 s'))]);
  assert.ok(Date.now() - t0 < 15000);
});

test('200 connect-and-drop clients, then normal requests still succeed', async () => {
  const drops = [];
  for (let i = 0; i < 200; i++) {
    drops.push(new Promise((resolve) => {
      const s = net.connect(srv.port, '127.0.0.1');
      s.on('error', () => resolve());
      s.on('close', () => resolve());
      s.on('connect', () => {
        if (i % 4 === 1) s.write('GET /v1/mod');                       // partial request line
        if (i % 4 === 2) s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500\r\n\r\n{"mess');
        if (i % 4 === 3) {                                               // full request, gone before the answer
          const b = chatBody({ max_tokens: 50, ignore_eos: true });
          s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${b.length}\r\n\r\n${b}`);
        }
        setTimeout(() => s.destroy(), i % 4 === 3 ? 20 : 0);
      });
    }));
    if (i % 50 === 49) await Promise.all(drops.slice(i - 49, i + 1));
  }
  await Promise.all(drops);
  await healthyChat(srv);
  assert.equal((await fetch(srv.url + '/health')).status, 200);
  const m = parsePrometheus(await fetch(srv.url + '/metrics').then((r) => r.text()));
  assert.ok(m.samples.get('wick_http_requests_total{route="other",status="413"}') >= 1);
  assert.ok(m.samples.get('wick_http_requests_total{route="chat",status="400"}') >= 1);
  // Drained: nothing left queued or running once the dropped requests were cancelled.
  let depth = -1;
  for (let i = 0; i < 100 && depth !== 0; i++) {
    const s = await fetch(srv.url + '/monitor/api/state').then((r) => r.json());
    depth = s.active.length;
    if (depth) await sleep(100);
  }
  assert.equal(depth, 0);
});

test('a full queue answers 429 and recovers', async () => {
  const one = () => fetch(tiny.url + '/v1/chat/completions', { method: 'POST', body: chatBody({ max_tokens: 40, ignore_eos: true }) })
    .then(async (r) => ({ status: r.status, body: await r.json() }));
  const results = await Promise.all(Array.from({ length: 6 }, one));
  const statuses = results.map((r) => r.status);
  assert.ok(statuses.every((s) => s === 200 || s === 429), statuses.join(','));
  assert.ok(statuses.includes(200));
  const limited = results.find((r) => r.status === 429);
  assert.ok(limited, 'at least one request was turned away: ' + statuses.join(','));
  assert.equal(limited.body.error.type, 'rate_limit_error');
  await healthyChat(tiny);
});

test('answers that take longer than the idle timeout still arrive (plain and streamed)', async () => {
  // srv closes idle connections after 2 s; these requests keep the engine busy longer.
  const body = chatBody({ max_tokens: 450, ignore_eos: true, wick: { fresh: true } });
  const t0 = Date.now();
  const plain = await fetch(srv.url + '/v1/chat/completions', { method: 'POST', body });
  assert.equal(plain.status, 200);
  assert.equal((await plain.json()).usage.completion_tokens, 450);
  const streamed = await fetch(srv.url + '/v1/chat/completions', { method: 'POST', body: chatBody({ max_tokens: 450, ignore_eos: true, stream: true }) });
  assert.equal(streamed.status, 200);
  const text = await streamed.text();
  assert.ok(text.endsWith('data: [DONE]\n\n'));
  if (Date.now() - t0 < 2500) console.log('# note: this machine was fast enough that the idle timeout was not exercised');
});
