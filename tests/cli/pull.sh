#!/usr/bin/env bash
# `wick pull` against a local hub (tests/cli/hub_server.mjs, the hub's URL
# layout): files land verified and pinned to the commit, LFS files come
# through a redirect, a wrong SHA-256 is refused, a cut connection is
# resumed with a Range request (in the same run, and in the next run after
# a failed one), a 404 / unknown repository / unknown revision / unknown
# file each give one line and exit 1, --model-dir reuses files after
# hashing them, and nothing unverified ever carries its final name.
set -u
WICK=${WICK_BIN:-build/wick}
WICK=$(cd "$(dirname "$WICK")" && pwd)/$(basename "$WICK")
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
GOLDEN=${WICK_GOLDEN:-$SRC/../shared/golden}
if ! command -v node >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then echo "node missing (CI requires it)" >&2; exit 1; fi
    echo "skip: node missing"; exit 77
fi
if [ ! -f "$GOLDEN/MANIFEST.json" ]; then
    if [ "${CI:-}" = true ]; then echo "golden data missing at $GOLDEN" >&2; exit 1; fi
    echo "skip: golden data missing at $GOLDEN"; exit 77
fi
if "$WICK" pull --help | grep -q 'no libcurl'; then echo "skip: this wick has no libcurl"; exit 77; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-pull.XXXXXX")
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# the repository: two models (LFS), a config and a nested text file (plain git files)
mkdir -p "$tmp/repo/sub"
cp "$GOLDEN/models/tiny-qwen3-Q8_0.gguf" "$tmp/repo/model.gguf"
cp "$GOLDEN/models/tiny-llama-Q4_K_M.gguf" "$tmp/repo/cut.gguf"
cp "$GOLDEN/models/tiny-llama-Q8_0.gguf" "$tmp/repo/wrong-hash.gguf"
cp "$GOLDEN/models/tiny-qwen3-Q4_0.gguf" "$tmp/repo/no-range.gguf"
echo '{"ctx": 2048}' >"$tmp/repo/config.json"
echo 'hello' >"$tmp/repo/sub/notes.txt"
: >"$tmp/log"
node "$SRC/tests/cli/hub_server.mjs" --repo wick-test/tiny --dir "$tmp/repo" --log "$tmp/log" \
    --cut cut.gguf:2 --wrong wrong-hash.gguf --missing gone.gguf --no-range no-range.gguf >"$tmp/port" &
server_pid=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
read -r port commit <"$tmp/port" || { echo "FAIL: the hub server did not start"; exit 1; }
export HF_ENDPOINT=http://127.0.0.1:$port
unset HF_TOKEN

pull() { "$WICK" pull -q "$@" >"$tmp/out" 2>"$tmp/err"; }
no_partials() { ! ls -a "$1" | grep -q 'wick-partial'; }

# 1. a pinned pull of three files, one in a folder
if pull wick-test/tiny model.gguf config.json 'sub/*' --dir "$tmp/d"; then
    grep -q "commit $commit" "$tmp/out" || fail "pull: commit not reported: $(cat "$tmp/out")"
    for f in model.gguf config.json sub/notes.txt; do cmp -s "$tmp/repo/$f" "$tmp/d/$f" || fail "pull: $f differs"; done
    (cd "$tmp/d" && sha256sum -c --quiet SHA256SUMS) || fail "pull: SHA256SUMS does not verify"
    [ "$(wc -l <"$tmp/d/SHA256SUMS")" -eq 3 ] || fail "pull: SHA256SUMS has $(wc -l <"$tmp/d/SHA256SUMS") lines"
    grep -q "^GET /cdn/" "$tmp/log" || fail "pull: the LFS file did not come through the redirect"
    echo "ok   pull of 3 files at $commit"
else
    fail "pull: $(cat "$tmp/err")"
fi
# ... and the same files pulled again are hashed, not downloaded
: >"$tmp/log"
pull wick-test/tiny@"$commit" model.gguf --dir "$tmp/d" && grep -q "1 already there" "$tmp/out" \
    && ! grep -q "/resolve/" "$tmp/log" || fail "re-pull: $(cat "$tmp/out" "$tmp/err")"
# a damaged local copy is replaced
printf 'x' | dd of="$tmp/d/model.gguf" bs=1 seek=1000 conv=notrunc 2>/dev/null
pull wick-test/tiny model.gguf --dir "$tmp/d" && cmp -s "$tmp/repo/model.gguf" "$tmp/d/model.gguf" \
    || fail "damaged copy not replaced: $(cat "$tmp/err")"

# 2. a wrong SHA-256: refused, nothing under the final name, no partial left
if pull wick-test/tiny wrong-hash.gguf --dir "$tmp/d"; then fail "wrong hash accepted"
else
    grep -q "SHA-256 mismatch" "$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "wrong hash: $(cat "$tmp/err")"
    [ ! -e "$tmp/d/wrong-hash.gguf" ] && no_partials "$tmp/d" || fail "wrong hash: a file was left behind"
    echo "ok   wrong hash: $(cat "$tmp/err")"
fi

# 3. a cut connection, no retries: exit 1, the partial kept under its temporary name
: >"$tmp/log"
if pull wick-test/tiny cut.gguf --dir "$tmp/d" --retries 0; then fail "cut connection reported success"
else
    part="$tmp/d/.cut.gguf.wick-partial"
    [ ! -e "$tmp/d/cut.gguf" ] || fail "cut: the final name exists after a failed download"
    [ -s "$part" ] && [ "$(stat -c %s "$part")" -lt "$(stat -c %s "$tmp/repo/cut.gguf")" ] \
        || fail "cut: no partial download kept"
    grep -q "connection lost" "$tmp/err" || fail "cut: $(cat "$tmp/err")"
    echo "ok   cut: $(cat "$tmp/err")"
fi
# ... the next run resumes from the partial (one more cut, then the retry finishes it)
if pull wick-test/tiny cut.gguf --dir "$tmp/d" --retries 2; then
    cmp -s "$tmp/repo/cut.gguf" "$tmp/d/cut.gguf" || fail "resume: the file differs"
    grep -Eq "^GET /cdn/.* bytes=[1-9][0-9]*-$" "$tmp/log" || fail "resume: no Range request in the log"
    no_partials "$tmp/d" || fail "resume: a partial remained"
    echo "ok   resumed with $(grep -Ec '^GET /cdn/.* bytes=[1-9][0-9]*-$' "$tmp/log") range request(s)"
else
    fail "resume: $(cat "$tmp/err")"
fi
# a server that ignores Range: the partial restarts from zero and the file is still right
head -c 1000 "$tmp/repo/no-range.gguf" >"$tmp/d/.no-range.gguf.wick-partial"
pull wick-test/tiny no-range.gguf --dir "$tmp/d" && cmp -s "$tmp/repo/no-range.gguf" "$tmp/d/no-range.gguf" \
    || fail "no-range: $(cat "$tmp/err")"

# 4. errors: one line, exit 1
expect_fail() { # WHAT PATTERN ARGS...
    local what=$1 pat=$2
    shift 2
    "$WICK" pull -q "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ne 1 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q "$pat" "$tmp/err"; then
        fail "$what: rc=$rc: $(cat "$tmp/err")"
    else
        echo "ok   $what: $(cat "$tmp/err")"
    fi
}
expect_fail "404 file" "HTTP 404" wick-test/tiny gone.gguf --dir "$tmp/d"
expect_fail "unknown repository" "no such repository" wick-test/nope --dir "$tmp/d"
expect_fail "unknown revision" "Invalid rev id" wick-test/tiny@v9 --dir "$tmp/d"
expect_fail "unknown file" "not in wick-test/tiny" wick-test/tiny nothing.gguf --dir "$tmp/d"
HF_ENDPOINT=http://127.0.0.1:1 expect_fail "no server" "127.0.0.1:1" wick-test/tiny --dir "$tmp/d"
[ ! -e "$tmp/d/gone.gguf" ] || fail "404: a file carries the final name"
"$WICK" pull wick-test/tiny >/dev/null 2>&1; [ $? -eq 2 ] || fail "missing --dir is not a usage error"
"$WICK" pull not-a-repo --dir "$tmp/d" >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad repo name is not a usage error"

# 5. --model-dir: hashed and reused, not downloaded
: >"$tmp/log"
if pull wick-test/tiny model.gguf cut.gguf --dir "$tmp/e" --model-dir "$tmp/d"; then
    grep -q "2 reused" "$tmp/out" || fail "model-dir: $(cat "$tmp/out")"
    ! grep -q "^GET /cdn/" "$tmp/log" || fail "model-dir: downloaded anyway"
    cmp -s "$tmp/repo/cut.gguf" "$tmp/e/cut.gguf" || fail "model-dir: cut.gguf differs"
    echo "ok   model-dir: $(cat "$tmp/out")"
else
    fail "model-dir: $(cat "$tmp/err")"
fi

# 6. the pulled pack is ready, per its manifest
"$WICK" check -m "$tmp/d/model.gguf" --manifest "$tmp/d/SHA256SUMS" --port 0 >"$tmp/out" 2>&1 \
    || fail "check after pull: $(cat "$tmp/out")"

[ $fails -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
[ $fails -eq 0 ]
