#!/usr/bin/env bash
# Speculative decoding on one model: what verification costs and what each draft source
# gains, measured by wick itself (the greedy outputs with and without are checked equal).
#   bench/spec.sh MODEL.gguf [OUT_DIR]            (default /tmp/wick-spec)
# 1. vk<K>: verifying K = 1, 2, 4, 6, 8 drafts in one batch (rolled back) against one decode
#    step (tg): the cost ratio and the speed-up ceiling at full acceptance.
# 2. prompt lookup (ngram) on a code-edit task (bench/spec/code_edit.txt: repeat a pasted
#    function with one variable renamed), the workload where copying shines.
# 3. the model's MTP block (when the file has one) and a draft model (DRAFT=FILE) on free
#    code generation (bench/spec/code_gen.txt).
# Environment: WICK (default build/wick), THREADS (2), N (tokens generated, 256), REPS (3),
# DRAFT (a draft model, optional), DEVICE (cpu). The prompts use ChatML markup
# (<|im_start|>...), which Qwen-family models and wick's own read as their template.
# One JSON line per measurement in OUT_DIR/<model>.<test>.json, then a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/spec.sh MODEL.gguf [OUT_DIR]}
out=${2:-/tmp/wick-spec}
wick=${WICK:-build/wick}
threads=${THREADS:-2}
n=${N:-256}
reps=${REPS:-3}
device=${DEVICE:-cpu}
name=$(basename "$model" .gguf)
mkdir -p "$out"
common=(-m "$model" -t "$threads" -r "$reps" --device "$device" -q --json)

echo "== $name: verification cost" >&2
"$wick" bench "${common[@]}" -p 0 -n 32 --verify 1,2,4,6,8 > "$out/$name.verify.json"

echo "== $name: ngram on the code-edit prompt" >&2
"$wick" bench "${common[@]}" -n "$n" --spec ngram --prompt-file bench/spec/code_edit.txt > "$out/$name.ngram.json"

if "$wick" info "$model" 2>/dev/null | grep -q '+ [0-9]* MTP'; then
  echo "== $name: mtp on free code generation" >&2
  "$wick" bench "${common[@]}" -n "$n" --spec mtp --prompt-file bench/spec/code_gen.txt > "$out/$name.mtp.json"
fi
if [ -n "${DRAFT:-}" ]; then
  echo "== $name: draft model $(basename "$DRAFT") on free code generation" >&2
  "$wick" bench "${common[@]}" -n "$n" --spec draft --draft "$DRAFT" --prompt-file bench/spec/code_gen.txt \
    > "$out/$name.draft.json"
fi

python3 - "$out" "$name" <<'PY'
import json, sys, glob, os
out, name = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for f in sorted(glob.glob(os.path.join(out, name + ".*.json"))) for l in open(f) if l.strip()]
print(f"| {name} | t/s | relative | acceptance | accepted/step |\n|---|---:|---:|---:|---:|")
for r in rows:
    if r["test"].startswith("tg") and "spec" not in r:
        print(f"| decode step (tg) | {r['tok_per_s_median']:.2f} | 1.00 | | |")
    elif r["test"].startswith("vk"):
        k = int(r["test"][2:])
        print(f"| verify {k} drafts | {r['ms_per_step']:.1f} ms | {r['cost_vs_decode']:.2f} x step | "
              f"ceiling {(k + 1) / r['cost_vs_decode']:.2f} x | |")
    elif "spec" in r:
        print(f"| {r['spec']} vs plain | {r['spec_tok_per_s']:.2f} vs {r['plain_tok_per_s']:.2f} | "
              f"{r['speedup']:.2f} x | {100 * r['draft_acceptance']:.1f} % | {r['draft_accepted_per_step']:.2f} |")
PY
