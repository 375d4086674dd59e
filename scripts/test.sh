#!/usr/bin/env bash
# The whole test suite: sanitized build (ASan + UBSan) + every ctest test
# (unit, golden conformance, CLI, end-to-end). Usage: scripts/test.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
# CUDA (when nvcc is found): the generic (sm_80) and the Hopper (sm_90a) kernels are what a
# build can get wrong; the full fat binary of five architectures costs 3.5x the CPU time
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWICK_SANITIZE=ON \
  -DCMAKE_CUDA_ARCHITECTURES="80-real;90a-real" >/dev/null
cmake --build build-test -j"$(getconf _NPROCESSORS_ONLN)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-test --output-on-failure -j"$(getconf _NPROCESSORS_ONLN)" "$@"
