#!/usr/bin/env bash
# Short bounded run of the grammar fuzzer (JSON schema, tool-call and GBNF
# compilers, constrained steps); the long run is done by hand:
# tests/fuzz/run_json_schema.sh 600. Needs clang with libFuzzer; skipped
# without it outside CI, fails under CI=true.
set -euo pipefail
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! command -v clang >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then echo "FAIL: clang missing (needed for the fuzzer)" >&2; exit 1; fi
  echo "SKIP: clang not installed"; exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
WICK_FUZZ_BUILD=$dir bash "$SRC/tests/fuzz/run_json_schema.sh" "${WICK_FUZZ_SECONDS:-30}"
