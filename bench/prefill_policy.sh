#!/usr/bin/env bash
# Prefill speed of a cold prompt at several lengths, dense vs approximate
# attention and F16 vs Q8_0 KV cache, on synthetic qwen3-0.6b and
# qwen3.5-0.8b (Q8_0 weights): the long-context table of README.md.
#   bench/prefill_policy.sh [OUT_DIR]        (default /tmp/wick-prefill-policy)
# Environment: WICK (default build/wick), THREADS (2), LENGTHS
# (4096,16384,32768: the dense Q8_0-KV runs), APPROX_LENGTHS (32768: below
# global + window + dense tail = 18432 tokens the default policy is the dense
# computation bit for bit, so it is not re-timed there), F16_LENGTHS
# (4096,16384: the F16-KV control), NARROW (an extra narrow policy timed at
# NARROW_LENGTHS, default approx:1024,4096,512 at 32768, qwen3-0.6b only).
# One JSON line per measurement lands in OUT_DIR/<model>.<run>.json; a run
# whose file is already there is kept (delete it to re-measure). The table is
# printed last. About an hour on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/wick-prefill-policy}
wick=${WICK:-build/wick}
threads=${THREADS:-2}
lengths=${LENGTHS:-4096,16384,32768}
approx_lengths=${APPROX_LENGTHS:-32768}
f16_lengths=${F16_LENGTHS:-4096,16384}
narrow=${NARROW:-approx:1024,4096,512}
narrow_lengths=${NARROW_LENGTHS:-32768}
mkdir -p "$out"
for m in qwen3-0.6b qwen3.5-0.8b; do
  f="$out/$m-q8_0.gguf"
  [ -f "$f" ] || "$wick" synth -q --preset "$m" --type q8_0 -o "$f"
  run() { # name policy kv lengths
    local dst="$out/$m.$1.json"
    if [ -s "$dst" ]; then echo "== $m $1: kept $dst" >&2; return; fi
    echo "== $m $1 ($4)" >&2
    "$wick" bench -m "$f" -p "$4" -n 0 -r 1 -t "$threads" -q --attn-policy "$2" --kv-type "$3" --json > "$dst.part"
    mv "$dst.part" "$dst"
  }
  run dense-q8 dense q8_0 "$lengths"
  run approx-q8 approx q8_0 "$approx_lengths"
  run dense-f16 dense f16 "$f16_lengths"
  if [ "$m" = qwen3-0.6b ]; then run narrow-q8 "$narrow" q8_0 "$narrow_lengths"; fi
done
python3 - "$out" "$narrow" <<'PY'
import json, sys, glob, os
out, narrow = sys.argv[1], sys.argv[2]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    model, name = os.path.basename(path)[:-5].rsplit(".", 1)
    for line in open(path):
        r = json.loads(line)
        rows.setdefault(model, {}).setdefault(name, {})[r["n"]] = r
fmt = lambda v: "%.1f" % v if v else "—"
ratio = lambda x, y: "**%.2f**" % (x / y) if x and y else "—"
print("| model | prompt | dense, Q8_0 KV | approx (8192/8192/2048), Q8_0 KV | approx / dense | dense, F16 KV | Q8_0 / F16 KV | %s | narrow / dense |" % narrow)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for model, by in rows.items():
    for n in sorted(by.get("dense-q8", {})):
        get = lambda name: by.get(name, {}).get(n, {}).get("tok_per_s_median")
        d, a, f, w = get("dense-q8"), get("approx-q8"), get("dense-f16"), get("narrow-q8")
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (model, n, fmt(d), fmt(a), ratio(a, d), fmt(f), ratio(d, f), fmt(w), ratio(w, d)))
for model, by in rows.items():
    for name in ("dense-q8", "dense-f16"):
        r = next(iter(by.get(name, {}).values()), None)
        if r: print("%s: KV %s %d bytes/token" % (model, r["kv_type"], r["kv_bytes_per_token"]))
PY
