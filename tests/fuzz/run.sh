#!/usr/bin/env bash
# Builds and runs one libFuzzer harness for a bounded time.
#   tests/fuzz/run.sh [SECONDS] [FUZZER]   (default 60 s, fuzz_gguf)
# FUZZER: fuzz_gguf (GGUF reader), fuzz_request (request bodies of every API
# -> validated chat), fuzz_chat_render (validated chat -> every template).
# Env: WICK_FUZZ_BUILD (build dir, default build-fuzz), WICK_GOLDEN (golden data),
#      WICK_FUZZ_JOBS (parallel fuzzing processes, default 1), WICK_FUZZ_DIRECT=1
#      (build the harness from the sources it needs with clang, not the whole
#      library through cmake: the CI smoke runs).
# Seeds: fuzz_gguf: small valid GGUFs made from golden models and vocab files
# (every key and tensor record kept, tensor data shrunk), plus truncated and
# corrupted variants; the chat fuzzers: tests/fuzz/seeds/*.json, request bodies
# shaped like the coding CLIs' (the file name's prefix picks the API).
# The working corpus persists in $WICK_FUZZ_BUILD/FUZZER-corpus between runs.
# Exit status: 0 when the run ends without a finding, non-zero on a crash, leak,
# timeout or out-of-memory (the reproducer is left in $WICK_FUZZ_BUILD/FUZZER-artifacts).
set -euo pipefail
secs=${1:-60}
name=${2:-fuzz_gguf}
case $secs in ''|*[!0-9]*) echo "usage: $0 [SECONDS] [fuzz_gguf|fuzz_request|fuzz_chat_render]" >&2; exit 2 ;; esac
case $name in fuzz_gguf|fuzz_request|fuzz_chat_render) ;; *) echo "$0: unknown fuzzer '$name'" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${WICK_FUZZ_BUILD:-$root/build-fuzz}
golden=${WICK_GOLDEN:-$root/../shared/golden}
jobs=${WICK_FUZZ_JOBS:-1}
short=$(printf %s "$name" | tr _ -) # fuzz-gguf, fuzz-request, fuzz-chat-render

mkdir -p "$build"
if [ "${WICK_FUZZ_DIRECT:-0}" != 1 ] && [ ! -f "$build/CMakeCache.txt" ]; then
    CC=${CC:-clang} cmake -S "$root" -B "$build" -DWICK_FUZZ=ON -DWICK_SANITIZE=ON -DWICK_CUDA=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
fuzzer=$build/$name
direct_flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
              -fno-sanitize-recover=undefined -I"$root/src")
if [ "$name" != fuzz_gguf ] && [ "${WICK_FUZZ_DIRECT:-0}" = 1 ]; then
    # CI smoke: only what the harnesses use — the request parsers, chat/, the
    # plain-data part of engine/ (request.c) and gguf/ (template selection)
    fuzzer=$build/${name}_direct
    nice -n 19 ${CC:-clang} "${direct_flags[@]}" "$root/tests/fuzz/$name.c" \
        "$root"/src/server/{openai_request,openai_response,openai_api,request_fields,json_schema_check,anthropic_request,responses_request,error,sse}.c \
        "$root"/src/chat/*.c "$root/src/engine/request.c" "$root"/src/gguf/*.c "$root/src/quant/qtypes.c" \
        "$root/src/util/err.c" "$root/src/util/mapfile.c" $(pkg-config --cflags --libs jansson) -o "$fuzzer"
elif [ "$name" != fuzz_gguf ]; then
    nice -n 19 cmake --build "$build" --target "$name" -j2 >"$build/$name-build.log" 2>&1 ||
        { echo "building $name failed (see $build/$name-build.log)" >&2; exit 1; }
elif [ "${WICK_FUZZ_DIRECT:-0}" = 1 ] || ! nice -n 19 cmake --build "$build" --target fuzz_gguf -j2 >"$build/fuzz-gguf-build.log" 2>&1; then
    # Unrelated parts of wickcore may not build with clang at a given moment; the
    # reader only needs gguf/, quant/qtypes.c and two util files, so build those directly.
    echo "warning: cmake target fuzz_gguf failed (see $build/fuzz-gguf-build.log); building the harness from gguf sources only" >&2
    fuzzer=$build/fuzz_gguf_direct
    nice -n 19 ${CC:-clang} "${direct_flags[@]}" "$root/tests/fuzz/fuzz_gguf.c" "$root"/src/gguf/*.c "$root/src/quant/qtypes.c" \
        "$root/src/util/err.c" "$root/src/util/mapfile.c" -o "$fuzzer"
fi

corpus=$build/$short-corpus
seeds=$build/$short-seeds
artifacts=$build/$short-artifacts
dict=$build/$short.dict
rm -rf "$seeds"
mkdir -p "$corpus" "$seeds" "$artifacts"

if [ "$name" = fuzz_gguf ]; then
max_len=16384
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
{
    echo '"GGUF"'
    for k in general.architecture general.alignment general.file_type tokenizer.ggml.tokens \
             llama.block_count qwen35.full_attention_interval .weight blk.0. token_embd; do
        echo "\"$k\""
    done
} >"$dict"
else
max_len=65536
for f in "$root"/tests/fuzz/seeds/*.json; do
    base=$(basename "$f" .json)
    if [ "$name" = fuzz_request ]; then
        # the harness's first byte picks the API
        case $base in chat-*) api='\x00' ;; completion-*) api='\x01' ;; messages-*) api='\x02' ;; *) api='\x03' ;; esac
        { printf "$api"; cat "$f"; } >"$seeds/$base"
    else
        case $base in chat-*) cp "$f" "$seeds/$base" ;; esac
    fi
done
# builder programs for fuzz_chat_render: opcode + short texts (see the harness)
[ "$name" = fuzz_chat_render ] && printf '\x00\x05hello\x08\x02hi\x02\x06<tool_call>\x04\x04read\x02{}\x0b\x03why\x07' >"$seeds/ops-basic"
{
    for k in messages role content system user assistant tool developer tool_calls function arguments name \
             tool_call_id reasoning_content tools parameters tool_choice required response_format json_schema \
             schema '$ref' '$defs' input input_text output_text function_call function_call_output call_id \
             namespace instructions text type tool_use tool_result thinking input_schema max_tokens stream \
             '<|im_start|>' '<|im_end|>' '<think>' '</think>' '<tool_call>' '</tool_call>' '<function=' '<parameter='; do
        printf '"%s"\n' "$k" # none holds a quote or a backslash
    done
} >"$dict"
fi

jobs_args=()
[ "$jobs" -gt 1 ] && jobs_args=(-jobs="$jobs" -workers="$jobs")
echo "fuzzing $name for ${secs}s with $(ls "$seeds" | wc -l) seeds (corpus: $corpus)"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
nice -n 19 "$fuzzer" "$corpus" "$seeds" \
    -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -dict="$dict" ${jobs_args[@]+"${jobs_args[@]}"} -print_final_stats=1 \
    -artifact_prefix="$artifacts/"
