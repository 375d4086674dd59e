#!/usr/bin/env python3
"""Concurrent streaming clients against `wick serve --parallel N` (continuous batching).

For each client count C: C clients send at once a cold prompt of --prompt token ids
each (distinct, cache off) and stream --gen tokens (ignore_eos). Reports aggregate
decode tok/s (the tokens that arrived while every client was decoding, over that
span) and its ratio to one client, end-to-end tok/s (all tokens over the whole burst,
admission included), and mean / max TTFT. One client runs
against a --parallel 1 server (plain decoding), the others against --parallel MAX.

Then the stall test: one stream decodes while a cold prompt of --stall-prompt tokens
is prefilled beside it; reports the longest gap between two of the running stream's
tokens during that prefill (and its usual gap), for each --ubatch given.

usage: bench/parallel.py --wick build/wick -m MODEL.gguf [-t 2] [--clients 1,4,8,16]
       [--prompt 32] [--gen 128] [--stall-prompt 4096] [--stall-ubatch 512,128]
       [--serve-args '--device cuda'] [--json OUT]
Only the standard library is used; the servers are started and stopped here."""
import argparse
import json
import re
import subprocess
import threading
import time
import urllib.request


EXTRA = []  # --serve-args: more wick serve options (--device cuda)


def start_server(wick, model, threads, parallel, ubatch, ctx):
    args = [wick, "serve", "-m", model, "--port", "0", "-t", str(threads), "--parallel", str(parallel),
            "--ubatch", str(ubatch), "-c", str(ctx), "--cache-slots", str(parallel + 1), "--max-queue", "256"] + EXTRA
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    while True:
        line = p.stderr.readline()
        if not line:
            raise RuntimeError("server exited:\n" + "".join(log))
        log.append(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()  # drain the log
    return p, "http://127.0.0.1:%s" % m.group(1)


def stop_server(p):
    p.terminate()
    p.wait(timeout=60)


def stream(url, ids, gen, out):
    """Streams one completion; out gets t0, the arrival time of every token and the usage."""
    # Random weights pick tokens that decode to no text (no SSE event): the bias makes every
    # token a visible one, so each token is timed; the forward passes are the same.
    body = {"prompt": ids, "max_tokens": gen, "temperature": 0, "ignore_eos": True, "stream": True,
            "cache_prompt": False, "logit_bias": {"300": 100}, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out["t0"] = time.time()
    times = []
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                out["usage"] = ev["usage"]
            if ev.get("choices"):
                times.append(time.time())
                out["times"] = times
            if out.get("stop"):
                break  # closing the connection cancels the request
    out["times"] = times


def prompt_ids(seed, n, vocab=1000):
    s, ids = seed * 7919 + 1, []
    for _ in range(n):
        s = (s * 1103515245 + 12345) & 0x7FFFFFFF
        ids.append(100 + (s >> 8) % vocab)
    return ids


def burst(url, clients, n_prompt, gen):
    outs = [dict() for _ in range(clients)]
    th = [threading.Thread(target=stream, args=(url, prompt_ids(1000 * clients + i, n_prompt), gen, outs[i]))
          for i in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    first = [o["times"][0] for o in outs]
    last = [o["times"][-1] for o in outs]
    ttft = [f - o["t0"] for f, o in zip(first, outs)]
    # steady state: the tokens that arrived while every client was decoding
    lo, hi = max(first), min(last)
    steady = sum(1 for o in outs for t in o["times"] if lo < t <= hi)
    total = sum(o["usage"]["completion_tokens"] for o in outs)
    t_start = min(o["t0"] for o in outs)
    return {"clients": clients, "agg_tok_s": steady / (hi - lo) if hi > lo else None,
            "e2e_tok_s": total / (max(last) - t_start),
            "ttft_mean_ms": 1000 * sum(ttft) / len(ttft), "ttft_max_ms": 1000 * max(ttft)}


def stall(url, n_prompt, gen):
    """A stream decoding while a cold prompt of n_prompt tokens is prefilled beside it."""
    run = {}
    t = threading.Thread(target=stream, args=(url, prompt_ids(7, 16), gen, run))
    t.start()
    while len(run.get("times", [])) < 8:
        time.sleep(0.01)
    cold = {}
    t_cold = time.time()
    stream(url, prompt_ids(9, n_prompt), 1, cold)
    t_done = cold["times"][0]
    time.sleep(0.5)
    run["stop"] = True
    t.join()
    ts = run["times"]
    gaps_in = [b - a for a, b in zip(ts, ts[1:]) if b > t_cold and a < t_done]
    gaps_out = sorted(b - a for a, b in zip(ts, ts[1:]) if b < t_cold or a > t_done)
    return {"stall_max_ms": 1000 * max(gaps_in) if gaps_in else None,
            "gap_median_ms": 1000 * gaps_out[len(gaps_out) // 2] if gaps_out else None,
            "cold_ttft_ms": 1000 * (t_done - t_cold)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wick", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--stall-prompt", type=int, default=4096)
    ap.add_argument("--stall-ubatch", default="512,128")
    ap.add_argument("--serve-args", default="", help="more wick serve options, e.g. '--device cuda'")
    ap.add_argument("--json")
    a = ap.parse_args()
    EXTRA.extend(a.serve_args.split())
    counts = [int(c) for c in a.clients.split(",")]
    rows = []
    for par in sorted(set(1 if c == 1 else max(counts) for c in counts)):
        p, url = start_server(a.wick, a.model, a.threads, par, 512, 2048)
        try:
            burst(url, 1, a.prompt, 8)  # warm-up: pages in the weights
            for c in counts:
                if (c == 1) != (par == 1):
                    continue
                r = burst(url, c, a.prompt, a.gen)
                r["parallel"] = par
                rows.append(r)
        finally:
            stop_server(p)
    rows.sort(key=lambda r: r["clients"])
    base = next((r["agg_tok_s"] for r in rows if r["clients"] == 1), None)
    print("| clients | --parallel | aggregate decode tok/s | × one client | end to end tok/s | TTFT mean ms | TTFT max ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["agg_tok_s"] / base if base and r["agg_tok_s"] else float("nan")
        print("| %d | %d | %.1f | %.2f | %.1f | %.0f | %.0f |" % (r["clients"], r["parallel"], r["agg_tok_s"] or 0, ratio,
                                                                r["e2e_tok_s"], r["ttft_mean_ms"], r["ttft_max_ms"]))
    stalls = []
    for ub in [int(u) for u in a.stall_ubatch.split(",") if u]:
        p, url = start_server(a.wick, a.model, a.threads, 2, ub, a.stall_prompt + 1024)
        try:
            burst(url, 1, a.prompt, 8)
            s = stall(url, a.stall_prompt, 100000)
            s["ubatch"] = ub
            stalls.append(s)
        finally:
            stop_server(p)
    if stalls:
        print("\n| --ubatch | cold prompt tokens | longest stall of the running stream ms | its usual gap ms | cold TTFT ms |")
        print("|---:|---:|---:|---:|---:|")
        for s in stalls:
            print("| %d | %d | %.0f | %.1f | %.0f |" % (s["ubatch"], a.stall_prompt, s["stall_max_ms"] or 0,
                                                     s["gap_median_ms"] or 0, s["cold_ttft_ms"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bursts": rows, "stalls": stalls}, f, indent=2)


if __name__ == "__main__":
    main()
