#!/usr/bin/env bash
# `wick serve` without -m serves models/wick-coder.gguf from beside the
# binary's folder (what `build/wick serve` finds in a checkout), under the
# model's own name; without that file it exits with a message naming where
# it looked and the ways out (-m, --demo); --demo with -m is refused. The
# model here is the micro checkpoint converted (its chat template must be
# recognised for a chat completion to answer).
set -u
WICK=${WICK_BIN:?WICK_BIN not set}
SRC=${WICK_SOURCE_DIR:-$(dirname "$0")/../..}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-serve-default.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/run"
cp "$WICK" "$tmp/bin/wick"
cd "$tmp/run"

if "$tmp/bin/wick" serve --port 0 >/dev/null 2>"$tmp/err"; then echo "FAIL: served without a model"; exit 1; fi
grep -q "models/wick-coder.gguf" "$tmp/err" && grep -q -- "--demo" "$tmp/err" ||
    { echo "FAIL: unclear message: $(cat "$tmp/err")"; exit 1; }
if "$tmp/bin/wick" serve --demo -m x.gguf --port 0 >/dev/null 2>"$tmp/err"; then
    echo "FAIL: --demo with -m accepted"; exit 1
fi

mkdir -p "$tmp/models"
"$WICK" convert "$SRC/tests/models/micro" -o "$tmp/models/wick-coder.gguf" --type q8_0 --name wick-micro-test \
    >/dev/null || { echo "FAIL: convert"; exit 1; }
"$tmp/bin/wick" serve --port 0 -t 2 >"$tmp/log" 2>&1 &
pid=$!
port=
for _ in $(seq 1 300); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: server did not start: $(cat "$tmp/log")"; exit 1; }
python3 - "$port" <<'PY' || exit 1
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
models = json.load(urllib.request.urlopen(base + "/v1/models"))
ids = [m["id"] for m in models["data"]]
assert ids == ["wick-micro-test"], ids
assert not models["data"][0]["meta"].get("synthetic"), models["data"][0]["meta"]
body = {"model": "wick-micro-test", "messages": [{"role": "user", "content": "def f(x):"}], "max_tokens": 8,
        "temperature": 0}
req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req))
assert r["usage"]["completion_tokens"] >= 1, r
print("serve_default_model: ok (model", ids[0], "answered", r["usage"]["completion_tokens"], "tokens)")
PY
