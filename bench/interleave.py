#!/usr/bin/env python3
"""Interleaved conversations: the pattern a coding CLI makes against a running
wick server. A long main conversation (a pasted source file as the system
prompt) and, between its turns, short side-agent requests (a title, a
summary) that share only the chat header with it. Reports the main turns'
prompt / cached tokens and TTFT: a cache that lets a side request cut the
main conversation recomputes it on every turn.

usage: bench/interleave.py --url http://127.0.0.1:8008 [--main-words 4000]
       [--turns 4] [--side 2] [--json OUT]
Only the standard library is used."""
import argparse
import json
import time
import urllib.request

WORDS = ("def class return import self value result error config path file test "
         "buffer index token cache state model layer request server thread queue").split()


def post(url, body, timeout=3600):
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.loads(r.read())
    return out, (time.time() - t0) * 1000.0


def text(seed, n_words):
    s, out = seed, []
    for i in range(n_words):
        s = (s * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(WORDS[(s >> 8) % len(WORDS)])
        if i % 12 == 11:
            out.append("\n")
    return " ".join(out)


def ask(url, messages, max_tokens):
    out, ms = post(url, {"messages": messages, "max_tokens": max_tokens, "temperature": 0})
    t = out.get("timings", {})
    return {"prompt": out["usage"]["prompt_tokens"], "cached": out["usage"]["prompt_tokens_details"]["cached_tokens"],
            "ttft_ms": t.get("ttft_ms", ms), "wall_ms": ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--main-words", type=int, default=4000)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--side", type=int, default=2, help="side requests between main turns")
    ap.add_argument("--json")
    a = ap.parse_args()
    history = [{"role": "system", "content": "You review this file:\n" + text(1, a.main_words)}]
    rows = []
    for turn in range(a.turns):
        history.append({"role": "user", "content": f"What does the function at line {10 * turn + 3} return?"})
        r = ask(a.url, history, 8)
        r["turn"] = turn + 1
        rows.append(r)
        print(f"main turn {turn + 1}: prompt {r['prompt']}, cached {r['cached']}, TTFT {r['ttft_ms']:.0f} ms", flush=True)
        history.append({"role": "assistant", "content": "It returns the count."})
        for k in range(a.side):
            side = [{"role": "system", "content": "You write short titles. " + text(100 + k, 30)},
                    {"role": "user", "content": "Title for: " + history[-2]["content"]}]
            s = ask(a.url, side, 8)
            print(f"  side request: prompt {s['prompt']}, cached {s['cached']}, TTFT {s['ttft_ms']:.0f} ms", flush=True)
    follow = rows[1:]
    if follow:
        reuse = sum(r["cached"] for r in follow) / max(1, sum(r["prompt"] for r in follow))
        print(f"main turns after the first: {100 * reuse:.1f} % of their prompt reused, "
              f"mean TTFT {sum(r['ttft_ms'] for r in follow) / len(follow):.0f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
