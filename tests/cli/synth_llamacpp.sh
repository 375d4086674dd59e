#!/usr/bin/env bash
# Files written by `wick synth` load and run in llama.cpp (node-llama-cpp's
# prebuilt CPU binaries, offline): one small file per architecture, a pure
# and a mixed type, each evaluated on a short chat prompt with finite logits.
# Needs node + node_modules/node-llama-cpp: skipped when absent, except under
# CI=true where that is a failure.
set -euo pipefail
WICK_BIN=${WICK_BIN:?WICK_BIN not set}
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}

if ! command -v node >/dev/null 2>&1 || [ ! -d "$SRC/node_modules/node-llama-cpp" ]; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL: node or $SRC/node_modules/node-llama-cpp missing (CI requires it; run npm ci)"
        exit 1
    fi
    echo "SKIP: node or node_modules/node-llama-cpp missing (npm ci to enable)"
    exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

files=()
for spec in tiny:q8_0 tiny:q4_k_m tiny-llama:q4_k tiny-qwen3moe:q4_k_e8 tiny-qwen35:q8_0 tiny-qwen35:q4_k_m \
            tiny-qwen35moe:q4_k_m; do
    preset=${spec%%:*}
    type=${spec##*:}
    out="$tmp/$preset-$type.gguf"
    "$WICK_BIN" synth -q --preset "$preset" --type "$type" -o "$out"
    files+=("$out")
done
# A custom shape: a few-layer qwen35 with Qwen3.5-0.8B widths and a small vocabulary.
"$WICK_BIN" synth -q --preset qwen3.5-0.8b --layers 4 --vocab 2048 --type q4_k_m -o "$tmp/custom-qwen35.gguf"
files+=("$tmp/custom-qwen35.gguf")

cd "$SRC"
node bench/peer/llamacpp.mjs --check "${files[@]}"
echo "PASS: ${#files[@]} synthetic files load and evaluate in llama.cpp"
