#!/usr/bin/env bash
# `wick info` on broken files prints exactly one line on stderr and exits
# non-zero; on every golden model it succeeds.
set -u
WICK=${WICK_BIN:-build/wick}
GOLDEN=${WICK_GOLDEN:-$(dirname "$0")/../../../shared/golden}
MODELS=$GOLDEN/models
if [ ! -d "$MODELS" ]; then
    if [ "${CI:-}" = true ]; then echo "golden models missing at $MODELS" >&2; exit 1; fi
    echo "skip: golden models missing at $MODELS"; exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-gguf-errors.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect_error NAME FILE [ARGS...]: non-zero exit, one stderr line naming the file, nothing on stdout
expect_error() {
    local what=$1 file=$2
    shift 2
    "$WICK" info "$file" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    if [ $rc -eq 0 ] || [ "$lines" -ne 1 ] || ! grep -q '^wick info: ' "$tmp/err" || [ -s "$tmp/out" ]; then
        echo "FAIL $what: rc=$rc, $lines stderr lines:"; cat "$tmp/err"; fails=$((fails + 1))
    elif [ $rc -ge 128 ]; then
        echo "FAIL $what: crashed (rc=$rc)"; fails=$((fails + 1))
    else
        echo "ok   $what: $(cat "$tmp/err")"
    fi
}

src=$MODELS/tiny-qwen35-Q4_K_M.gguf
size=$(wc -c <"$src")

: >"$tmp/empty.gguf"
expect_error "empty file" "$tmp/empty.gguf"
printf 'hello, this is not a model\n' >"$tmp/text.gguf"
expect_error "text file" "$tmp/text.gguf"
expect_error "missing file" "$tmp/does-not-exist.gguf"
expect_error "directory" "$tmp"
for n in 3 4 8 20 24 100 1000 5000 $((size / 2)) $((size - 1)); do
    head -c "$n" "$src" >"$tmp/trunc-$n.gguf"
    expect_error "truncated to $n bytes" "$tmp/trunc-$n.gguf"
done
# version 1 and 4, a byte-swapped version
for v in '\x01' '\x04'; do
    { head -c 4 "$src"; printf "$v\\x00\\x00\\x00"; tail -c +9 "$src"; } >"$tmp/ver.gguf"
    expect_error "version byte $v" "$tmp/ver.gguf"
done
{ head -c 4 "$src"; printf '\x00\x00\x00\x03'; tail -c +9 "$src"; } >"$tmp/swapped.gguf"
expect_error "byte-swapped version" "$tmp/swapped.gguf"
# corrupted magic
{ printf 'GGML'; tail -c +5 "$src"; } >"$tmp/magic.gguf"
expect_error "bad magic" "$tmp/magic.gguf"
# huge tensor count
{ head -c 8 "$src"; printf '\xff\xff\xff\xff\xff\xff\xff\x7f'; tail -c +17 "$src"; } >"$tmp/count.gguf"
expect_error "huge tensor count" "$tmp/count.gguf"
# bad usage is one line too
expect_error "bad --ctx" "$src" --ctx abc
expect_error "unknown option" "$src" --bogus

"$WICK" info --help >"$tmp/out" 2>&1 || { echo "FAIL --help exits non-zero"; fails=$((fails + 1)); }
grep -q -- '--ctx' "$tmp/out" || { echo "FAIL --help does not explain --ctx"; fails=$((fails + 1)); }

for m in "$MODELS"/*.gguf; do
    if ! "$WICK" info "$m" --ctx 1024 -v >"$tmp/out" 2>"$tmp/err"; then
        echo "FAIL info on $m:"; cat "$tmp/err"; fails=$((fails + 1))
    elif ! grep -q '^bits/weight:' "$tmp/out" || ! grep -q 'F16 .*/token' "$tmp/out"; then
        echo "FAIL info on $m: output lacks bits/weight or KV lines"; fails=$((fails + 1))
    fi
done
echo "checked $(ls "$MODELS"/*.gguf | wc -l) golden models"

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all ok"
