#!/usr/bin/env bash
# End-to-end tests: node's test runner with the real `openai` and
# `@anthropic-ai/sdk` SDKs, the real coding CLIs (Claude Code, Codex,
# qwen-code; loopback only) and playwright-core against live `wick serve`
# processes (tests/e2e/*.test.mjs).
# Needs node + the npm test packages (tests/e2e/setup.sh); under CI=true
# their absence is a failure, elsewhere the test is skipped.
set -euo pipefail
src=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
missing=""
command -v node >/dev/null 2>&1 || missing="node"
[ -d "$src/node_modules/openai" ] || missing="$missing node_modules/openai"
[ -d "$src/node_modules/@anthropic-ai/sdk" ] || missing="$missing node_modules/@anthropic-ai/sdk"
[ -d "$src/node_modules/playwright-core" ] || missing="$missing node_modules/playwright-core"
if [ -n "$missing" ]; then
  if [ "${CI:-}" = "true" ]; then
    echo "e2e: missing:$missing (run tests/e2e/setup.sh)" >&2
    exit 1
  fi
  echo "e2e: SKIPPED, missing:$missing (run tests/e2e/setup.sh)"
  exit 77
fi
export WICK_BIN=${WICK_BIN:-$src/build-test/wick}
# One demo model for all test files, made by the first server that starts.
WICK_E2E_CACHE=$(mktemp -d "${TMPDIR:-/tmp}/wick-e2e.XXXXXX")
export WICK_E2E_CACHE
trap 'rm -rf "$WICK_E2E_CACHE"' EXIT
cd "$src"
# One file at a time: the servers share the machine's cores. A run in which
# node skipped a test (no chromium, no golden data) exits with ctest's skip
# code, so it never reads as a full pass.
log=$WICK_E2E_CACHE/node-test.log
set +e
node --test --test-concurrency=1 tests/e2e/ 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -ne 0 ] && exit "$rc"
skipped=$(sed -n 's/^\(# \|ℹ \)skipped \([0-9]*\)$/\2/p' "$log" | tail -1)
if [ "${skipped:-0}" -gt 0 ]; then
  echo "e2e: $skipped test(s) skipped: reporting a skip"
  exit 77
fi
