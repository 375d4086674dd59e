#!/usr/bin/env bash
# Builds and runs the GGUF reader fuzzer for a bounded time.
#   tests/fuzz/run.sh [SECONDS]        (default 60)
# Env: WICK_FUZZ_BUILD (build dir, default build-fuzz), WICK_GOLDEN (golden data),
#      WICK_FUZZ_JOBS (parallel fuzzing processes, default 1).
# Seeds: small valid GGUFs made from golden models and vocab files (every key and
# tensor record kept, tensor data shrunk), plus truncated and corrupted variants.
# The working corpus persists in $WICK_FUZZ_BUILD/fuzz-gguf-corpus between runs.
# Exit status: 0 when the run ends without a finding, non-zero on a crash, leak,
# timeout or out-of-memory (the reproducer is left in $WICK_FUZZ_BUILD/fuzz-gguf-artifacts).
set -euo pipefail
secs=${1:-60}
case $secs in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${WICK_FUZZ_BUILD:-$root/build-fuzz}
golden=${WICK_GOLDEN:-$root/../shared/golden}
jobs=${WICK_FUZZ_JOBS:-1}

mkdir -p "$build"
if [ "${WICK_FUZZ_DIRECT:-0}" = 1 ]; then
    : # skip the full clang build of wickcore (CI smoke run): build the harness directly below
elif [ ! -f "$build/CMakeCache.txt" ]; then
    CC=${CC:-clang} cmake -S "$root" -B "$build" -DWICK_FUZZ=ON -DWICK_SANITIZE=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
fuzzer=$build/fuzz_gguf
if [ "${WICK_FUZZ_DIRECT:-0}" = 1 ] || ! nice -n 19 cmake --build "$build" --target fuzz_gguf -j2 >"$build/fuzz-gguf-build.log" 2>&1; then
    # Unrelated parts of wickcore may not build with clang at a given moment; the
    # reader only needs gguf/, quant/qtypes.c and two util files, so build those directly.
    echo "warning: cmake target fuzz_gguf failed (see $build/fuzz-gguf-build.log); building the harness from gguf sources only" >&2
    fuzzer=$build/fuzz_gguf_direct
    nice -n 19 ${CC:-clang} -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/src" \
        "$root/tests/fuzz/fuzz_gguf.c" "$root"/src/gguf/*.c "$root/src/quant/qtypes.c" \
        "$root/src/util/err.c" "$root/src/util/mapfile.c" -o "$fuzzer"
fi

corpus=$build/fuzz-gguf-corpus
seeds=$build/fuzz-gguf-seeds
artifacts=$build/fuzz-gguf-artifacts
rm -rf "$seeds"
mkdir -p "$corpus" "$seeds" "$artifacts"

# seeds from a few small golden files (whole models are hundreds of KB; only headers matter)
src=()
for m in tiny-llama-Q4_K_M tiny-qwen3-IQ4_NL tiny-qwen3moe-Q8_0 tiny-qwen35-Q4_K_M tiny-qwen35moe-Q4_K_M; do
    [ -f "$golden/models/$m.gguf" ] && src+=("$golden/models/$m.gguf")
done
for v in phi-3 gpt-2; do
    [ -f "$golden/tokenizer/ggml-vocab-$v.gguf.gz" ] && src+=("$golden/tokenizer/ggml-vocab-$v.gguf.gz")
done
if [ ${#src[@]} -gt 0 ] && command -v python3 >/dev/null; then
    python3 "$root/tests/fuzz/make_seeds.py" "$seeds" "${src[@]}"
elif [ ${#src[@]} -gt 0 ]; then
    for f in "${src[@]}"; do case $f in *.gguf) head -c 16384 "$f" >"$seeds/$(basename "$f").head" ;; esac; done
fi
printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"$seeds/empty-v3.gguf"
# truncated and corrupted variants of one seed
first=$(ls "$seeds"/*.seed.gguf 2>/dev/null | head -n 1 || true)
if [ -n "$first" ]; then
    size=$(stat -c %s "$first")
    for n in 7 23 64 300 1000 $((size / 2)) $((size - 1)); do
        [ "$n" -lt "$size" ] && head -c "$n" "$first" >"$seeds/trunc-$n.gguf"
    done
    { head -c 4 "$first"; printf '\x02\x00\x00\x00'; tail -c +9 "$first"; } >"$seeds/v2.gguf"
    { head -c 100 "$first"; printf '\xff\xff\xff\xff'; tail -c +105 "$first"; } >"$seeds/corrupt-100.gguf"
    { head -c 600 "$first"; printf '\x09\x00\x00\x00'; tail -c +605 "$first"; } >"$seeds/corrupt-600.gguf"
fi

# dictionary of tokens that appear in real headers
dict=$build/fuzz-gguf.dict
{
    echo '"GGUF"'
    for k in general.architecture general.alignment general.file_type tokenizer.ggml.tokens \
             llama.block_count qwen35.full_attention_interval .weight blk.0. token_embd; do
        echo "\"$k\""
    done
} >"$dict"

jobs_args=()
[ "$jobs" -gt 1 ] && jobs_args=(-jobs="$jobs" -workers="$jobs")
echo "fuzzing fuzz_gguf for ${secs}s with $(ls "$seeds" | wc -l) seeds (corpus: $corpus)"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
nice -n 19 "$fuzzer" "$corpus" "$seeds" \
    -max_total_time="$secs" -max_len=16384 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -dict="$dict" ${jobs_args[@]+"${jobs_args[@]}"} -print_final_stats=1 \
    -artifact_prefix="$artifacts/"
