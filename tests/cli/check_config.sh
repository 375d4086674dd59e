#!/usr/bin/env bash
# wick check / wick sha256 / wick serve --config on real files: a ready model
# says ready (exit 0) with one line per finding and valid --json; every
# failure the issue lists is a FAIL line and exit 1 (a manifest mismatch, an
# unlisted file, a malformed manifest, a busy port with its holder named, a
# memory budget too small with the largest context that fits, a draft with
# another vocabulary, a missing file); serve refuses with the same message;
# a JSON config holds serve options, the command line overrides it,
# --print-config shows the merge, and bad configs are one-line errors.
set -u
WICK=${WICK_BIN:-build/wick}
WICK=$(cd "$(dirname "$WICK")" && pwd)/$(basename "$WICK") # the tests cd
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
GOLDEN=${WICK_GOLDEN:-$SRC/../shared/golden}
if [ ! -f "$GOLDEN/MANIFEST.json" ]; then
    if [ "${CI:-}" = true ]; then echo "golden data missing at $GOLDEN" >&2; exit 1; fi
    echo "skip: golden data missing at $GOLDEN"; exit 77
fi
if ! command -v node >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then echo "node missing (CI requires it)" >&2; exit 1; fi
    echo "skip: node missing"; exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-check.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# expect RC PATTERN ARGS...: wick ARGS exits RC and its output matches PATTERN
expect() {
    local want=$1 pat=$2
    shift 2
    "$WICK" "$@" >"$tmp/out" 2>&1
    local rc=$?
    if [ $rc -ne "$want" ] || ! grep -Eq -- "$pat" "$tmp/out"; then
        fail "wick $*: rc=$rc (want $want), no /$pat/ in:"; sed 's/^/    /' "$tmp/out"
    else
        echo "ok   wick ${1:-} ... -> $(grep -Em1 -- "$pat" "$tmp/out" | cut -c1-150)"
    fi
}

cp "$GOLDEN/models/tiny-qwen3-Q8_0.gguf" "$tmp/model.gguf"
"$WICK" synth -q --preset tiny -o "$tmp/chat.gguf" # has a chat template and Qwen special tokens

# ready, text and JSON
expect 0 '^ready: true' check -m "$tmp/chat.gguf" --port 0
grep -Eq '^  ok   template +qwen3' "$tmp/out" || fail "template not checked ok on the synth model"
"$WICK" check -m "$tmp/chat.gguf" --port 0 --json >"$tmp/j" 2>/dev/null
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1])); if (!r.ready || !r.memory.n_ctx ||
    r.memory.total_bytes <= r.memory.weight_bytes || !r.findings.some(f => f.name === "memory")) process.exit(1)' "$tmp/j" \
    || fail "--json: $(cat "$tmp/j")"
# a model without a chat template: a warning, still ready
expect 0 'warn template' check -m "$tmp/model.gguf" --port 0
# a template whose markers the vocabulary lacks still serves (as plain text), with a warning; an unknown one fails
expect 0 "warn template +chatml: its marker text '<\|im_start\|>system' is not a token" \
    check -m "$tmp/model.gguf" --chat-template chatml --port 0
expect 1 'FAIL template .*nosuch' check -m "$tmp/model.gguf" --chat-template nosuch --port 0

# sha256 and manifests
(cd "$tmp" && "$WICK" sha256 -q model.gguf chat.gguf >SHA256SUMS) || fail "wick sha256"
(cd "$tmp" && sha256sum -c --quiet SHA256SUMS) || fail "wick sha256 output is not what sha256sum -c reads"
expect 0 'ok   sha256 +2 files match' check -m "$tmp/model.gguf" --manifest "$tmp/SHA256SUMS" --port 0
expect 1 "sha256: .*missing.gguf: cannot open" sha256 -q "$tmp/model.gguf" "$tmp/missing.gguf"
cp "$tmp/model.gguf" "$tmp/other.gguf"
expect 1 'FAIL sha256 .*other.gguf is not listed' check -m "$tmp/other.gguf" --manifest "$tmp/SHA256SUMS" --port 0
printf 'x' | dd of="$tmp/model.gguf" bs=1 seek=5000 conv=notrunc 2>/dev/null
expect 1 'FAIL sha256 +model.gguf does not match SHA256SUMS' check -m "$tmp/model.gguf" --manifest "$tmp/SHA256SUMS" --port 0
cp "$GOLDEN/models/tiny-qwen3-Q8_0.gguf" "$tmp/model.gguf"
echo "not a digest line" >"$tmp/BAD"
expect 1 'FAIL sha256 .*BAD:1: not a SHA-256 line' check -m "$tmp/model.gguf" --manifest "$tmp/BAD" --port 0

# files, memory, context, draft
expect 1 'FAIL files +model .*nope.gguf: No such file' check -m "$tmp/nope.gguf" --port 0
expect 1 'FAIL memory .*not even 256 tokens' check -m "$tmp/model.gguf" --mem 1M --port 0
expect 1 'FAIL memory .*context 100000 tokens \(--ctx\) does not fit --mem 64.00 MiB.*largest that fits is [0-9]+' \
    check -m "$tmp/model.gguf" --mem 64M --cache-mem 1M --ctx 100000 --port 0
expect 0 'warn context +--ctx 8192 is above the trained context 4096' check -m "$tmp/model.gguf" --ctx 8192 --port 0
expect 0 'ok   memory +context 4096 tokens: trained 4096, fits' check -m "$tmp/model.gguf" --port 0
expect 0 'ok   draft +tiny-qwen3-Q4_0.gguf shares the vocabulary' check -m "$tmp/model.gguf" \
    --draft "$GOLDEN/models/tiny-qwen3-Q4_0.gguf" --port 0
expect 1 'FAIL draft .*has 1024 tokens, the model 260' check -m "$tmp/model.gguf" --draft "$tmp/chat.gguf" --port 0
expect 1 'FAIL files +aux table .*not an auxiliary table' check -m "$tmp/model.gguf" --aux "$tmp/chat.gguf" --port 0
expect 2 'which model' check --port 0

# a busy port: named with its holder, never touched; serve refuses with the same line
node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => console.log(s.address().port))' \
    >"$tmp/busy" &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/busy" ] && break; sleep 0.1; done
busy=$(cat "$tmp/busy")
expect 1 "FAIL port +127.0.0.1:$busy is in use by pid ${pids[0]} \(node\)" check -m "$tmp/model.gguf" --port "$busy"
expect 1 "wick serve: not ready: port: 127.0.0.1:$busy is in use by pid ${pids[0]}" serve -m "$tmp/model.gguf" --port "$busy"
kill -0 "${pids[0]}" 2>/dev/null || fail "the process holding the port is gone"

# config files
cat >"$tmp/serve.json" <<JSON
{"model": "$tmp/chat.gguf", "ctx": 2048, "kv_type": "q8_0", "attn-policy": "approx", "port": 0,
 "strict-model-id": true, "api-key": "s3cret", "aux": [], "verbose": false}
JSON
"$WICK" serve --config "$tmp/serve.json" --ctx 1024 --print-config >"$tmp/eff" 2>"$tmp/err" || fail "print-config: $(cat "$tmp/err")"
node -e 'const c = JSON.parse(require("fs").readFileSync(process.argv[1]));
    const want = {ctx: 1024, "kv-type": "q8_0", "attn-policy": "approx", port: 0, "strict-model-id": true, "api-key": "<hidden>"};
    for (const [k, v] of Object.entries(want)) if (c[k] !== v) { console.error(k, c[k]); process.exit(1); }
    if (!c.model.endsWith("chat.gguf") || "verbose" in c) process.exit(1)' "$tmp/eff" || fail "print-config: $(cat "$tmp/eff")"
expect 0 'ok   memory +context 2048 tokens \(--ctx\) fits.* at q8_0' check --config "$tmp/serve.json"
echo '{"ctx": 512, "contxt": 4}' >"$tmp/typo.json"
expect 2 "config .*typo.json: unknown key 'contxt'" serve --config "$tmp/typo.json"
echo '{"strict-model-id": "yes"}' >"$tmp/flag.json"
expect 2 "'strict-model-id' is a flag: give true or false" serve --config "$tmp/flag.json"
echo '{"ctx": {"n": 1}}' >"$tmp/nested.json"
expect 2 "'ctx' takes a value" serve --config "$tmp/nested.json"
echo '{"ctx": 512,' >"$tmp/broken.json"
expect 2 "config .*broken.json:[0-9]+:[0-9]+:" serve --config "$tmp/broken.json"
expect 2 "wick serve: --ctx must be an integer" serve --config "$tmp/serve.json" --ctx 5
expect 2 "config .*none.json" serve --config "$tmp/none.json"
# serve with the config: it starts on the config's settings, the command line's port winning
"$WICK" serve --config "$tmp/serve.json" --port 0 -t 1 >"$tmp/serve.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$tmp/serve.out" && break; sleep 0.1; done
grep -q "context 2048 tokens" "$tmp/serve.out" && grep -q "listening on" "$tmp/serve.out" \
    || fail "serve --config: $(cat "$tmp/serve.out")"

[ $fails -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
[ $fails -eq 0 ]
