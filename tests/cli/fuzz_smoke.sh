#!/usr/bin/env bash
# Short bounded runs of the libFuzzer harnesses (the long runs are done by
# hand: tests/fuzz/run.sh NAME 600): the GGUF reader, model loading (reader,
# hyper-parameter validation, binding, one forward pass), the tokenizer and
# the prefix cache's disk archive (scan and load), the grammar engine (JSON
# schema, tool-call and GBNF compilers, constrained steps), the request parsers
# of every API and the chat templates.
# One build of the modules they need serves all three. Needs clang with
# libFuzzer and the golden data (seeds, vocabularies); skipped without them
# outside CI, fails under CI=true.
set -euo pipefail
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! command -v clang >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then echo "FAIL: clang missing (needed for the fuzzers)" >&2; exit 1; fi
  echo "SKIP: clang not installed"; exit 77
fi
GOLDEN=${WICK_GOLDEN:-$SRC/../shared/golden}
if [ ! -d "$GOLDEN/models" ]; then
  if [ "${CI:-}" = "true" ]; then echo "FAIL: golden data missing at $GOLDEN (the seeds)" >&2; exit 1; fi
  echo "SKIP: golden data missing at $GOLDEN"; exit 77
fi
export WICK_GOLDEN=$GOLDEN
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# seconds per harness: enough to replay the seeds and mutate a while, small next to the suite
for run in gguf:10 model_load:15 tokenizer:10 archive:10 json_schema:10 request:10 chat_render:10; do
  name=${run%%:*}
  if ! WICK_FUZZ_DIRECT=1 WICK_FUZZ_BUILD=$dir bash "$SRC/tests/fuzz/run.sh" "$name" "${run##*:}"; then
    keep=$(mktemp -d "${TMPDIR:-/tmp}/wick-fuzz-$name.XXXXXX")
    cp -r "$dir/fuzz-$name-artifacts" "$keep/" 2>/dev/null || true
    echo "FAIL: fuzz_$name found a problem; reproducer kept in $keep" >&2
    exit 1
  fi
done
echo "all fuzzers ran clean"
