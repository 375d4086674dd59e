#!/usr/bin/env bash
# Prefill speed of a cold prompt at several lengths, dense vs approximate
# attention and F16 vs Q8_0 KV cache, on synthetic qwen3-0.6b and
# qwen3.5-0.8b (Q8_0 weights): the long-context table of README.md.
#   bench/prefill_policy.sh [OUT_DIR]        (default /tmp/wick-prefill-policy)
# Environment: WICK (default build/wick), THREADS (2), LENGTHS
# (4096,16384,32768), NARROW (an extra narrow approximate policy, default
# approx:1024,4096,512). One JSON line per measurement lands in OUT_DIR/*.json;
# the table is printed last. Takes about 35 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/wick-prefill-policy}
wick=${WICK:-build/wick}
threads=${THREADS:-2}
lengths=${LENGTHS:-4096,16384,32768}
narrow=${NARROW:-approx:1024,4096,512}
mkdir -p "$out"
for m in qwen3-0.6b qwen3.5-0.8b; do
  f="$out/$m-q8_0.gguf"
  [ -f "$f" ] || "$wick" synth -q --preset "$m" --type q8_0 -o "$f"
  run() { # name policy kv lengths
    echo "== $m $1" >&2
    "$wick" bench -m "$f" -p "$4" -n 0 -r 1 -t "$threads" -q --attn-policy "$2" --kv-type "$3" --json \
      > "$out/$m.$1.json"
  }
  run dense-q8 dense q8_0 "$lengths"
  run approx-q8 approx q8_0 "$lengths"
  run dense-f16 dense f16 "$lengths"
  [ "$m" = qwen3-0.6b ] && run narrow-q8 "$narrow" q8_0 "${lengths##*,}"
done
python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    model, name = os.path.basename(path)[:-5].rsplit(".", 1)
    for line in open(path):
        r = json.loads(line)
        rows.setdefault(model, {}).setdefault(name, {})[r["n"]] = r
print("| model | prompt | dense Q8_0 KV | approx Q8_0 KV | approx / dense | dense F16 KV | Q8_0 / F16 | narrow approx | narrow / dense |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for model, by in rows.items():
    for n in sorted(by.get("dense-q8", {})):
        d = by["dense-q8"][n]["tok_per_s_median"]
        a = by.get("approx-q8", {}).get(n, {}).get("tok_per_s_median")
        f = by.get("dense-f16", {}).get(n, {}).get("tok_per_s_median")
        w = by.get("narrow-q8", {}).get(n, {}).get("tok_per_s_median")
        fmt = lambda v: "%.1f" % v if v else "—"
        ratio = lambda x, y: "%.2f" % (x / y) if x and y else "—"
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (model, n, fmt(d), fmt(a), ratio(a, d), fmt(f), ratio(d, f), fmt(w), ratio(w, d)))
for model, by in rows.items():
    for name in ("dense-q8", "dense-f16"):
        r = next(iter(by.get(name, {}).values()), None)
        if r: print("%s KV %s: %d bytes/token" % (model, r["kv_type"], r["kv_bytes_per_token"]))
PY
