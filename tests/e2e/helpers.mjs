// Shared helpers for the end-to-end tests: start/stop a real `wick serve`
// on 127.0.0.1 with an OS-chosen port, raw HTTP over sockets, SSE parsing.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const sourceDir = process.env.WICK_SOURCE_DIR || path.resolve(here, '../..');

export function wickBin() {
  if (process.env.WICK_BIN) return process.env.WICK_BIN;
  for (const d of ['build-test', 'build-srv', 'build']) {
    const p = path.join(sourceDir, d, 'wick');
    if (fs.existsSync(p)) return p;
  }
  throw new Error('wick binary not found: set WICK_BIN');
}

// Servers without -m serve the synthetic demo model (--demo: these tests check
// behaviour, not words). It is made once per cache dir; all test
// files share one dir so it is written once.
export function cacheDir() {
  const d = process.env.WICK_E2E_CACHE || path.join(os.tmpdir(), 'wick-e2e-cache');
  fs.mkdirSync(d, { recursive: true });
  return d;
}

// Starts `wick serve` with extra args; resolves once /health answers 200.
export async function startServer(args = [], { env = {}, waitHealth = true } = {}) {
  const model = args.includes('-m') ? [] : ['--demo'];
  const proc = spawn(wickBin(), ['serve', '--port', '0', '-t', '1', ...model, ...args], {
    env: { ...process.env, XDG_CACHE_HOME: cacheDir(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start in 120 s:\n' + log)), 120000);
    const check = () => {
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    proc.stderr.on('data', check);
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${log}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  const server = {
    proc,
    port,
    url,
    log: () => log,
    // The log arrives on a pipe, the answer on a socket: a line written
    // before the answer may still be in flight when the answer is read.
    // Resolves with the log once `want` (a RegExp or a predicate of the
    // log) holds; after `timeoutMs` resolves with the log as it stands,
    // so the caller's assertion fails with what was there.
    async waitLog(want, timeoutMs = 10000) {
      const ok = () => (want instanceof RegExp ? want.test(log) : want(log));
      for (const t0 = Date.now(); !ok() && Date.now() - t0 < timeoutMs; ) await sleep(20);
      return log;
    },
    exited,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const r = await Promise.race([exited, new Promise((res) => setTimeout(() => res(null), 20000))]);
      if (r === null) {
        proc.kill('SIGKILL');
        await exited;
        throw new Error('server did not stop on SIGTERM within 20 s');
      }
      return r;
    },
  };
  if (waitHealth) {
    for (let i = 0; i < 200; i++) {
      try {
        const r = await fetch(url + '/health');
        if (r.status === 200) break;
      } catch {}
      await sleep(100);
    }
  }
  return server;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Sends raw bytes, returns { status, headers, body } (connection: close).
export function rawRequest(port, bytes, { timeoutMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error('raw request timed out'));
    }, timeoutMs);
    sock.on('connect', () => sock.write(bytes));
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    sock.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      const sep = text.indexOf('\r\n\r\n');
      resolve({ status: m ? Number(m[1]) : 0, head: text.slice(0, sep), body: sep >= 0 ? text.slice(sep + 4) : '' });
    });
  });
}

// POST with a Buffer/string body and Connection: close.
export function rawPost(port, pathName, body, headers = {}) {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
  let head = `POST ${pathName} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${buf.length}\r\nConnection: close\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  return rawRequest(port, Buffer.concat([Buffer.from(head + '\r\n'), buf]));
}

// Parses an SSE body into { events: [objects], done: bool, comments: n }.
export function parseSse(text) {
  const events = [];
  let done = false;
  let comments = 0;
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) comments++;
      else if (line === 'data: [DONE]') done = true;
      else if (line.startsWith('data: ')) events.push(JSON.parse(line.slice(6)));
      else throw new Error('unexpected SSE line: ' + JSON.stringify(line));
    }
  }
  return { events, done, comments };
}

// Checks Prometheus text exposition: every sample line is NAME{labels} VALUE.
export function parsePrometheus(text) {
  const samples = new Map();
  const types = new Map();
  for (const line of text.split('\n')) {
    if (!line) continue;
    if (line.startsWith('# TYPE ')) {
      const [, name, type] = line.split(' ').slice(1);
      types.set(line.split(' ')[2], line.split(' ')[3]);
      void name;
      void type;
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.eE+-]+|\+Inf|NaN)$/.exec(line);
    if (!m) throw new Error('bad Prometheus line: ' + JSON.stringify(line));
    samples.set(m[1] + (m[2] || ''), Number(m[3]));
  }
  return { samples, types };
}

// Debian's chromium for the monitor tests (playwright-core): its path, whether it
// is there (CI requires it: a missing browser fails there instead of skipping),
// and a headless launch.
export const CHROMIUM = process.env.WICK_CHROMIUM || '/usr/bin/chromium';
export const haveChromium = fs.existsSync(CHROMIUM);
export function requireChromiumInCi() {
  if (!haveChromium && process.env.CI === 'true') throw new Error(`chromium missing at ${CHROMIUM} (CI requires it)`);
}

export async function launchChromium() {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
  });
}


// Golden data (tiny random-weight models without a chat template: serve them
// with --chat-template). CI requires it; elsewhere tests skip without it.
export const goldenDir = process.env.WICK_GOLDEN || path.resolve(sourceDir, '../shared/golden');
export const haveGolden = fs.existsSync(path.join(goldenDir, 'models/tiny-qwen35-F32.gguf'));
export function requireGoldenInCi() {
  if (!haveGolden && process.env.CI === 'true') throw new Error('golden models missing at ' + goldenDir);
}
export const goldenModel = (name) => path.join(goldenDir, 'models', name);
// The tiny models' vocabulary: 260 tokens, </s> (id 2) ends a generation.
export const GOLDEN_EOS = 2;

// Runs a program with a hard time limit; the whole process group is killed
// when it runs over (coding CLIs start helper processes). Resolves with
// { code, signal, stdout, stderr, ms }.
export function runBounded(cmd, args, { env = {}, cwd, timeoutMs = 120000, input } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const p = spawn(cmd, args, { env, cwd, detached: true, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    if (input !== undefined) p.stdin.end(input);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try { process.kill(-p.pid, 'SIGKILL'); } catch {}
    }, timeoutMs);
    p.on('error', (e) => {
      clearTimeout(timer);
      resolve({ code: -1, signal: null, stdout, stderr: stderr + String(e), ms: Date.now() - t0, timedOut });
    });
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - t0, timedOut });
    });
  });
}

// Per-request log lines of a server ("POST /v1/messages 200 ...").
export function requestLines(log) {
  return log.split('\n').filter((l) => /(GET|POST|HEAD) \/\S* \d{3}/.test(l));
}
