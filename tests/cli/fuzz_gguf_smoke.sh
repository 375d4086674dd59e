#!/usr/bin/env bash
# Short bounded run of the GGUF reader fuzzer (the long run is done by hand:
# tests/fuzz/run.sh 600). Needs clang with libFuzzer; skipped without it
# outside CI, fails under CI=true.
set -euo pipefail
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! command -v clang >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then echo "FAIL: clang missing (needed for the fuzzer)" >&2; exit 1; fi
  echo "SKIP: clang not installed"; exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
WICK_FUZZ_DIRECT=1 WICK_FUZZ_BUILD=$dir bash "$SRC/tests/fuzz/run.sh" "${WICK_FUZZ_SECONDS:-45}"
