#!/usr/bin/env python3
"""Agent replay: a 20-turn agent-style conversation against a running wick
server (OpenAI API), the way coding agents use it: a large system prompt with
tool definitions, the whole history resent every turn, tool calls whose
results (file contents, command output) grow the context to >= 16K tokens.

Odd turns end with the model's reply turned into a tool call (as an agent's
model would) and the tool's result appended; even turns append a new user
message. Reports per turn: prompt tokens, cached, recomputed (replay
included), replayed, the checkpoint used and TTFT; at the end total
recomputed vs total prompt tokens (target <= 10 %).

usage: bench/agent_replay.py --url http://127.0.0.1:8008 [--turns 20]
       [--target-tokens 16384] [--system-tokens 4096] [--max-tokens 32] [--json OUT]
Only the standard library is used."""
import argparse
import json
import sys
import time
import urllib.request

WORDS = ("def class return import self value result error config path file test "
         "buffer index token cache state model layer request server thread queue "
         "parse write read check update build merge branch commit module").split()


def post(url, path, body, timeout=3600):
    req = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.loads(r.read())
    return out, (time.time() - t0) * 1000.0


def n_tokens(url, text):
    out, _ = post(url, "/v1/tokenize", {"content": text, "parse_special": False})
    return len(out["tokens"])


def filler(seed, n_words):
    """Deterministic code-like text (a 'file' or 'command output')."""
    lines, s = [], seed
    line = []
    for i in range(n_words):
        s = (s * 1103515245 + 12345) & 0x7FFFFFFF
        line.append(WORDS[(s >> 8) % len(WORDS)])
        if len(line) >= 10:
            lines.append("    " + " ".join(line))
            line = []
    if line:
        lines.append("    " + " ".join(line))
    return "\n".join(lines)


TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_command", "description": "Run a shell command in the repository and return its output.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}},
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8008")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--target-tokens", type=int, default=16384, help="prompt size at the last turn")
    ap.add_argument("--system-tokens", type=int, default=4096, help="system prompt size (agent instructions)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--json", help="write the per-turn rows and totals here")
    a = ap.parse_args()

    # words -> tokens with this server's vocabulary
    probe = filler(1, 400)
    tok_per_word = n_tokens(a.url, probe) / 400.0
    sys_words = int(a.system_tokens / tok_per_word)
    system = ("You are a coding agent working in a C repository. Follow the project's style guide, "
              "run the tests before you answer, and explain your changes briefly.\n\n# Style guide\n"
              + filler(7, sys_words))
    n_tool_turns = (a.turns + 1) // 2
    grow = max(0, a.target_tokens - a.system_tokens - a.turns * (a.max_tokens + 40))
    result_words = int(grow / max(1, n_tool_turns) / tok_per_word)

    msgs = [{"role": "system", "content": system},
            {"role": "user", "content": "The build fails in src/cache. Find out why and fix it."}]
    rows = []
    for turn in range(1, a.turns + 1):
        body = {"messages": msgs, "tools": TOOLS, "max_tokens": a.max_tokens, "temperature": 0, "seed": 1}
        out, wall = post(a.url, "/v1/chat/completions", body)
        t = out.get("timings", {})
        ck = t.get("checkpoint") or {}
        row = {"turn": turn, "prompt": t.get("prompt_tokens", 0), "cached": t.get("cached_tokens", 0),
               "recomputed": t.get("recomputed_tokens", 0), "replayed": t.get("replayed_tokens", 0),
               "checkpoint": f'{ck.get("kind", "-")}@{ck.get("pos", -1)}', "ttft_ms": t.get("ttft_ms", 0.0),
               "prefill_tok_per_s": t.get("prefill_tok_per_s", 0.0), "wall_ms": wall}
        rows.append(row)
        print(f'turn {turn:2}  prompt {row["prompt"]:6}  cached {row["cached"]:6}  recomputed {row["recomputed"]:6}'
              f'  replayed {row["replayed"]:4}  {row["checkpoint"]:24}  ttft {row["ttft_ms"]:9.1f} ms', flush=True)
        m = out["choices"][0]["message"]
        reply = {"role": "assistant", "content": m.get("content") or ""}
        if m.get("reasoning_content"):
            reply["reasoning_content"] = m["reasoning_content"]
        if turn % 2 == 1:
            # the agent's model asks for a tool; its result comes back
            call_id = f"call_{turn}"
            if turn % 4 == 1:
                call = {"name": "read_file", "arguments": json.dumps({"path": f"src/cache/file{turn}.c"})}
            else:
                call = {"name": "run_command", "arguments": json.dumps({"cmd": f"make test-{turn}"})}
            reply["tool_calls"] = m.get("tool_calls") or [{"id": call_id, "type": "function", "function": call}]
            call_id = reply["tool_calls"][0].get("id", call_id)
            msgs.append(reply)
            msgs.append({"role": "tool", "tool_call_id": call_id, "content": filler(1000 + turn, result_words)})
        else:
            msgs.append(reply)
            msgs.append({"role": "user", "content": f"Good. Now step {turn // 2 + 1}: check the next failing test "
                                                     f"and tell me what you change."})
    tot_p = sum(r["prompt"] for r in rows)
    tot_r = sum(r["recomputed"] for r in rows)
    tot_rep = sum(r["replayed"] for r in rows)
    ratio = tot_r / tot_p if tot_p else 0.0
    cold = rows[0]["ttft_ms"] if rows else 0.0
    follow = [r["ttft_ms"] for r in rows[1:]]
    print(f"\ntotal prompt tokens {tot_p}, recomputed {tot_r} ({100 * ratio:.1f} %), replayed {tot_rep}; "
          f"last prompt {rows[-1]['prompt'] if rows else 0} tokens")
    if follow:
        print(f"TTFT: cold {cold:.0f} ms; follow-ups median {sorted(follow)[len(follow) // 2]:.0f} ms, "
              f"max {max(follow):.0f} ms")
    print("target <= 10 %:", "PASS" if ratio <= 0.10 else "FAIL")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "total_prompt": tot_p, "total_recomputed": tot_r, "total_replayed": tot_rep,
                       "ratio": ratio}, f, indent=1)
    return 0 if ratio <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
