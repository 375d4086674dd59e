#!/usr/bin/env bash
# Builds and runs the grammar fuzzer (JSON schema, tool-call and GBNF
# compilers, then constrained steps) for a bounded time.
#   tests/fuzz/run_json_schema.sh [SECONDS]        (default 60)
# Env: WICK_FUZZ_BUILD (build dir, default build-fuzz), WICK_FUZZ_JOBS
# (parallel fuzzing processes, default 1).
# The harness is built straight from the sources it needs (grammar engine,
# tokenizer, GGUF reader/writer, util) with clang's libFuzzer + ASan/UBSan.
# The working corpus persists in $WICK_FUZZ_BUILD/fuzz-json-schema-corpus.
# Exit status: 0 when the run ends without a finding, non-zero on a crash,
# leak, timeout or out-of-memory (reproducer in $WICK_FUZZ_BUILD/fuzz-json-schema-artifacts).
set -euo pipefail
secs=${1:-60}
case $secs in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${WICK_FUZZ_BUILD:-$root/build-fuzz}
jobs=${WICK_FUZZ_JOBS:-1}
mkdir -p "$build"
fuzzer=$build/fuzz_json_schema
nice -n 19 ${CC:-clang} -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/src" \
    $(pkg-config --cflags jansson libpcre2-8) \
    "$root/tests/fuzz/fuzz_json_schema.c" "$root"/src/engine/grammar*.c "$root"/src/engine/json_schema*.c \
    "$root"/src/tokenizer/*.c "$root"/src/gguf/*.c "$root/src/quant/qtypes.c" "$root/src/util/err.c" \
    "$root/src/util/log.c" "$root/src/util/mapfile.c" \
    $(pkg-config --libs jansson libpcre2-8) -lm -o "$fuzzer"

corpus=$build/fuzz-json-schema-corpus
seeds=$build/fuzz-json-schema-seeds
artifacts=$build/fuzz-json-schema-artifacts
rm -rf "$seeds"
mkdir -p "$corpus" "$seeds" "$artifacts"
# seed = mode byte, option byte, text (modes: 0 schema, 1 Hermes tools, 2 XML tools, 3 GBNF)
seed() { printf "$1$2" >"$seeds/$3"; cat >>"$seeds/$3"; }
seed '\x00' '\x00' object <<'EOF'
{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":130},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":4}},"required":["name"],"additionalProperties":false}
EOF
seed '\x00' '\x01' refs <<'EOF'
{"$schema":"https://json-schema.org/draft/2020-12/schema","$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"v":{"anyOf":[{"type":"number","exclusiveMinimum":0},{"type":"null"}]},"k":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}}}
EOF
seed '\x00' '\x02' tuple <<'EOF'
{"type":"array","prefixItems":[{"const":"x"},{"type":"boolean"}],"items":{"type":"string","minLength":1,"maxLength":3},"minItems":1,"maxItems":5}
EOF
seed '\x01' '\x08' hermes <<'EOF'
[{"type":"function","function":{"name":"write_file","parameters":{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"},"n":{"type":"integer"}},"required":["path","content"]}}},{"type":"function","function":{"name":"list"}}]
EOF
seed '\x02' '\x04' xml <<'EOF'
{"type":"object","properties":{"path":{"type":"string","enum":["a","b<"]},"lines":{"type":"array","items":{"type":"string"}},"force":{"type":["boolean","null"]}},"required":["path"]}
EOF
seed '\x03' '\x00' gbnf <<'EOF'
root ::= <think> [^<]* </think> ws obj
obj ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= "\"" [a-z]{1,8} "\"" ws ":" ws ( obj | [0-9]+ | "\"" ( [^"\\] | "\\" . )* "\"" ) ws
ws ::= [ \t\n]{0,4}
EOF
seed '\x03' '\x00' gbnf-utf8 <<'EOF'
root ::= ( [α-ω] | [\u4e00-\u9fff]{2} | . "!"? )+ "\n" | "x"{3,7}
EOF

dict=$build/fuzz-json-schema.dict
{
    for k in type object array string number integer boolean null properties required additionalProperties \
             items prefixItems additionalItems minItems maxItems minLength maxLength minimum maximum \
             exclusiveMinimum exclusiveMaximum enum const anyOf oneOf allOf '$ref' '$defs' definitions \
             '#/$defs/' pattern format title description default parameters function name; do
        echo "\"$k\""
    done
    for k in '::=' '<tool_call>' '</tool_call>' '</parameter>' '<think>' '</think>' '[^' '{0,' '\\u'; do
        printf '"%s"\n' "$(printf '%s' "$k" | sed 's/\\/\\\\/g; s/"/\\"/g')"
    done
} >"$dict"

jobs_args=()
[ "$jobs" -gt 1 ] && jobs_args=(-jobs="$jobs" -workers="$jobs")
echo "fuzzing fuzz_json_schema for ${secs}s with $(ls "$seeds" | wc -l) seeds (corpus: $corpus)"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
nice -n 19 "$fuzzer" "$corpus" "$seeds" \
    -max_total_time="$secs" -max_len=8192 -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=1536 \
    -dict="$dict" ${jobs_args[@]+"${jobs_args[@]}"} -print_final_stats=1 \
    -artifact_prefix="$artifacts/"
