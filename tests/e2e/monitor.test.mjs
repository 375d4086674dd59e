// The monitor page in a real browser (playwright-core + Debian chromium):
// while a long request runs its row and prefill progress bar appear; once
// it is done the completed row shows the same counters the API returned.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { haveChromium, launchChromium, parseSse, requireChromiumInCi, sourceDir, startServer } from './helpers.mjs';

requireChromiumInCi();

let srv;
let browser;

before(async () => {
  if (!haveChromium) return;
  srv = await startServer(['--keepalive-ms', '200']);
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close();
  if (srv) assert.equal((await srv.stop()).code, 0, srv.log());
});

test('monitor shows the running request, then its final counters as the API returned them', { skip: !haveChromium && 'no chromium' }, async () => {
  const artifacts = path.join(sourceDir, 'artifacts');
  fs.mkdirSync(artifacts, { recursive: true });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(srv.url + '/monitor');
  await page.waitForSelector('#conn.ok');
  assert.equal(await page.isVisible('#synthetic'), true, 'the demo model is flagged as synthetic');
  assert.match(await page.textContent('#m-type'), /Q8_0/);

  // A long prompt, computed fresh, then a long generation: seconds of work.
  const long = 'A long document for the monitor to watch while it is prefilled. '.repeat(80);
  const reqDone = fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: long }], max_tokens: 60, ignore_eos: true, temperature: 0,
      stream: true, stream_options: { include_usage: true }, wick: { fresh: true },
    }),
  }).then((r) => r.text());

  const row = await page.waitForSelector('#active tbody tr[data-id]', { timeout: 60000 });
  assert.ok(await row.$('.progress .bar'), 'progress bar in the active row');
  assert.match(await row.getAttribute('class'), /provisional/);
  await page.screenshot({ path: path.join(artifacts, 'monitor-active.png') });

  const sse = parseSse(await reqDone);
  const usageChunk = sse.events.find((e) => e.choices.length === 0 && e.usage);
  assert.ok(usageChunk);
  const id = usageChunk.id;
  const t = usageChunk.timings;
  const done = await page.waitForSelector(`#recent tbody tr[data-id="${id}"]`, { timeout: 30000 });
  const cellText = async (field) => (await done.$(`td[data-field="${field}"]`)).textContent();
  assert.equal(await cellText('status'), 'ok');
  assert.equal(await cellText('finish_reason'), 'length');
  for (const f of ['prompt_tokens', 'cached_tokens', 'recomputed_tokens', 'completion_tokens', 'prefill_ms',
    'prefill_tok_per_s', 'ttft_ms', 'decode_ms', 'decode_tok_per_s'])
    assert.equal(await cellText(f), String(t[f]), f);
  assert.equal(Number(await cellText('prompt_tokens')), usageChunk.usage.prompt_tokens);
  assert.equal(Number(await cellText('completion_tokens')), 60);
  assert.equal(await page.isVisible('#active-empty'), true, 'nothing active afterwards');
  await page.screenshot({ path: path.join(artifacts, 'monitor.png'), fullPage: true });
});
