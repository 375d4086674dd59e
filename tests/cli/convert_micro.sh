#!/usr/bin/env bash
# `wick convert` on the micro Qwen3.5 checkpoint that tools/train made
# (tests/models/micro: BF16 safetensors, GQA, H_v = 2 H_k, an MTP block,
# tied embeddings, its BPE tokenizer and chat template):
#  - F32: wick's logits equal PyTorch's (logits.f32, the model's own module in
#    float32 on tokens.u32) within the golden F32 rule, 0.01;
#  - F16 / BF16 / Q8_0 / Q4_K_M load, carry the MTP block, and stay near them;
#  - the tokenizer round-trips and the chat template is recognised (serve);
#  - broken folders fail with one line naming the file, key or tensor.
set -u
WICK=${WICK_BIN:?WICK_BIN not set}
SRC=${WICK_SOURCE_DIR:-$(dirname "$0")/../..}
M=$SRC/tests/models/micro
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-convert.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

ids=$(python3 -c "import struct,sys; d=open(sys.argv[1],'rb').read(); print(','.join(map(str,struct.unpack('<%dI'%(len(d)//4),d))))" "$M/tokens.u32")
# compare FILE TOL: max |wick - pytorch| over every logit
compare() {
    python3 - "$1" "$M/logits.f32" "$2" <<'PY'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
if len(a) != len(b):
    print(f"dump has {len(a)} bytes, want {len(b)}"); sys.exit(1)
n = len(a) // 4
x, y = struct.unpack(f"<{n}f", a), struct.unpack(f"<{n}f", b)
d = max(abs(p - q) for p, q in zip(x, y))
print(f"max |diff| {d:.3g} (bound {sys.argv[3]})")
sys.exit(0 if d <= float(sys.argv[3]) else 1)
PY
}

# bounds: F32 is the golden rule; the others allow for rounding the weights
# (logit std 1.3; measured: F16 0.003, BF16 0.009, Q8_0 0.13, Q4_K_M 0.32)
for case in f32:0.01 f16:0.02 bf16:0.05 q8_0:0.3 q4_k_m:1.0; do
    t=${case%%:*} bound=${case#*:}
    if ! "$WICK" convert "$M" -o "$tmp/micro-$t.gguf" --type "$t" --name wick-micro >"$tmp/out" 2>&1; then
        fail "convert --type $t: $(cat "$tmp/out")"; continue
    fi
    grep -q "4 layers + MTP block" "$tmp/out" || { fail "convert --type $t: $(cat "$tmp/out")"; continue; }
    if ! "$WICK" run -m "$tmp/micro-$t.gguf" --tokens "$ids" --dump-logits "$tmp/$t.f32" -t 2 >/dev/null 2>"$tmp/err"; then
        fail "run $t: $(cat "$tmp/err")"; continue
    fi
    if res=$(compare "$tmp/$t.f32" "$bound"); then echo "ok   $t: $res"; else fail "$t: $res"; fi
done

# the file's tokenizer is the checkpoint's: text -> ids -> the same text
text='def add(a, b):
    return a + b  # héllo'
got=$("$WICK" tokenizer encode -m "$tmp/micro-f32.gguf" --plain "$text")
back=$("$WICK" tokenizer decode -m "$tmp/micro-f32.gguf" $got)
[ "$back" = "$text" ] || fail "tokenizer round trip: '$back'"
"$WICK" info "$tmp/micro-f32.gguf" | grep -q "+ 1 MTP" || fail "wick info does not show the MTP block"
"$WICK" info "$tmp/micro-f32.gguf" | grep -q "pre: qwen35" || fail "pre-tokenizer is not qwen35"

# the same weights as two shards + index, and under a vision-language layout
# (model.language_model.* plus a vision tower to skip): the same GGUF tensors
python3 - "$M" "$tmp" <<'PY'
import json, os, shutil, struct, sys
src, tmp = sys.argv[1], sys.argv[2]
d = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n]); h.pop("__metadata__", None)
data = d[8 + n:]
def write(path, entries):
    hdr, blobs, off = {}, [], 0
    for name, (info, blob) in entries.items():
        hdr[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + len(blob)]}
        off += len(blob); blobs.append(blob)
    b = json.dumps(hdr).encode(); b += b" " * (-len(b) % 8)
    open(path, "wb").write(struct.pack("<Q", len(b)) + b + b"".join(blobs))
items = {k: (v, data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}
for case in ("shards", "vl"):
    os.makedirs(os.path.join(tmp, case))
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), os.path.join(tmp, case, f))
names = sorted(items)
half = {"model-00001-of-00002.safetensors": names[: len(names) // 2], "model-00002-of-00002.safetensors": names[len(names) // 2:]}
wmap = {}
for fn, ks in half.items():
    write(os.path.join(tmp, "shards", fn), {k: items[k] for k in ks})
    wmap.update({k: fn for k in ks})
json.dump({"metadata": {}, "weight_map": wmap}, open(os.path.join(tmp, "shards", "model.safetensors.index.json"), "w"))
vl = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in items.items()}
vl["model.visual.patch_embed.proj.weight"] = ({"dtype": "F32", "shape": [2]}, b"\0" * 8)
write(os.path.join(tmp, "vl", "model.safetensors"), vl)
PY
for case in shards vl; do
    if ! "$WICK" convert "$tmp/$case" -o "$tmp/$case.gguf" --type f32 --name wick-micro >"$tmp/out" 2>&1; then
        fail "convert $case: $(cat "$tmp/out")"; continue
    fi
    "$WICK" run -m "$tmp/$case.gguf" --tokens "$ids" --dump-logits "$tmp/$case.f32" -t 2 >/dev/null 2>&1
    cmp -s "$tmp/$case.f32" "$tmp/f32.f32" || fail "$case: logits differ from the single-file conversion"
done
grep -q "vision tensors skipped" "$tmp/out" || fail "vl: the vision tensor was not reported as skipped"

# broken inputs: non-zero exit, one line that names the problem
expect_error() { # WORDS DIR [ARGS...]
    local words=$1 dir=$2
    shift 2
    if "$WICK" convert "$dir" -o "$tmp/bad.gguf" "$@" >"$tmp/out" 2>"$tmp/err"; then
        fail "convert $dir succeeded (want: $words)"; return
    fi
    [ "$(wc -l <"$tmp/err")" = 1 ] || fail "convert $dir: not one line: $(cat "$tmp/err")"
    grep -q -- "$words" "$tmp/err" || fail "convert $dir: '$(cat "$tmp/err")' lacks '$words'"
    [ ! -e "$tmp/bad.gguf" ] || fail "convert $dir left a file behind"
}
copy() { rm -rf "$tmp/$1"; cp -r "$M" "$tmp/$1"; }
expect_error "not a folder" "$tmp/nowhere"
copy nost && rm "$tmp/nost/model.safetensors"
expect_error "no model.safetensors" "$tmp/nost"
copy arch && sed -i 's/"qwen3_5_text"/"llama"/; s/Qwen3_5ForCausalLM/LlamaForCausalLM/' "$tmp/arch/config.json"
expect_error "model_type 'llama'" "$tmp/arch"
copy shape && sed -i 's/"intermediate_size": 128/"intermediate_size": 96/' "$tmp/shape/config.json"
expect_error "mlp.gate_proj.weight: shape \[128, 64\], expected \[96, 64\]" "$tmp/shape"
copy key && sed -i 's/"hidden_size": 64,//' "$tmp/key/config.json"
expect_error "key hidden_size missing" "$tmp/key"
copy notok && rm "$tmp/notok/tokenizer.json"
expect_error "tokenizer.json: missing" "$tmp/notok"
copy trunc && truncate -s 100000 "$tmp/trunc/model.safetensors"
expect_error "outside the data section" "$tmp/trunc"
# a tensor dropped from the header: named as missing
copy drop && python3 - "$tmp/drop/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; d = open(p, "rb").read()
n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
del h["model.layers.1.linear_attn.A_log"]
b = json.dumps(h).encode(); b += b" " * (-len(b) % 8)
open(p, "wb").write(struct.pack("<Q", len(b)) + b + d[8 + n:])
PY
expect_error "tensor model.layers.1.linear_attn.A_log missing" "$tmp/drop"
expect_error "unknown type\|not a weight type\|type" "$M" --type q9_9

[ "$fails" = 0 ] && echo "convert_micro: ok" && exit 0
echo "convert_micro: $fails failure(s)"
exit 1
