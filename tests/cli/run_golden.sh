#!/usr/bin/env bash
# `wick run` on every golden model: --tokens/--dump-logits reproduces the
# recorded llama.cpp logits of the first rows within the case's tol (a causal
# model's first rows do not depend on later tokens), a text prompt generates,
# and broken files give one line on stderr and a non-zero exit.
set -u
WICK=${WICK_BIN:-build/wick}
GOLDEN=${WICK_GOLDEN:-$(dirname "$0")/../../../shared/golden}
if [ ! -f "$GOLDEN/MANIFEST.json" ]; then
    if [ "${CI:-}" = true ]; then echo "golden data missing at $GOLDEN" >&2; exit 1; fi
    echo "skip: golden data missing at $GOLDEN"; exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-run-golden.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
N=12 # rows compared per model

# one line per n64 case: model path, logits path, tol, first N token ids
python3 - "$GOLDEN" $N >"$tmp/cases" <<'PY'
import json, sys
g, n = sys.argv[1], int(sys.argv[2])
m = json.load(open(f"{g}/MANIFEST.json"))
for c in m["logit_cases"]:
    if c["n_tokens"] != 64:
        continue
    print(c["model"], c["logits"], c["tol"], c["n_vocab"], ",".join(map(str, c["tokens"][:n])))
PY

while read -r model logits tol n_vocab ids; do
    name=$(basename "$model" .gguf)
    if ! "$WICK" run -m "$GOLDEN/$model" --tokens "$ids" --dump-logits "$tmp/$name.bin" -t 2 \
            >"$tmp/out" 2>"$tmp/err"; then
        echo "FAIL $name: wick run --dump-logits failed:"; cat "$tmp/err"; fails=$((fails + 1)); continue
    fi
    if ! res=$(python3 - "$tmp/$name.bin" "$GOLDEN/$logits" "$n_vocab" $N "$tol" <<'PY'
import struct, sys
got_p, ref_p, nv, n, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
got = open(got_p, "rb").read()
ref = open(ref_p, "rb").read()[: n * nv * 4]
if len(got) != n * nv * 4:
    print(f"dump has {len(got)} bytes, want {n * nv * 4}"); sys.exit(1)
a = struct.unpack(f"<{n * nv}f", got)
b = struct.unpack(f"<{n * nv}f", ref)
d = max(abs(x - y) for x, y in zip(a, b))
print(f"max |diff| {d:.4g} (tol {tol})")
sys.exit(0 if d <= tol else 1)
PY
    ); then
        echo "FAIL $name: $res"; fails=$((fails + 1)); continue
    fi
    # a text prompt through the model's own tokenizer generates and reports timings
    if ! "$WICK" run -m "$GOLDEN/$model" -p "hello world" -n 4 --temp 0 -t 2 >"$tmp/out" 2>"$tmp/err" \
            || ! grep -q '^generated: ' "$tmp/err"; then
        echo "FAIL $name: text prompt:"; cat "$tmp/err"; fails=$((fails + 1)); continue
    fi
    echo "ok   $name: $res"
done <"$tmp/cases"

# broken inputs: one stderr line naming the file, non-zero exit, no crash
src=$GOLDEN/models/tiny-qwen3-Q4_K.gguf
: >"$tmp/empty.gguf"
printf 'not a model\n' >"$tmp/text.gguf"
head -c 4000 "$src" >"$tmp/trunc.gguf"
head -c $(($(wc -c <"$src") - 100)) "$src" >"$tmp/short.gguf"
{ head -c 64 "$src"; printf '\xff\xff\xff\xff\xff\xff\xff\x7f'; tail -c +73 "$src"; } >"$tmp/corrupt.gguf"
for f in empty text trunc short corrupt missing; do
    "$WICK" run -m "$tmp/$f.gguf" -p hi -n 2 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ $rc -eq 0 ] || [ $rc -ge 128 ] || [ "$lines" -ne 1 ] || ! grep -q "^wick run: .*$f.gguf" "$tmp/err"; then
        echo "FAIL broken $f: rc=$rc, stderr:"; cat "$tmp/err"; fails=$((fails + 1))
    else
        echo "ok   broken $f: $(cat "$tmp/err")"
    fi
done

echo "$fails failed"
[ "$fails" -eq 0 ]
