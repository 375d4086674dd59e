#!/usr/bin/env bash
# CI smoke test for `wick synth` + `wick bench`: synthesize the tiny preset,
# run a tiny benchmark, check the JSON lines parse and carry the documented
# fields. No timing assertions.
set -euo pipefail
WICK_BIN=${WICK_BIN:?WICK_BIN not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$WICK_BIN" synth --help >"$tmp/help.txt"
grep -q -- "--preset" "$tmp/help.txt"
"$WICK_BIN" synth --list >"$tmp/list.txt"
grep -q "qwen3.5-35b-a3b" "$tmp/list.txt"
"$WICK_BIN" synth -q --preset tiny -o "$tmp/tiny.gguf"
test -s "$tmp/tiny.gguf"
# unknown preset and bad type fail with a message
if "$WICK_BIN" synth -q --preset no-such-model -o "$tmp/x.gguf" 2>"$tmp/err"; then
    echo "FAIL: unknown preset accepted"; exit 1
fi
grep -q "unknown preset" "$tmp/err"
if "$WICK_BIN" synth -q --type q9_x -o "$tmp/x.gguf" 2>"$tmp/err"; then
    echo "FAIL: unknown type accepted"; exit 1
fi

"$WICK_BIN" bench -m "$tmp/tiny.gguf" -p 32 -n 8 -d 0,16 -r 1 -t 2 --json -q >"$tmp/bench.jsonl"
python3 - "$tmp/bench.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tests = sorted((r["test"], r["depth"]) for r in rows)
assert tests == [("pp32", 0), ("pp32", 16), ("tg8", 0), ("tg8", 16)], tests
for r in rows:
    for k in ("test", "depth", "n", "reps", "tok_per_s_median", "tok_per_s_min", "tok_per_s_max",
              "threads", "model_bytes", "bpw"):
        assert k in r, (k, r)
    assert r["reps"] == 1 and r["threads"] == 2
    assert r["n"] == int(r["test"][2:])
    assert r["tok_per_s_median"] > 0 and math.isfinite(r["tok_per_s_median"])
    assert r["tok_per_s_min"] <= r["tok_per_s_median"] <= r["tok_per_s_max"]
    assert 8.0 < r["bpw"] < 9.0, r["bpw"]  # Q8_0 weights + F32 norms
    assert ("gflop_per_s" in r) == r["test"].startswith("pp")
    assert ("gbytes_per_s" in r) == r["test"].startswith("tg")
print("bench JSON ok:", len(rows), "rows")
PY
# a hybrid (Gated DeltaNet) MoE model: depth means restoring recurrent state, not just truncating KV
"$WICK_BIN" synth -q --preset tiny-qwen35moe --type q4_k_m -o "$tmp/hybrid.gguf"
"$WICK_BIN" bench -m "$tmp/hybrid.gguf" -p 16 -n 4 -d 0,8 -r 2 -t 1 --json -q >"$tmp/hybrid.jsonl"
python3 -c 'import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; assert len(rows)==4 and all(r["tok_per_s_median"]>0 and r["arch"]=="qwen35moe" for r in rows), rows' "$tmp/hybrid.jsonl"
# batched decode of several sequences (bs<N>) beside one stream, at depth 0 and 8 of the hybrid
"$WICK_BIN" bench -m "$tmp/hybrid.gguf" -p 0 -n 4 --seqs 1,3 -d 0,8 -r 1 -t 1 --json -q >"$tmp/bs.jsonl"
python3 - "$tmp/bs.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert sorted((r["test"], r["depth"]) for r in rows) == [("bs1", 0), ("bs1", 8), ("bs3", 0), ("bs3", 8), ("tg4", 0), ("tg4", 8)], rows
for r in rows:
    if r["test"].startswith("bs"):
        assert r["ms_per_step"] > 0 and r["speedup_vs_one"] > 0 and r["cost_vs_decode"] > 0, r
        assert "gbytes_per_s" not in r and "gflop_per_s" not in r, r
PY
if "$WICK_BIN" bench -m "$tmp/tiny.gguf" --seqs 65 -q 2>"$tmp/err"; then
    echo "FAIL: --seqs 65 accepted"; exit 1
fi
grep -q "at most 64 sequences" "$tmp/err"
# the table form
"$WICK_BIN" bench -m "$tmp/tiny.gguf" -p 16 -n 4 -r 1 -t 1 -q >"$tmp/table.md"
grep -q "^| pp16 | 0 |" "$tmp/table.md"
grep -q "^| tg4 | 0 |" "$tmp/table.md"
echo "PASS"
