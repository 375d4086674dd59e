#!/usr/bin/env bash
# `wick quantize`: requantized files load and run in wick and in llama.cpp
# (node-llama-cpp's prebuilt CPU build, offline), for the usual mixes and
# for MoE experts at their own type (8-bit experts with 4-bit attention and
# the reverse); bad usage and failures give one line and a non-zero exit,
# and nothing is ever left under the output name.
set -u
WICK=${WICK_BIN:-build/wick}
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
GOLDEN=${WICK_GOLDEN:-$SRC/../shared/golden}
if [ ! -f "$GOLDEN/MANIFEST.json" ]; then
    if [ "${CI:-}" = true ]; then echo "golden data missing at $GOLDEN" >&2; exit 1; fi
    echo "skip: golden data missing at $GOLDEN"; exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-quantize.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# the sources: a golden F32 model and a synthetic MoE hybrid in F16 (a converter's output type)
"$WICK" synth -q --preset tiny-qwen35moe --type f16 -o "$tmp/moe-f16.gguf" || fail "synth moe f16"
files=()
quant() { # NAME IN TYPE [ARGS...]
    local name=$1 in=$2 type=$3
    shift 3
    if "$WICK" quantize -q -t 2 "$in" "$tmp/$name.gguf" "$type" "$@" >"$tmp/out" 2>"$tmp/err"; then
        echo "ok   $name: $(cat "$tmp/out")"
        files+=("$tmp/$name.gguf")
    else
        fail "$name: rc=$?: $(cat "$tmp/err")"
    fi
}
quant llama-q4_k_m "$GOLDEN/models/tiny-llama-F32.gguf" q4_k_m
quant qwen3-q5_k_m "$GOLDEN/models/tiny-qwen3-F32.gguf" q5_k_m
quant qwen3-q6_k "$GOLDEN/models/tiny-qwen3-F32.gguf" q6_k
quant qwen35-iq4_xs "$GOLDEN/models/tiny-qwen35-F32.gguf" iq4_xs --pure
quant qwen3-from-q8_0 "$GOLDEN/models/tiny-qwen3-Q8_0.gguf" q4_0
quant moe-q4_k_m "$tmp/moe-f16.gguf" q4_k_m
quant moe-q8_0 "$tmp/moe-f16.gguf" q8_0
quant moe-e8-a4 "$tmp/moe-f16.gguf" q4_k_m --expert-type q8_0
quant moe-e4-a8 "$tmp/moe-f16.gguf" q8_0 --expert-type q4_k

# the expert packs really differ where they should: experts 8 vs 4 bits, attention the reverse
types_of() { "$WICK" info -v "$1" | awk -v pat="$2" '$1 ~ pat {print $2}' | sort -u | tr '\n' ' '; }
e=$(types_of "$tmp/moe-e8-a4.gguf" 'ffn_(gate|up)_exps'); a=$(types_of "$tmp/moe-e8-a4.gguf" 'attn_q.weight')
[ "$e" = "Q8_0 " ] && [ "$a" = "Q4_K " ] || fail "moe-e8-a4: experts '$e', attn_q '$a'"
e=$(types_of "$tmp/moe-e4-a8.gguf" 'ffn_(gate|up)_exps'); a=$(types_of "$tmp/moe-e4-a8.gguf" 'attn_q.weight')
[ "$e" = "Q4_K " ] && [ "$a" = "Q8_0 " ] || fail "moe-e4-a8: experts '$e', attn_q '$a'"

# every file runs in wick
for f in "${files[@]}"; do
    if ! "$WICK" run -m "$f" -p "hello" -n 4 -t 2 --temp 0 >/dev/null 2>"$tmp/err"; then
        fail "wick run $(basename "$f"): $(tail -1 "$tmp/err")"
    fi
done

# ... and in llama.cpp
if command -v node >/dev/null 2>&1 && [ -d "$SRC/node_modules/node-llama-cpp" ]; then
    (cd "$SRC" && node bench/peer/llamacpp.mjs --check "${files[@]}") || fail "llama.cpp could not load/evaluate them"
elif [ "${CI:-}" = true ]; then
    fail "node or node_modules/node-llama-cpp missing (CI requires it)"
else
    echo "note: node-llama-cpp missing: the llama.cpp half of this test did not run"
fi

# failures: one line, non-zero exit, nothing under the output name
expect_fail() { # WANT_RC WHAT ARGS...
    local want=$1 what=$2
    shift 2
    "$WICK" quantize "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    if [ $rc -ne "$want" ] || [ "$lines" -ne 1 ] || ! grep -q '^wick quantize: ' "$tmp/err"; then
        fail "$what: rc=$rc (want $want), $lines lines: $(cat "$tmp/err")"
    else
        echo "ok   $what: $(cat "$tmp/err")"
    fi
}
expect_fail 2 "missing arguments" "$tmp/moe-f16.gguf" "$tmp/x.gguf"
expect_fail 2 "unknown type" "$tmp/moe-f16.gguf" "$tmp/x.gguf" q7_k
expect_fail 2 "activation-only type" "$tmp/moe-f16.gguf" "$tmp/x.gguf" q8_k
expect_fail 2 "--pure with a mix" --pure "$tmp/moe-f16.gguf" "$tmp/x.gguf" q4_k_m
expect_fail 2 "--expert-type mix" --expert-type q4_k_m "$tmp/moe-f16.gguf" "$tmp/x.gguf" q8_0
expect_fail 1 "missing input" -q "$tmp/none.gguf" "$tmp/x.gguf" q8_0
expect_fail 1 "input is not GGUF" -q /etc/hostname "$tmp/x.gguf" q8_0
expect_fail 1 "output over the input" -q "$tmp/moe-f16.gguf" "$tmp/moe-f16.gguf" q8_0
expect_fail 1 "unwritable output" -q "$tmp/moe-f16.gguf" "$tmp/no-such-dir/x.gguf" q8_0
ls "$tmp"/x.gguf* >/dev/null 2>&1 && fail "a failed run left $(ls "$tmp"/x.gguf*)"

[ $fails -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
[ $fails -eq 0 ]
