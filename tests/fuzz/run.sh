#!/usr/bin/env bash
# Builds one libFuzzer harness and runs it for a bounded time.
#   tests/fuzz/run.sh NAME [SECONDS]      NAME: gguf, model_load, tokenizer, archive, json_schema,
#                                         request or chat_render (default 60 s)
# Env: WICK_FUZZ_BUILD (build dir, default build-fuzz), WICK_GOLDEN (golden data),
#      WICK_FUZZ_JOBS (parallel fuzzing processes, default 1), WICK_FUZZ_DIRECT=1 (compile
#      the harness and only the sources it needs with clang, instead of the cmake target,
#      which builds all of wickcore: the CI smoke run).
# Seeds (from golden data):
#   gguf        small valid GGUFs made from golden models and vocab files (every key and tensor
#               record kept, tensor data shrunk), plus truncated and corrupted variants;
#   model_load  whole small golden models (the harness's mutator rewrites header values);
#   tokenizer   the texts of the golden tokenizer tests, with vocab/mode bytes; the vocabularies
#               (WICK_FUZZ_VOCABS) are a golden model's and golden llama.cpp vocab files;
#   archive     real prefix-cache archive files of a golden hybrid model, written by the
#               harness itself (a first write and an appended record);
#   json_schema a mode byte, an option byte and a schema, tool list or GBNF text (the JSON
#               schema, tool-call and GBNF compilers, then constrained steps);
#   request     tests/fuzz/seeds/*.json, request bodies shaped like the coding CLIs' (the
#               file name's prefix picks the API: chat, completion, messages, responses) ->
#               refused in one line or a validated conversation that renders;
#   chat_render the chat request seeds and builder programs -> every template.
# The working corpus persists in $WICK_FUZZ_BUILD/fuzz-NAME-corpus between runs.
# Exit status: 0 when the run ends without a finding, non-zero on a crash, leak,
# timeout or out-of-memory (the reproducer is left in $WICK_FUZZ_BUILD/fuzz-NAME-artifacts).
set -euo pipefail
name=${1:-}
secs=${2:-60}
names="gguf|model_load|tokenizer|archive|json_schema|request|chat_render"
case "|$names|" in *"|$name|"*) ;; *) echo "usage: $0 $names [SECONDS]" >&2; exit 2 ;; esac
case $secs in ''|*[!0-9]*) echo "usage: $0 NAME [SECONDS]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${WICK_FUZZ_BUILD:-$root/build-fuzz}
golden=${WICK_GOLDEN:-$root/../shared/golden}
jobs=${WICK_FUZZ_JOBS:-1}
mkdir -p "$build"

# ---- build ------------------------------------------------------------------------
libs="$(pkg-config --libs libpcre2-8 jansson libxxhash libcrypto zlib libzstd) -lm -lpthread"
flags="-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fno-math-errno
       -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -I$root/src
       $(pkg-config --cflags jansson libpcre2-8 libmicrohttpd)"

# Compiles the library's modules once into a static archive (one object per source,
# ISA flags as CMakeLists.txt gives them; again when a source is newer), then links
# the harness against it: the linker takes only the objects the harness reaches.
build_direct() {
    local obj=$build/obj stamp=$build/obj/.built
    if [ ! -f "$stamp" ] || [ -n "$(find "$root/src" -newer "$stamp" -name '*.[ch]' | head -n 1)" ]; then
        rm -rf "$obj"
        mkdir -p "$obj"
        (cd "$root/src" && find . -name '*.c' ! -path './cli/*' | sed 's|^\./||' | sort) |
            CC=${CC:-clang} FLAGS="$flags" SRC="$root/src" OBJ="$obj" ARCH="$(uname -m)" nice -n 19 xargs -P 2 -I{} sh -c '
            f={}; isa=
            case $ARCH:$f in
                x86_64:*_amx_avx512.c) isa="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c -mamx-tile -mamx-int8 -mamx-bf16" ;;
                x86_64:*_avx512.c) isa="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c" ;;
                x86_64:*_avx2.c) isa="-mavx2 -mfma -mf16c" ;;
                x86_64:*_neon*.c | aarch64:*_avx*.c) exit 0 ;; # the other architecture'"'"'s kernels
                aarch64:*_neon_dotprod.c) isa="-march=armv8.2-a+dotprod" ;;
            esac
            $CC $FLAGS $isa -c "$SRC/$f" -o "$OBJ/$(echo "$f" | tr / _).o"'
        ar rcs "$obj/libwickfuzz.a" "$obj"/*.o
        touch "$stamp"
    fi
    nice -n 19 ${CC:-clang} $flags -fsanitize=fuzzer "$root/tests/fuzz/fuzz_$name.c" "$obj/libwickfuzz.a" $libs \
        -o "$build/fuzz_${name}_direct"
    fuzzer=$build/fuzz_${name}_direct
}

fuzzer=$build/fuzz_$name
if [ "${WICK_FUZZ_DIRECT:-0}" = 1 ]; then
    build_direct
else
    [ -f "$build/CMakeCache.txt" ] || CC=${CC:-clang} cmake -S "$root" -B "$build" -DWICK_FUZZ=ON -DWICK_SANITIZE=ON \
        -DWICK_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    if ! nice -n 19 cmake --build "$build" --target "fuzz_$name" -j2 >"$build/fuzz-$name-build.log" 2>&1; then
        # unrelated parts of wickcore may not build with clang at a given moment
        echo "warning: cmake target fuzz_$name failed (see $build/fuzz-$name-build.log); building it from its modules only" >&2
        build_direct
    fi
fi

# ---- seeds ---------------------------------------------------------------------------
corpus=$build/fuzz-$name-corpus
seeds=$build/fuzz-$name-seeds
artifacts=$build/fuzz-$name-artifacts
rm -rf "$seeds"
mkdir -p "$corpus" "$seeds" "$artifacts"
extra=()
case $name in
gguf)
    # seeds from a few small golden files (whole models are hundreds of KB; only headers matter)
    src=()
    for m in tiny-llama-Q4_K_M tiny-qwen3-IQ4_NL tiny-qwen3moe-Q8_0 tiny-qwen35-Q4_K_M tiny-qwen35moe-Q4_K_M; do
        [ -f "$golden/models/$m.gguf" ] && src+=("$golden/models/$m.gguf")
    done
    for v in phi-3 gpt-2; do
        [ -f "$golden/tokenizer/ggml-vocab-$v.gguf.gz" ] && src+=("$golden/tokenizer/ggml-vocab-$v.gguf.gz")
    done
    if [ ${#src[@]} -gt 0 ] && command -v python3 >/dev/null; then
        python3 "$root/tests/fuzz/make_seeds.py" "$seeds" "${src[@]}"
    elif [ ${#src[@]} -gt 0 ]; then
        for f in "${src[@]}"; do case $f in *.gguf) head -c 16384 "$f" >"$seeds/$(basename "$f").head" ;; esac; done
    fi
    printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"$seeds/empty-v3.gguf"
    # truncated and corrupted variants of one seed
    first=$(ls "$seeds"/*.seed.gguf 2>/dev/null | head -n 1 || true)
    if [ -n "$first" ]; then
        size=$(stat -c %s "$first")
        for n in 7 23 64 300 1000 $((size / 2)) $((size - 1)); do
            [ "$n" -lt "$size" ] && head -c "$n" "$first" >"$seeds/trunc-$n.gguf"
        done
        { head -c 4 "$first"; printf '\x02\x00\x00\x00'; tail -c +9 "$first"; } >"$seeds/v2.gguf"
        { head -c 100 "$first"; printf '\xff\xff\xff\xff'; tail -c +105 "$first"; } >"$seeds/corrupt-100.gguf"
        { head -c 600 "$first"; printf '\x09\x00\x00\x00'; tail -c +605 "$first"; } >"$seeds/corrupt-600.gguf"
    fi
    # dictionary of tokens that appear in real headers
    {
        echo '"GGUF"'
        for k in general.architecture general.alignment general.file_type tokenizer.ggml.tokens \
                 llama.block_count qwen35.full_attention_interval .weight blk.0. token_embd; do
            echo "\"$k\""
        done
    } >"$build/fuzz-gguf.dict"
    extra=(-max_len=16384 -dict="$build/fuzz-gguf.dict")
    ;;
model_load)
    # one small file per architecture and weight-type family (the largest is 1.1 MB)
    for m in tiny-llama-Q4_K_M tiny-llama-Q2_K tiny-qwen3-Q8_0 tiny-qwen3-IQ4_NL tiny-qwen3moe-Q4_K_M \
             tiny-qwen35-Q4_K_M tiny-qwen35moe-Q4_K_M tiny-qwen35moe-Q8_0; do
        [ -f "$golden/models/$m.gguf" ] && cp "$golden/models/$m.gguf" "$seeds/"
    done
    extra=(-max_len=1200000)
    ;;
tokenizer)
    vocabs=$build/fuzz-vocabs
    mkdir -p "$vocabs"
    list=""
    [ -f "$golden/models/tiny-qwen3-F32.gguf" ] && list="$golden/models/tiny-qwen3-F32.gguf"
    for v in gpt-2 llama-spm deepseek-coder phi-3; do
        f=$golden/tokenizer/ggml-vocab-$v.gguf.gz
        [ -f "$f" ] || continue
        [ -s "$vocabs/$v.gguf" ] || gzip -dc "$f" >"$vocabs/$v.gguf"
        list="$list${list:+:}$vocabs/$v.gguf"
    done
    [ -n "$list" ] || { echo "no vocabularies under $golden" >&2; exit 1; }
    export WICK_FUZZ_VOCABS=$list
    # byte 0 = vocab index + mode (fuzz_tokenizer.c), then a golden test text
    n_vocabs=$(echo "$list" | tr ':' '\n' | wc -l)
    python3 - "$seeds" "$n_vocabs" "$golden"/tokenizer/ggml-vocab-gpt-2.gguf.inp \
        "$golden"/tokenizer/ggml-vocab-llama-spm.gguf.inp <<'PY'
import sys
out, n = sys.argv[1], int(sys.argv[2])
k = 0
for path in sys.argv[3:]:
    for text in open(path, 'rb').read().split(b'\n__ggml_vocab_test__\n'):
        for mode in (0x00, 0x08, 0x20, 0x40):
            open(f'{out}/t{k:04d}', 'wb').write(bytes([(k % n) | mode]) + text)
            k += 1
PY
    extra=(-max_len=4096)
    ;;
json_schema)
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

    dict=$build/fuzz-json_schema.dict
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
    extra=(-max_len=8192 -timeout=20 -malloc_limit_mb=1536 -dict="$dict")
    ;;
request|chat_render)
    for f in "$root"/tests/fuzz/seeds/*.json; do
        base=$(basename "$f" .json)
        if [ "$name" = request ]; then
            # the harness's first byte picks the API
            case $base in chat-*) api='\x00' ;; completion-*) api='\x01' ;; messages-*) api='\x02' ;; *) api='\x03' ;; esac
            { printf "$api"; cat "$f"; } >"$seeds/$base"
        else
            case $base in chat-*) cp "$f" "$seeds/$base" ;; esac
        fi
    done
    # builder programs for fuzz_chat_render: opcode + short texts (see the harness)
    [ "$name" = chat_render ] && printf '\x00\x05hello\x08\x02hi\x02\x06<tool_call>\x04\x04read\x02{}\x0b\x03why\x07' >"$seeds/ops-basic"
    dict=$build/fuzz-$name.dict
    {
        for k in messages role content system user assistant tool developer tool_calls function arguments name \
                 tool_call_id reasoning_content tools parameters tool_choice required response_format json_schema \
                 schema '$ref' '$defs' input input_text output_text function_call function_call_output call_id \
                 namespace instructions text type tool_use tool_result thinking input_schema max_tokens stream \
                 '<|im_start|>' '<|im_end|>' '<think>' '</think>' '<tool_call>' '</tool_call>' '<function=' '<parameter='; do
            printf '"%s"\n' "$k" # none holds a quote or a backslash
        done
    } >"$dict"
    extra=(-max_len=65536 -timeout=10 -dict="$dict")
    ;;
archive)
    # the harness writes them (WICK_FUZZ_SEEDS) from tiny-qwen35-F32: archives of ~80-150 KB
    WICK_FUZZ_SEEDS=$seeds "$fuzzer" -runs=0 "$seeds" >"$build/fuzz-archive-seeds.log" 2>&1
    extra=(-max_len=262144)
    ;;
esac

jobs_args=()
[ "$jobs" -gt 1 ] && jobs_args=(-jobs="$jobs" -workers="$jobs")
echo "fuzzing fuzz_$name for ${secs}s with $(ls "$seeds" | wc -l) seeds (corpus: $corpus)"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
nice -n 19 "$fuzzer" "$corpus" "$seeds" \
    -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    "${extra[@]}" ${jobs_args[@]+"${jobs_args[@]}"} -print_final_stats=1 \
    -artifact_prefix="$artifacts/"
