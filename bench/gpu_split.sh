#!/usr/bin/env bash
# The layer split on ONE GPU (issue 22): `--device cuda:0,0 --split layer` lists GPU 0
# twice, so the hand-over between parts runs on one card, and must give what
# `--device cuda:0` gives, bit for bit:
#   golden   every prompt row's logits (64 tokens, one batch) equal (cmp), both within the
#            golden tolerance of the reference logits, the same 16 greedy tokens after them
#   synth    random-weight models with more layers (qwen35 with MTP, qwen3moe, llama) made by
#            `wick synth`: split in 2 and 3 parts, prompt logits equal, greedy tokens equal,
#            also with --spec mtp (the MTP block on the last part, rollback of every part)
#   gpu-mem  refusals naming what does not fit (weights, a sequence), wick check's placement
#            lines and their FAIL, --split tensor refused
# Run from the repository root on the GPU machine:
#   WICK=path/to/wick GOLDEN=dir bash bench/gpu_split.sh
# GOLDEN holds models/*.gguf, logits/*.n64.logits.bin and cases.txt (bench/gpu.sh
# prepare-golden's format). Prints one line per check and "split: N passed, M failed";
# exits 1 when something failed. Takes well under a minute.
set -u
WICK=${WICK:?WICK=path to a CUDA build of wick}
GOLDEN=${GOLDEN:?GOLDEN=folder with models/, logits/ and cases.txt}
T=$(mktemp -d)
pass=0
fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

# max |a - b| over two float32 files, and whether it is within tol
within() { # a b tol
  python3 - "$1" "$2" "$3" <<'PY'
import array, sys
a, b = array.array("f"), array.array("f")
try:
    a.frombytes(open(sys.argv[1], "rb").read()); b.frombytes(open(sys.argv[2], "rb").read())
except OSError as e:
    print("missing (%s)" % e.filename); sys.exit(1)
d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")
print("%.4g" % d); sys.exit(0 if d <= float(sys.argv[3]) else 1)
PY
}

# run NAME MODEL TOKENS EXTRA...: prompt logits to $T/NAME.bin, greedy text to $T/NAME.txt
run() {
  local name=$1 model=$2 toks=$3
  shift 3
  "$WICK" run -m "$model" --tokens "$toks" -n 16 --temp 0 --dump-logits "$T/$name.bin" "$@" \
    >"$T/$name.txt" 2>"$T/$name.err"
}

same() { # label a b: the split run equals the plain one
  local label=$1 a=$2 b=$3
  if [ ! -s "$T/$a.bin" ] || [ ! -s "$T/$b.bin" ]; then
    bad "$label: no logits ($(tail -1 "$T/$b.err"))"
  elif ! cmp -s "$T/$a.bin" "$T/$b.bin"; then
    bad "$label: logits differ (max |diff| $(within "$T/$a.bin" "$T/$b.bin" 0))"
  elif ! cmp -s "$T/$a.txt" "$T/$b.txt"; then
    bad "$label: logits equal, greedy tokens differ"
  else
    ok "$label: logits bit for bit, greedy tokens equal"
  fi
}

echo "== golden: --device cuda:0 vs cuda:0,0 --split layer"
while read -r model n vocab tol logits gen toks greedy; do
  name=$(basename "$model" .gguf)
  run "$name.one" "$GOLDEN/$model" "$toks" --device cuda:0
  run "$name.two" "$GOLDEN/$model" "$toks" --device cuda:0,0 --split layer
  same "$name" "$name.one" "$name.two"
  if d=$(within "$T/$name.two.bin" "$GOLDEN/$logits" "$tol"); then ok "$name: split within golden tol $tol (max $d)"
  else bad "$name: split vs golden max $d > $tol"; fi
done <"$GOLDEN/cases.txt"

echo "== synth: more layers, 2 and 3 parts"
toks=$(python3 -c 'print(",".join(str(3 + i * 37 % 200) for i in range(48)))')
for spec in "qwen35 --layers 8 --mtp" "qwen3moe --layers 6" "llama --layers 7"; do
  set -- $spec
  arch=$1
  shift
  if ! "$WICK" synth --arch "$arch" "$@" -q -o "$T/$arch.gguf" >"$T/synth.err" 2>&1; then
    bad "synth $arch: $(tail -1 "$T/synth.err")"
    continue
  fi
  run "$arch.one" "$T/$arch.gguf" "$toks" --device cuda:0
  run "$arch.two" "$T/$arch.gguf" "$toks" --device cuda:0,0
  run "$arch.three" "$T/$arch.gguf" "$toks" --device cuda:0,0,0
  same "synth $arch 2 parts" "$arch.one" "$arch.two"
  same "synth $arch 3 parts" "$arch.one" "$arch.three"
  if [ "$arch" = qwen35 ]; then
    run "$arch.mtp1" "$T/$arch.gguf" "$toks" --device cuda:0 --spec mtp
    run "$arch.mtp2" "$T/$arch.gguf" "$toks" --device cuda:0,0 --spec mtp
    same "synth $arch --spec mtp 2 parts" "$arch.mtp1" "$arch.mtp2"
  fi
done

echo "== --gpu-mem, wick check, --split tensor"
m="$GOLDEN/models/$(head -1 "$GOLDEN/cases.txt" | cut -d' ' -f1 | xargs basename)"
t1=$(head -1 "$GOLDEN/cases.txt" | cut -d' ' -f7)
expect_fail() { # label pattern cmd...
  local label=$1 pat=$2
  shift 2
  if "$@" >"$T/x.out" 2>&1; then bad "$label: exit 0"
  elif grep -q -- "$pat" "$T/x.out"; then ok "$label: $(grep -m1 -- "$pat" "$T/x.out" | cut -c1-160)"
  else bad "$label: $(tail -1 "$T/x.out")"; fi
}
expect_fail "weights over --gpu-mem" "do not fit --gpu-mem" "$WICK" run -m "$m" --tokens "$t1" -n 1 --device cuda:0 --gpu-mem 64K
expect_fail "sequence over --gpu-mem" "over --gpu-mem" "$WICK" run -m "$m" --tokens "$t1" -n 1 --device cuda:0,0 --gpu-mem 64M --ctx 1048576
expect_fail "tensor split refused" "NCCL" "$WICK" run -m "$m" --tokens "$t1" -n 1 --device cuda:0,0 --split tensor
expect_fail "check FAIL under a small --gpu-mem" "does NOT fit" "$WICK" check -m "$m" --device cuda:0 --gpu-mem 64K --ctx 4096
if "$WICK" check -m "$m" --device cuda:0,0 --gpu-mem 20G --ctx 65536 >"$T/check.out" 2>&1 &&
  grep -q "placement.*cuda:0 layers 0-0" "$T/check.out" && grep -q "placement.*layers 1-1" "$T/check.out"; then
  ok "check placement: $(grep -c placement "$T/check.out") lines"
  grep placement "$T/check.out"
else
  bad "check placement: $(cat "$T/check.out")"
fi
"$WICK" check -m "$m" --device cuda:0,0 --json --ctx 65536 >"$T/check.json" 2>&1 &&
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["placement"]; assert len(p) == 2 and all(d["fits"] for d in p)' \
    "$T/check.json" && ok "check --json placement" || bad "check --json: $(tail -3 "$T/check.json")"

echo "split: $pass passed, $fail failed"
rm -rf "$T"
[ "$fail" = 0 ]
