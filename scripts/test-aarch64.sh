#!/usr/bin/env bash
# Cross-builds wick for 64-bit Arm Linux (cmake/aarch64-linux-gnu.cmake: no
# sanitizers, no CUDA) and runs, under qemu user-mode emulation, the unit
# tests and a subset of the golden conformance cases, so the NEON kernels and
# every portable code path are checked on each CI run. Emulation makes the
# model-level tests 10-50x slower, so some are left out; the lists below say
# which and why. Usage: scripts/test-aarch64.sh [BUILD_DIR] (default
# build-aarch64). Needs Debian's gcc-aarch64-linux-gnu, qemu-user-static and
# the arm64 -dev packages through multiarch (.ci/run installs them). Without
# them it exits 77 (skipped), or 1 under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-aarch64}
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)

missing=""
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing="$missing gcc-aarch64-linux-gnu"
command -v qemu-aarch64-static >/dev/null 2>&1 || missing="$missing qemu-user-static"
for pc in jansson libpcre2-8 libmicrohttpd libcrypto libxxhash cmocka zlib libzstd; do
    [ -f "/usr/lib/aarch64-linux-gnu/pkgconfig/$pc.pc" ] || missing="$missing $pc(arm64)"
done
# The arm64 C library of multiarch (libc6:arm64) is the one the emulated
# programs load, with its own ld.so: qemu's -L /. Pointing -L at the cross
# compiler's /usr/aarch64-linux-gnu would pair that tree's ld.so with the
# multiarch libc.so.6 of another Debian revision, and programs hang in libc.
[ -e /lib/ld-linux-aarch64.so.1 ] || missing="$missing libc6:arm64"
if [ -n "$missing" ]; then
    if [ "${CI:-}" = true ]; then
        echo "aarch64 cross test: missing$missing (.ci/run installs them)" >&2
        exit 1
    fi
    echo "skip: aarch64 cross test needs$missing"
    exit 77
fi

# Left out under emulation (WICK_TEST_SKIP, comma-separated patterns): test
# functions that run whole models or long loops of portable code for a
# minute or more each when emulated. All of them run natively in every CI
# build; none of them reaches a kernel that the tests kept here do not.
#   test_attention_policy: tile counts over long prompts, the engine-level runs
#   test_cache:            the random-traffic soaks (~45 s each)
#   test_synth:            writing and running synthetic models (~20-95 s each)
#   test_server_service:   the conversations of thousands of tokens (several minutes emulated)
#   test_pipeline:         the failed-decode, killed-write and constrained-answer runs
#   test_spec:             the draft-model and long-context runs (two models decoding side by side)
declare -A skip_fns=(
    [test_attention_policy]='test_visited_tiles_fall_with_the_window,test_engine_*'
    [test_cache]='test_random_traffic_*'
    [test_server_service]='test_side_requests_*,test_concurrent_conversations_*'
    [test_pipeline]='test_failed_decode_*,test_killed_write_*,test_json_schema_answers_*'
    [test_spec]='test_draft_model_*,test_long_context_*'
    [test_synth]='test_written_file_reopens_*,test_bytes_depend_on_seed_*,test_weights_have_the_intended_scales,test_synthetic_models_give_finite_logits,test_deep_synthetic_stacks_stay_finite'
)
# Golden conformance (test_models_golden) on the dotprod level: every n64
# logit case of the five architectures (llama in all 15 tensor types, so
# every NEON dot kernel runs in a whole model; qwen3, qwen3moe, qwen35,
# qwen35moe in F32, Q4_K_M and Q8_0), snapshot/restore, greedy decode,
# truncate; left out: the two 1024-token cases and the chunked-prefill
# comparisons (~1 minute each emulated). Then the same cases of three
# quantized models on plain NEON (WICK_ISA=neon: the widening-multiply
# integer kernels instead of SDOT).
golden_cases='tiny-llama-,qwen3-F32.n64,qwen3-Q4_K_M,qwen3-Q8_0,qwen35-F32.n64,qwen35-Q,qwen35moe-,qwen3moe-'
golden_skip='test_*chunk*'
neon_cases='llama-Q4_K.n64,llama-Q8_0,qwen35moe-Q4_K_M'

t0=$SECONDS
mkdir -p "$B"
units=$(cd tests/unit && ls test_*.c | sed 's/\.c$//')
# shellcheck disable=SC2086
if ! { cmake -S . -B "$B" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
        -DWICK_CUDA=OFF -DWICK_SANITIZE=OFF && cmake --build "$B" -j"$jobs" --target $units; } >"$B/build.log" 2>&1; then
    echo "aarch64 cross build failed, last lines of $B/build.log:"
    tail -40 "$B/build.log"
    exit 1
fi
echo "cross build: $((SECONDS - t0)) s"

rm -f "$B"/*.status
run() { # name, then environment assignments and the command (env's arguments)
    local name=$1 t0=$SECONDS rc=0
    shift
    env "$@" >"$B/$name.log" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok   $name ($((SECONDS - t0)) s)"
    elif [ $rc -eq 77 ]; then
        echo "skip $name:" $(grep '^\[  SKIPPED \] test_' "$B/$name.log" | sed 's/.*\] //')
    else
        echo "FAIL $name (exit $rc), last lines of $B/$name.log:"
        tail -40 "$B/$name.log"
    fi
    echo $rc >"$B/$name.status"
}
export WICK_SOURCE_DIR=$PWD
emu="qemu-aarch64-static -L /"
# the golden runs first: they are the longest
run test_models_golden WICK_GOLDEN_FILTER="$golden_cases" WICK_TEST_SKIP="$golden_skip" $emu "$B/test_models_golden" &
run test_models_golden_neon WICK_ISA=neon WICK_GOLDEN_FILTER="$neon_cases" WICK_TEST_SKIP="$golden_skip" \
    $emu "$B/test_models_golden" &
for t in $units; do
    [ "$t" = test_models_golden ] && continue
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    run "$t" WICK_TEST_SKIP="${skip_fns[$t]:-}" $emu "$B/$t" &
done
wait
passed=0 failed=0 skipped=0
for f in "$B"/*.status; do
    case $(cat "$f") in 0) passed=$((passed + 1)) ;; 77) skipped=$((skipped + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
echo "aarch64 (qemu): $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
