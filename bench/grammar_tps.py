#!/usr/bin/env python3
"""Decode speed with and without constrained output, against a running wick
server: the same prompt answered plain, under response_format json_object,
under a json_schema, and as a forced tool call (tool_choice "required").
Each case runs --reps times at temperature 0, in rounds over all cases; the
table gives the prompt length, the median tokens generated and decode tok/s
the server measured (timings.decode_tok_per_s), and the ratio to the plain
answers. Offered tools lengthen the prompt, so "tools_auto" (the same tools,
unconstrained) is the fair baseline of "tool_call".

usage: bench/grammar_tps.py --url http://127.0.0.1:8008 [--max-tokens 64]
       [--reps 3] [--json OUT]
Only the standard library is used."""
import argparse
import json
import statistics
import urllib.request

SCHEMA = {"type": "object", "properties": {
    "file": {"type": "string"}, "line": {"type": "integer"},
    "edits": {"type": "array", "items": {"type": "object", "properties": {
        "old": {"type": "string"}, "new": {"type": "string"}}, "required": ["old", "new"]}}},
    "required": ["file", "line", "edits"]}
TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": p}} for n, d, p in [
    ("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    ("run_shell", "Run a command", {"type": "object", "properties": {"command": {"type": "string"},
                                                                      "timeout": {"type": "integer"}},
                                    "required": ["command"]}),
    ("edit_file", "Replace text in a file", SCHEMA),
]]
CASES = [
    ("plain", {}),
    ("json_object", {"response_format": {"type": "json_object"}}),
    ("json_schema", {"response_format": {"type": "json_schema",
                                         "json_schema": {"name": "edit", "strict": True, "schema": SCHEMA}}}),
    ("tools_auto", {"tools": TOOLS}),
    ("tool_call", {"tools": TOOLS, "tool_choice": "required"}),
]


def post(url, body):
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    messages = [{"role": "user", "content": "Fix the off-by-one in the loop of parse_header in src/gguf/gguf_read.c."}]
    runs = {name: [] for name, _ in CASES}
    for _ in range(a.reps):  # rounds over all cases: a machine's drift falls on each alike
        for name, extra in CASES:
            out = post(a.url, {"messages": messages, "max_tokens": a.max_tokens, "temperature": 0,
                               "wick": {"fresh": True}, **extra})
            runs[name].append((out["usage"]["prompt_tokens"], out["timings"]))
    rows = [{"case": name, "prompt": runs[name][0][0],
             "tokens": statistics.median(t["completion_tokens"] for _, t in runs[name]),
             "decode_tok_per_s": statistics.median(t["decode_tok_per_s"] for _, t in runs[name])} for name, _ in CASES]
    base = rows[0]["decode_tok_per_s"]
    print(f"{'case':<12} {'prompt':>6} {'tokens':>6} {'decode tok/s':>12} {'vs plain':>8}")
    for r in rows:
        r["ratio"] = r["decode_tok_per_s"] / base if base else 0.0
        print(f"{r['case']:<12} {r['prompt']:>6} {r['tokens']:>6.0f} {r['decode_tok_per_s']:>12.2f} {r['ratio']:>7.3f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
