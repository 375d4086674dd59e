#!/usr/bin/env bash
# Run from the repository root on a machine with an NVIDIA GPU (sm_90: H100/H200):
# builds the CUDA kernels, their tests and benchmarks with nvcc (no CMake and no
# other wick dependencies needed), runs the kernel tests against the CPU
# references, then the benchmarks, which print a short table last.
#   bench/gpu.sh            build + tests + full benchmarks
#   bench/gpu.sh quick      fewer benchmark shapes
#   bench/gpu.sh test       build + tests only
#   bench/gpu.sh build      build only (build-cuda-gpu/: test_cuda, bench_cuda, golden_cuda, e2e_cuda;
#                           `build-cuda-gpu/bench_cuda gdn` times the Gated DeltaNet paths alone,
#                           `build-cuda-gpu/test_cuda gdn` tests them)
#   bench/gpu.sh prepare-golden   (on the build machine) copy ../shared/golden's tiny
#                           models and 64-token logits into .golden/ to carry along
#   WICK_E2E="32768" bench/gpu.sh quick
#                           also times model_forward on the CUDA backend with
#                           Qwen3.5-27B dimensions (pure Q4_K random weights built in
#                           memory): pp512/pp4096/tg128 at depth 0 and pp512/tg128 at
#                           that depth (tests/cuda/e2e_cuda.c)
# When a golden folder is present (WICK_GOLDEN, else .golden or ../shared/golden,
# holding cases.txt — see tests/cuda/golden_cuda.c), the tiny golden models are
# also run end to end through model_forward on the CUDA backend; that step
# compiles the core subset it needs (util, gguf, quant, backend/cpu, model:
# libcrypto and xxhash, the latter from .debs/*.deb when the system lacks it).
# Environment: NVCC (default: nvcc on PATH or /usr/local/cuda/bin/nvcc),
# WICK_CUDA_ARCH (default: -gencode arch=compute_90a,code=sm_90a),
# OUT (optional folder for the logs).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full}
if [ "$mode" = prepare-golden ]; then
  # copies the golden tiny models + 64-token logits from ../shared/golden into .golden/
  # (git-ignored) with cases.txt, so the folder can travel to a GPU machine
  src=${WICK_GOLDEN:-../shared/golden}
  mkdir -p .golden/models .golden/logits
  cp "$src"/models/*.gguf .golden/models/
  cp "$src"/logits/*.n64.* .golden/logits/
  python3 - "$src/MANIFEST.json" .golden/cases.txt <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
with open(sys.argv[2], "w") as out:
    for c in m["logit_cases"]:
        if c["n_tokens"] != 64:
            continue
        out.write("%s %d %d %g %s %s %s %s\n" % (c["model"], c["n_tokens"], c["n_vocab"], c["tol"], c["logits"],
                  c["gen"], ",".join(map(str, c["tokens"])), ",".join(map(str, c["greedy"]))))
PY
  echo "prepared .golden ($(wc -l < .golden/cases.txt) cases)"
  exit 0
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${WICK_CUDA_ARCH:--gencode arch=compute_90a,code=sm_90a}
B=build-cuda-gpu
mkdir -p "$B"
jobs=$(nproc 2>/dev/null || echo 4)
CUFLAGS="-std=c++17 -O3 $ARCH -Isrc -Xptxas -warn-spills --expt-relaxed-constexpr -lineinfo"

echo "== build ($NVCC, $ARCH, $jobs jobs)"
pids=()
for f in src/backend/cuda/*.cu; do
  o="$B/$(basename "${f%.cu}").o"
  "$NVCC" $CUFLAGS -Xptxas -v -c "$f" -o "$o" >"$o.log" 2>&1 &
  pids+=($!)
done
for f in tests/cuda/*.c src/util/err.c src/quant/qtypes.c; do
  o="$B/t_$(basename "${f%.c}").o"
  cc -std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE -Isrc -Itests/cuda -I"$(dirname "$NVCC")/../include" \
    -c "$f" -o "$o" >"$o.log" 2>&1 &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
if [ "$fail" = 1 ]; then
  for l in "$B"/*.log; do grep -q -i error "$l" && { echo "--- $l"; cat "$l"; }; done
  echo "build failed"; exit 1
fi
grep -h -E "spill|stack frame" "$B"/*.o.log | grep -v " 0 bytes spill stores, 0 bytes spill loads" | sort | uniq -c | head -20 || true
kern_all=$(ls "$B"/*.o | grep -v '/t_')
kern=$(echo "$kern_all" | grep -v cuda_backend.o) # the kernel tests need no wick core
common="$B/t_ref.o $B/t_err.o $B/t_qtypes.o"
tests=$(ls "$B"/t_test_cuda_*.o)
"$NVCC" $ARCH -o "$B/bench_cuda" "$B/t_bench_cuda.o" $(ls "$B"/t_bench_cuda_*.o 2>/dev/null || true) $common $kern -lcublas

golden=${WICK_GOLDEN:-}
[ -z "$golden" ] && for g in .golden ../shared/golden; do [ -f "$g/cases.txt" ] && { golden=$g; break; }; done
{
  # the kernel tests compare some ops with the CPU backend; golden_cuda and e2e_cuda run model_forward
  echo "== build: core subset (CPU backend, model) for test_cuda, golden_cuda, e2e_cuda"
  xinc=""; xlib="-lxxhash"
  if [ ! -f /usr/include/xxhash.h ] && ls .debs/libxxhash-dev*.deb >/dev/null 2>&1; then
    mkdir -p "$B/debroot"
    for d in .debs/*.deb; do dpkg -x "$d" "$B/debroot"; done
    xinc="-I$B/debroot/usr/include"; xlib="$B/debroot/usr/lib/x86_64-linux-gnu/libxxhash.a"
  fi
  mkdir -p "$B/core"
  pids=()
  for f in src/util/*.c src/gguf/*.c src/quant/*.c src/backend/cpu/*.c src/model/*.c tests/cuda/golden_*.c \
           tests/cuda/e2e_cuda.c tests/cuda/compare_ops.c tests/cuda/ref.c; do
    extra=""
    case "$f" in
      *_neon*.c) continue ;; # AArch64 kernels: not part of an x86-64 build
      *_avx2.c) extra="-mavx2 -mfma -mf16c" ;;
      *_amx_avx512.c) extra="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c -mamx-tile -mamx-int8 -mamx-bf16" ;;
      *_avx512.c) extra="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c" ;;
    esac
    o="$B/core/$(echo "${f%.c}" | tr / _).o"
    cc -std=c11 -O2 -D_GNU_SOURCE -fno-math-errno $extra -Isrc -Itests/cuda $xinc -I"$(dirname "$NVCC")/../include" -c "$f" -o "$o" \
      >"$o.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  if [ "$fail" = 1 ]; then
    for l in "$B"/core/*.log; do grep -q -i error "$l" && { echo "--- $l"; cat "$l"; }; done
    echo "core build failed"; exit 1
  fi
  core=$(ls "$B"/core/*.o | grep -v -e tests_cuda_golden_ -e e2e_cuda.o)
  core_lib=$(echo "$core" | grep -v -e compare_ops.o -e tests_cuda_ref.o)
  "$NVCC" $ARCH -o "$B/test_cuda" $tests "$B/t_ref.o" $core_lib $kern_all -lcublas -lcrypto $xlib -ljansson -lz -lzstd -lpthread -lm
  "$NVCC" $ARCH -o "$B/golden_cuda" $core "$B"/core/tests_cuda_golden_*.o $kern_all -lcublas -lcrypto $xlib -ljansson -lz -lzstd -lpthread -lm
  "$NVCC" $ARCH -o "$B/e2e_cuda" $core "$B/core/tests_cuda_e2e_cuda.o" $kern_all -lcublas -lcrypto $xlib -ljansson -lz -lzstd -lpthread -lm
}

[ "$mode" = build ] && { echo "built: $(ls "$B" | grep -E '^(test|bench|golden|e2e)_cuda$' | tr '\n' ' ')"; exit 0; }
log=${OUT:-$B}
echo "== tests"
set +e
"$B/test_cuda" 2>&1 | tee "$log/test_cuda.log"
trc=${PIPESTATUS[0]}
grc=0
if [ -n "$golden" ]; then
  echo "== golden models on the CUDA backend ($golden)"
  "$B/golden_cuda" "$golden" 2>&1 | tee "$log/golden_cuda.log"
  grc=${PIPESTATUS[0]}
fi
set -e
[ "$trc" = 0 ] && trc=$grc
[ "$mode" = test ] && exit "$trc"
echo "== benchmarks"
"$B/bench_cuda" $([ "$mode" = quick ] && echo quick) 2>&1 | tee "$log/bench_cuda.log"
if [ -n "${WICK_E2E:-}" ] && [ -x "$B/e2e_cuda" ]; then
  echo "== end to end: qwen35 forward pass, Qwen3.5-27B dims, pure Q4_K (depth, layers: $WICK_E2E)"
  "$B/e2e_cuda" $WICK_E2E 2>&1 | tee "$log/e2e_cuda.log" || true
fi
echo "tests: $(tail -n 1 "$log/test_cuda.log")"
[ -n "$golden" ] && echo "$(tail -n 1 "$log/golden_cuda.log")"
exit "$trc"
