// wick monitor: polls /monitor/api/state and renders it. No framework, no build step.
(() => {
  'use strict';
  const $ = (id) => document.getElementById(id);
  let key = sessionStorage.getItem('wick-key') || '';
  const POLL_MS = 500;

  const headers = () => (key ? { Authorization: 'Bearer ' + key } : {});
  const fmtInt = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US'));
  const fmt1 = (x) => (x === undefined || x === null || x < 0 ? '–' : Number(x).toFixed(1));
  const fmtMs = (ms) => (ms < 0 ? '–' : ms >= 10000 ? (ms / 1000).toFixed(1) + ' s' : Math.round(ms) + ' ms');
  const fmtBytes = (b) => {
    if (!b && b !== 0) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return b.toFixed(i ? 1 : 0) + ' ' + u[i];
  };

  function cell(tr, text, field) {
    const td = document.createElement('td');
    td.textContent = text;
    if (field) td.dataset.field = field;
    tr.appendChild(td);
    return td;
  }

  function renderModel(s) {
    const m = s.model || {};
    $('m-id').textContent = m.id || '–';
    $('m-arch').textContent = (m.arch || '–') + (m.recurrent_layers ? ` (hybrid, ${m.recurrent_layers} recurrent layers)` : '');
    $('m-type').textContent = m.type || '–';
    $('m-bpw').textContent = m.bits_per_weight ? m.bits_per_weight.toFixed(2) : '–';
    $('m-params').textContent = fmtInt(m.n_params);
    $('m-ctx').textContent = fmtInt(m.n_ctx) + ' tokens';
    $('m-tmpl').textContent = m.chat_template || 'none (use --chat-template)';
    $('synthetic').hidden = !m.synthetic;
    const mem = s.memory || {};
    $('mem-w').textContent = fmtBytes(mem.weights_bytes);
    $('mem-s').textContent = fmtBytes(mem.state_bytes);
    $('mem-t').textContent = fmtBytes(mem.total_bytes);
    const c = s.cache || {};
    $('cache-tok').textContent = `${fmtInt(c.tokens)} / ${fmtInt(c.capacity)}`;
    $('cache-hm').textContent = `${fmtInt(c.hits)} / ${fmtInt(c.misses)}`;
    $('cache-bar').style.width = c.capacity ? (100 * c.tokens / c.capacity).toFixed(1) + '%' : '0';
    $('queue').textContent = `${fmtInt(s.queue_depth)} waiting (max ${fmtInt(s.max_queue)})`;
    const pc = c.prefix_cache;
    if (pc) {
      const slots = pc.slots || [];
      const ckpts = slots.reduce((n, x) => n + ((x.checkpoints || []).length), 0);
      $('cache-ram').textContent = `${fmtBytes(pc.ram_bytes)} / ${fmtBytes(pc.ram_budget)}`;
      $('pc-slots').textContent = `${slots.length} / ${ckpts}`;
      $('pc-ev').textContent = `${fmtInt(pc.evictions)} / ${fmtInt(pc.refused)}`;
      $('pc-disk').textContent = pc.disk_budget ? `${fmtBytes(pc.disk_bytes)} / ${fmtBytes(pc.disk_budget)}, ${(pc.archive || []).length} files` : 'off';
    } else {
      for (const id of ['cache-ram', 'pc-slots', 'pc-ev', 'pc-disk']) $(id).textContent = 'off';
    }
  }

  function renderActive(rows) {
    const tb = $('active').querySelector('tbody');
    tb.replaceChildren();
    $('active-empty').hidden = rows.length > 0;
    for (const r of rows) {
      const c = r.counters || {};
      const tr = document.createElement('tr');
      tr.className = 'provisional';
      tr.dataset.id = r.id;
      tr.dataset.phase = r.phase;
      cell(tr, r.id, 'id');
      cell(tr, r.kind + (r.stream ? ' (stream)' : ''), 'kind');
      cell(tr, r.phase + (r.cancelled ? ' (cancelling)' : ''), 'phase');
      const td = cell(tr, '', 'prefill');
      const bar = document.createElement('div');
      bar.className = 'progress';
      const fill = document.createElement('div');
      fill.className = 'bar';
      const total = r.prefill_total || 0;
      const done = r.phase === 'decode' ? total : r.prefill_done || 0;
      fill.style.width = total ? (100 * done / total).toFixed(1) + '%' : '0';
      bar.title = `${done} / ${total} tokens`;
      bar.appendChild(fill);
      td.appendChild(bar);
      cell(tr, r.phase === 'prefill' ? fmtMs(r.prefill_eta_ms) : '–', 'eta');
      cell(tr, fmtInt(c.prompt_tokens), 'prompt_tokens');
      cell(tr, fmtInt(c.cached_tokens), 'cached_tokens');
      cell(tr, fmt1(c.prefill_tok_per_s), 'prefill_tok_per_s');
      cell(tr, fmtInt(c.completion_tokens), 'completion_tokens');
      cell(tr, fmt1(c.decode_tok_per_s), 'decode_tok_per_s');
      cell(tr, r.phase === 'queued' ? 'queued ' + fmtMs(r.queued_ms) : fmtMs(r.elapsed_ms), 'elapsed');
      tb.appendChild(tr);
    }
  }

  // Checkpoints of the cached conversations, RAM slots first, then the archive.
  function renderCheckpoints(pc) {
    const tb = $('checkpoints').querySelector('tbody');
    tb.replaceChildren();
    let n = 0;
    const add = (conv, where, tokens, ck) => {
      const tr = document.createElement('tr');
      cell(tr, String(conv), 'conversation');
      cell(tr, where, 'where');
      cell(tr, ck.kind, 'kind');
      cell(tr, fmtInt(ck.pos), 'pos');
      cell(tr, fmtBytes(ck.bytes), 'bytes');
      cell(tr, fmtInt(tokens), 'tokens');
      tb.appendChild(tr);
      n++;
    };
    if (pc) {
      for (const sl of pc.slots || [])
        for (const ck of sl.checkpoints || []) add(sl.conversation ?? sl.slot, `RAM slot ${sl.slot}`, sl.tokens, ck);
      for (const ar of pc.archive || [])
        for (const ck of ar.checkpoints || []) add(ar.conversation, 'disk', ar.tokens, ck);
    }
    $('checkpoints-empty').hidden = n > 0;
  }

  function renderRecent(rows) {
    const tb = $('recent').querySelector('tbody');
    tb.replaceChildren();
    for (const r of rows) {
      const c = r.counters || {};
      const tr = document.createElement('tr');
      tr.dataset.id = r.id;
      if (r.status !== 'ok') tr.className = 'err';
      cell(tr, r.id, 'id');
      cell(tr, r.kind + (r.stream ? ' (stream)' : ''), 'kind');
      cell(tr, r.status, 'status');
      cell(tr, r.finish_reason || '–', 'finish_reason');
      cell(tr, String(c.prompt_tokens), 'prompt_tokens');
      cell(tr, String(c.cached_tokens), 'cached_tokens');
      cell(tr, String(c.recomputed_tokens), 'recomputed_tokens');
      cell(tr, String(c.prefill_ms), 'prefill_ms');
      cell(tr, String(c.prefill_tok_per_s), 'prefill_tok_per_s');
      cell(tr, String(c.ttft_ms), 'ttft_ms');
      cell(tr, String(c.completion_tokens), 'completion_tokens');
      cell(tr, String(c.decode_ms), 'decode_ms');
      cell(tr, String(c.decode_tok_per_s), 'decode_tok_per_s');
      // speculative decoding: source, accepted of proposed, accepted per verification step
      cell(tr, c.draft_source ? `${c.draft_source} ${c.draft_n_accepted}/${c.draft_n} ` +
        `(${(100 * c.draft_acceptance).toFixed(0)} %, ${c.draft_accepted_per_step}/step)` : '–', 'drafts');
      tb.appendChild(tr);
    }
  }

  async function poll() {
    try {
      const r = await fetch('/monitor/api/state', { headers: headers(), cache: 'no-store' });
      if (r.status === 401) {
        $('auth').hidden = false;
        $('conn').textContent = 'API key required';
        $('conn').className = 'badge bad';
      } else if (r.ok) {
        const s = await r.json();
        $('auth').hidden = true;
        $('conn').textContent = s.ready ? 'connected' : 'loading model';
        $('conn').className = 'badge ' + (s.ready ? 'ok' : 'warn');
        renderModel(s);
        renderActive(s.active || []);
        renderRecent(s.recent || []);
        renderCheckpoints((s.cache || {}).prefix_cache);
      } else {
        $('conn').textContent = 'HTTP ' + r.status;
        $('conn').className = 'badge bad';
      }
    } catch (e) {
      $('conn').textContent = 'disconnected';
      $('conn').className = 'badge bad';
    }
    setTimeout(poll, POLL_MS);
  }

  async function action(path, label) {
    $('action-msg').textContent = label + '…';
    try {
      const r = await fetch(path, { method: 'POST', headers: headers() });
      const j = await r.json().catch(() => ({}));
      $('action-msg').textContent = r.ok ? label + ': done' : label + ': ' + ((j.error && j.error.message) || 'HTTP ' + r.status);
    } catch (e) {
      $('action-msg').textContent = label + ': ' + e.message;
    }
  }

  $('btn-reset').addEventListener('click', () => action('/monitor/api/reset-cache', 'reset cache'));
  $('btn-reload').addEventListener('click', () => {
    if (confirm('Reload the model? Requests wait while it loads.')) action('/monitor/api/reload', 'reload');
  });
  $('key-save').addEventListener('click', () => {
    key = $('key').value.trim();
    sessionStorage.setItem('wick-key', key);
  });
  poll();
})();
