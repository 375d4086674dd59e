#!/usr/bin/env bash
# wick sheet on two expert packs of one synthetic MoE (4-bit and 8-bit
# experts): rows of pack x runtime x machine x context with the fields the
# issue lists (SHA-256 as sha256sum says, bytes and bpw per class, aux table
# bytes counted apart, cold/warm prefill and decode speed, perplexity,
# needle and VT samples); Markdown, JSON lines and a self-contained HTML page
# (rendered by headless chromium with the network blocked) from measured
# or collected rows; --compare with deltas; bad input is one line and exit 1/2.
set -u
WICK=${WICK_BIN:-build/wick}
WICK=$(cd "$(dirname "$WICK")" && pwd)/$(basename "$WICK")
SRC=${WICK_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! command -v node >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then echo "node missing (CI requires it)" >&2; exit 1; fi
    echo "skip: node missing"; exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-sheet.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

"$WICK" synth -q --preset tiny-qwen35moe --type f16 -o "$tmp/moe-f16.gguf" || fail synth
"$WICK" quantize -q -t 2 "$tmp/moe-f16.gguf" "$tmp/experts-q4.gguf" q8_0 --expert-type q4_k >/dev/null || fail quantize
"$WICK" quantize -q -t 2 "$tmp/moe-f16.gguf" "$tmp/experts-q8.gguf" q8_0 >/dev/null || fail quantize
node "$SRC/tests/cli/make_aux_table.mjs" "$tmp/ngram.gguf" ngram 64

small=(--ctx 0,128 -p 32 -n 4 -r 1 --ppl-tokens 128 --task-tokens 256 -t 2 -q)
if ! "$WICK" sheet -m "$tmp/experts-q4.gguf" --aux "$tmp/ngram.gguf" -m "$tmp/experts-q8.gguf" "${small[@]}" --json \
        >"$tmp/rows.jsonl" 2>"$tmp/err"; then
    fail "sheet --json: $(cat "$tmp/err")"
fi
sha_q4=$(sha256sum "$tmp/experts-q4.gguf" | cut -d' ' -f1)
node - "$tmp/rows.jsonl" "$sha_q4" <<'JS' || fail "rows: see above"
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const bad = (m) => { console.error("rows: " + m); process.exit(1); };
if (rows.length !== 4) bad(`${rows.length} rows, want 2 packs x 2 contexts`);
const [a0, a1, b0] = rows;
if (a0.pack.sha256 !== process.argv[3]) bad("sha256 differs from sha256sum's");
if (a0.pack.aux_bytes !== 64 * 256 * 4 || a0.pack.aux[0].kind !== "ngram" || b0.pack.aux_bytes !== 0) bad("aux bytes");
if (!(a0.pack.classes.ffn.bpw < 6 && b0.pack.classes.ffn.bpw > 8)) bad("expert (ffn) bpw: 4 vs 8 bits expected");
if (Math.abs(a0.pack.classes.attention.bpw - b0.pack.classes.attention.bpw) > 0.01) bad("attention should be equal");
if (!(a0.pack.weight_bytes < b0.pack.weight_bytes)) bad("weight bytes");
for (const r of rows) {
    if (!(r.prefill.tok_s > 0 && r.decode.tok_s > 0)) bad("speeds");
    if ((r.context === 0) !== (r.prefill.tok_s_cold > 0)) bad("cold prefill only at context 0");
    if (r.runtime.name !== "wick" || !r.runtime.version || !(r.machine.cores >= 1) || !(r.machine.ram_bytes > 0)) bad("runtime/machine");
    const q = r.quality;
    if (!(q.perplexity.ppl > 1 && q.perplexity.tokens === 127)) bad("perplexity " + JSON.stringify(q.perplexity));
    if (q.needle.of !== 5 || !(q.vt.score >= 0 && q.vt.score <= 1)) bad("needle/vt " + JSON.stringify(q));
}
if (a1.context !== 128) bad("contexts");
JS
# aux bytes are the same number wick info shows
"$WICK" info "$tmp/experts-q4.gguf" --aux "$tmp/ngram.gguf" | grep -q "auxiliary: .* 64.00 KiB mapped in place" \
    || fail "wick info --aux"

# views from the collected rows (nothing measured again)
"$WICK" sheet --in "$tmp/rows.jsonl" >"$tmp/md" 2>"$tmp/err" || fail "--in: $(cat "$tmp/err")"
grep -q "^### Packs" "$tmp/md" && grep -q "^| experts-q4.gguf | 1 | 128 |" "$tmp/md" && grep -q "^run 1: wick" "$tmp/md" \
    || fail "markdown: $(head -20 "$tmp/md")"
head -2 "$tmp/rows.jsonl" >"$tmp/a.jsonl"
tail -2 "$tmp/rows.jsonl" >"$tmp/b.jsonl"
"$WICK" sheet --compare "$tmp/a.jsonl" "$tmp/b.jsonl" >"$tmp/cmp" 2>"$tmp/err" || fail "--compare: $(cat "$tmp/err")"
grep -q "experts-q4.gguf (A) vs experts-q8.gguf (B)" "$tmp/cmp" && grep -Eq "^\| ffn bpw \| [0-9.]+ \| [0-9.]+ \| \+[0-9.]+ \| [0-9.]+×" "$tmp/cmp" \
    && grep -q "^| decode tok/s @ 128 |" "$tmp/cmp" || fail "compare: $(cat "$tmp/cmp")"
"$WICK" sheet --compare "$tmp/a.jsonl" "$tmp/b.jsonl" --html "$tmp/sheet.html" -q >/dev/null || fail "--html"
[ "$(grep -c "<svg" "$tmp/sheet.html")" -eq 4 ] || fail "html: $(grep -c "<svg" "$tmp/sheet.html") charts"
! grep -Eqi "https?://|<script|<link" "$tmp/sheet.html" || fail "html refers to the network or scripts"
grep -q "B / A" "$tmp/sheet.html" || fail "html: no comparison table"
if [ -x "${WICK_CHROMIUM:-/usr/bin/chromium}" ] && [ -d "$SRC/node_modules/playwright-core" ]; then
    node "$SRC/scripts/sheet_screenshot.mjs" "$tmp/sheet.html" "$tmp/sheet.png" || fail "chromium rendering"
elif [ "${CI:-}" = true ]; then
    fail "chromium or playwright-core missing (CI requires them)"
fi

# errors
expect() { # RC PATTERN ARGS...
    local want=$1 pat=$2
    shift 2
    "$WICK" sheet "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ne "$want" ] || ! grep -q -- "$pat" "$tmp/err" || [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
        fail "sheet $*: rc=$rc: $(cat "$tmp/err")"
    else echo "ok   $(cat "$tmp/err")"; fi
}
expect 1 "nope.gguf: cannot open" -m "$tmp/nope.gguf" -q
expect 2 "needs exactly two" --compare "$tmp/a.jsonl"
expect 2 "nothing to show" -q
expect 2 "belongs to a preceding -m" --aux "$tmp/ngram.gguf" -m "$tmp/experts-q8.gguf"
echo '{"not": "a row"}' >"$tmp/bad.jsonl"
expect 1 "bad.jsonl:1: not a sheet row" --in "$tmp/bad.jsonl"
expect 1 "not an auxiliary table" -m "$tmp/experts-q8.gguf" --aux "$tmp/experts-q4.gguf" -q
expect 2 "--ctx" -m "$tmp/experts-q8.gguf" --ctx x

[ $fails -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
[ $fails -eq 0 ]
