#!/usr/bin/env bash
# Run from the repository root on a machine with an NVIDIA GPU (sm_90: H100/H200):
# builds the CUDA kernels, their tests and benchmarks with nvcc (no CMake and no
# other wick dependencies needed), runs the kernel tests against the CPU
# references, then the benchmarks, which print a short table last.
#   bench/gpu.sh            build + tests + full benchmarks
#   bench/gpu.sh quick      fewer benchmark shapes
#   bench/gpu.sh test       build + tests only
# Environment: NVCC (default: nvcc on PATH or /usr/local/cuda/bin/nvcc),
# WICK_CUDA_ARCH (default: -gencode arch=compute_90a,code=sm_90a),
# OUT (optional folder for the logs).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full}
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
kern=$(ls "$B"/*.o | grep -v '/t_')
common="$B/t_ref.o $B/t_err.o $B/t_qtypes.o"
tests=$(ls "$B"/t_test_cuda_*.o)
"$NVCC" $ARCH -o "$B/test_cuda" $tests $common $kern -lcublas
"$NVCC" $ARCH -o "$B/bench_cuda" "$B/t_bench_cuda.o" $(ls "$B"/t_bench_cuda_*.o 2>/dev/null || true) $common $kern -lcublas

log=${OUT:-$B}
echo "== tests"
set +e
"$B/test_cuda" 2>&1 | tee "$log/test_cuda.log"
trc=${PIPESTATUS[0]}
set -e
[ "$mode" = test ] && exit "$trc"
echo "== benchmarks"
"$B/bench_cuda" $([ "$mode" = quick ] && echo quick) 2>&1 | tee "$log/bench_cuda.log"
echo "tests: $(tail -n 1 "$log/test_cuda.log")"
exit "$trc"
