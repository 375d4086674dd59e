#!/usr/bin/env bash
# The several-row int8 matvec (cuda_matvec_nt: 2-8 activation rows, batched decode and
# speculative verification) on a GPU machine, in one run: builds test_cuda and bench_cuda
# with bench/gpu.sh build, runs the matmul kernel tests (each row of a few-row product bit
# for bit against one-row matvecs) on the sm_90 path and on the generic one
# (WICK_CUDA_GENERIC=1), then `bench_cuda nt`: 1, 2, 4 and 8 rows on the 27B's Q4_K, Q6_K
# and Q8_0 shapes, the kernel against the one it replaced (WICK_CUDA_NT=0).
# Run from the repository root. Environment: as bench/gpu.sh (NVCC, WICK_CUDA_ARCH, OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-cuda-gpu
log=${OUT:-$B}
bench/gpu.sh build
mkdir -p "$log"
rc=0
echo "== test_cuda matmul"
"$B/test_cuda" matmul >"$log/test_nt.log" 2>&1 || rc=1
grep -E "FAIL|failed checks" "$log/test_nt.log" || true
echo "== test_cuda matmul, generic kernels (WICK_CUDA_GENERIC=1)"
WICK_CUDA_GENERIC=1 "$B/test_cuda" matmul >"$log/test_nt_generic.log" 2>&1 || rc=1
grep -E "FAIL|failed checks" "$log/test_nt_generic.log" || true
echo "== bench_cuda nt"
"$B/bench_cuda" nt >"$log/bench_nt.log" 2>&1 || rc=1
sed -n '/^kernel /,$p' "$log/bench_nt.log"
exit "$rc"
