// The prefix cache as the monitor shows it (playwright-core + Debian
// chromium): after a chat request the checkpoints table lists the
// conversation's checkpoints (position, kind, bytes, RAM) and the memory card
// the cache's RAM use and budget; a follow-up reports the checkpoint it
// resumed from in its timings.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { haveChromium, launchChromium, requireChromiumInCi, startServer } from './helpers.mjs';

requireChromiumInCi();

let srv;
let browser;

before(async () => {
  if (!haveChromium) return;
  srv = await startServer(['--cache-mem', '512M']);
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close();
  if (srv) assert.equal((await srv.stop()).code, 0, srv.log());
});

async function chat(messages) {
  const r = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens: 8, temperature: 0 }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

test('monitor lists the prefix cache checkpoints and occupancy', { skip: !haveChromium && 'no chromium' }, async () => {
  const messages = [
    { role: 'system', content: 'You are a test assistant for the cache monitor. ' + 'Background notes. '.repeat(20) },
    { role: 'user', content: 'First question?' },
  ];
  const first = await chat(messages);
  messages.push({ role: 'assistant', content: first.choices[0].message.content || '' });
  messages.push({ role: 'user', content: 'Second question?' });
  const second = await chat(messages);
  const t = second.timings;
  assert.ok(t.cached_tokens > 0, 'the follow-up reused the cached prefix: ' + JSON.stringify(t));
  assert.ok(t.checkpoint && t.checkpoint.pos === t.cached_tokens, 'timings name the checkpoint: ' + JSON.stringify(t));
  assert.equal(t.cached_tokens + t.recomputed_tokens, t.prompt_tokens);

  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(srv.url + '/monitor');
  await page.waitForSelector('#conn.ok');
  const row = await page.waitForSelector('#checkpoints tbody tr', { timeout: 30000 });
  assert.ok(row, 'a checkpoint row');
  const kinds = await page.$$eval('#checkpoints tbody td[data-field="kind"]', (tds) => tds.map((td) => td.textContent));
  assert.ok(kinds.includes('system_end') || kinds.includes('kv_prefix') || kinds.includes('prompt_end'), kinds.join(','));
  const where = await page.$$eval('#checkpoints tbody td[data-field="where"]', (tds) => tds.map((td) => td.textContent));
  assert.ok(where.every((w) => /^RAM slot \d+/.test(w) || w === 'disk'), where.join(','));
  assert.match(await page.textContent('#cache-ram'), /\/ 512\.0 MiB/);
  assert.equal(await page.isVisible('#checkpoints-empty'), false);
  await page.close();
});
