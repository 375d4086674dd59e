#!/usr/bin/env bash
# Short bounded runs of the request and chat-rendering fuzzers, each built
# from the sources it needs (the long runs are done by hand: tests/fuzz/run.sh 600 fuzz_request,
# tests/fuzz/run.sh 600 fuzz_chat_render). Needs clang with libFuzzer; skipped
# without it outside CI, fails under CI=true.
set -euo pipefail
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! command -v clang >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then echo "FAIL: clang missing (needed for the fuzzers)" >&2; exit 1; fi
  echo "SKIP: clang not installed"; exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for f in fuzz_request fuzz_chat_render; do
  WICK_FUZZ_DIRECT=1 WICK_FUZZ_BUILD=$dir bash "$SRC/tests/fuzz/run.sh" "${WICK_FUZZ_SECONDS:-20}" "$f"
done
