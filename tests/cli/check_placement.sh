#!/usr/bin/env bash
# wick check's placement with --device cuda:N,M and --gpu-mem (docs/multi_gpu.md): one line
# per GPU entry with its layers and bytes, FAIL when a GPU's entries do not fit its
# --gpu-mem, the JSON array. Needs a CUDA build (a GPU is not needed: without one the free
# memory is "unknown" and --gpu-mem alone is the budget); skipped (77) in a build without.
set -euo pipefail
WICK_BIN=${WICK_BIN:?WICK_BIN not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$WICK_BIN" synth -q --arch qwen35 --layers 8 -o "$tmp/m.gguf"
"$WICK_BIN" check -m "$tmp/m.gguf" --device cuda:0,1 >"$tmp/out" 2>&1 || true
if grep -q "built without CUDA" "$tmp/out"; then
    echo "check_placement: skipped: this wick has no CUDA"
    exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
set +e
"$WICK_BIN" check -m "$tmp/m.gguf" --device cuda:0,1 --gpu-mem 4G --ctx 8192 --cache-mem 64M >"$tmp/out" 2>&1
set -e
[ "$(grep -c ' placement ' "$tmp/out")" = 2 ] || fail "two placement lines: $(cat "$tmp/out")"
grep -q "ok   placement cuda:0 layers 0-" "$tmp/out" || fail "cuda:0 line: $(cat "$tmp/out")"
grep -q "ok   placement cuda:1 layers .*-7 " "$tmp/out" || fail "cuda:1 holds the last layer: $(cat "$tmp/out")"
grep -q "fits budget 4.00 GiB" "$tmp/out" || fail "budget named: $(cat "$tmp/out")"

# the same GPU twice: one cap for both entries (the GPU's bytes in all against it); a cap below the weights fails on the GPU and says so
set +e
"$WICK_BIN" check -m "$tmp/m.gguf" --device cuda:0,0 --gpu-mem 1M --ctx 8192 >"$tmp/out" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "a cap below the weights: exit $rc"
grep -q "FAIL placement cuda:0 layers 0-.*(cuda:0 holds .* in all); does NOT fit budget 1.00 MiB (--gpu-mem 1.00 MiB" "$tmp/out" ||
    fail "shared cap: $(cat "$tmp/out")"

set +e
"$WICK_BIN" check -m "$tmp/m.gguf" --device cuda:0,1 --gpu-mem 4G --ctx 8192 --json >"$tmp/json" 2>/dev/null
set -e
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const p = r.placement;
if (p.length !== 2 || p[0].layer_first !== 0 || p[1].layer_end !== 8 || p[0].layer_end !== p[1].layer_first)
  throw new Error("layers: " + JSON.stringify(p));
for (const d of p) {
  const sum = d.weight_bytes + d.kv_bytes + d.state_bytes + d.checkpoint_bytes + d.scratch_bytes;
  if (sum !== d.total_bytes || !d.fits || d.cap_bytes !== 4 * 2 ** 30) throw new Error("bytes: " + JSON.stringify(d));
}' "$tmp/json" || fail "json: $(cat "$tmp/json")"
echo "check_placement: ok"
