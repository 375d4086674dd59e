#!/usr/bin/env bash
# CI: `wick eval cache` on a small hybrid model (synthetic tiny-qwen35: Gated
# DeltaNet + attention, so reuse needs checkpoints). The eval starts the
# server itself (127.0.0.1, free port, --cache-dir in a temp folder), runs
# the scripted conversation including a restart, and must pass every check:
# answers equal cache-bypassing runs, no stale reuse after an early edit,
# recomputed <= new tail + slack for each follow-up, restart restores from disk.
set -euo pipefail
WICK_BIN=${WICK_BIN:?WICK_BIN not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$WICK_BIN" eval cache --help >/dev/null 2>&1; then
    echo "FAIL: wick eval cache missing"; exit 1
fi
# F32 weights: cached and fresh runs prefill in different chunk sizes, and F32
# keeps their logits within ~1e-5, so greedy answers cannot flip on rounding.
"$WICK_BIN" synth -q --preset tiny-qwen35 --type F32 -o "$tmp/model.gguf"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server="$WICK_BIN serve -m $tmp/model.gguf --host 127.0.0.1 --port $port -t 2 --ctx 4096 --cache-dir $tmp/cache 2>>$tmp/server.log"
status=0
"$WICK_BIN" eval cache --url "http://127.0.0.1:$port" --server-cmd "$server" --pad-words 40 --json \
    >"$tmp/eval.json" || status=$?
python3 - "$tmp/eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
steps = {s["step"]: s for s in r["steps"]}
want = ["cold", "follow_up", "tool_result", "rewrite_last_user", "early_fact_changed",
        "cancel_then_retry", "restart_follow_up"]
missing = [w for w in want if w not in steps]
assert not missing, f"missing steps: {missing}"
bad = []
for s in r["steps"]:
    assert "skipped" not in s, s
    for c in s["checks"]:
        if not c["pass"]:
            bad.append(f'{s["step"]}: {c["check"]}: {c["detail"]}')
    if "cancelled_in" in s: print("  (dropped request stopped during its", s["cancelled_in"] + ")")
    print(f'{s["step"]:20} prompt {s["prompt_tokens"]:5} cached {s["cached_tokens"]:5} '
          f'recomputed {s["recomputed_tokens"]:5} checkpoint {s["checkpoint_kind"]}@{s["checkpoint_pos"]} '
          f'ttft {s["ttft_ms"]:.1f} ms')
for b in bad:
    print("FAIL", b)
assert not bad, "failed checks"
# follow-ups reuse most of the prompt
for name in ["follow_up", "tool_result", "rewrite_last_user", "cancel_then_retry", "restart_follow_up"]:
    s = steps[name]
    assert s["cached_tokens"] > 0, (name, s)
assert steps["restart_follow_up"]["from_disk"], steps["restart_follow_up"]
print("eval cache: all checks pass")
PY
if [ "$status" -ne 0 ]; then
    echo "FAIL: wick eval cache exited $status"; tail -20 "$tmp/server.log"; exit 1
fi
