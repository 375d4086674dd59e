#!/usr/bin/env bash
# --device on run, bench and serve: cpu runs, bad values are refused with a
# message naming them (GPU lists, --split, --gpu-mem too), and cuda either runs (a CUDA build on a GPU machine) or
# fails with a clear reason (built without CUDA, or no usable GPU) instead of
# crashing.
set -euo pipefail
WICK_BIN=${WICK_BIN:?WICK_BIN not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$WICK_BIN" synth -q --preset tiny -o "$tmp/tiny.gguf"
for cmd in run bench serve; do
    # via a file: grep -q exits at the first match, and with pipefail the help writer's SIGPIPE would fail the test
    "$WICK_BIN" $cmd --help >"$tmp/help"
    grep -q -- "--device" "$tmp/help" || { echo "FAIL: wick $cmd --help has no --device"; exit 1; }
done

"$WICK_BIN" run -m "$tmp/tiny.gguf" --device cpu --tokens 1,2,3 -n 2 -t 2 >/dev/null 2>"$tmp/err"

for cmd in run bench serve; do
    if "$WICK_BIN" $cmd -m "$tmp/tiny.gguf" --device tpu --tokens 1 -n 1 2>"$tmp/err" >/dev/null; then
        echo "FAIL: wick $cmd accepted --device tpu"; exit 1
    fi
    grep -q "unknown device 'tpu'" "$tmp/err" || { echo "FAIL: wick $cmd: $(cat "$tmp/err")"; exit 1; }
done
if "$WICK_BIN" run -m "$tmp/tiny.gguf" --device cuda:x --tokens 1 -n 1 2>"$tmp/err" >/dev/null; then
    echo "FAIL: --device cuda:x accepted"; exit 1
fi

# --split and --gpu-mem: bad values and combinations are refused, naming them
refused() { # pattern cmd args...: exit 2 (usage) or 1, with the pattern in the message
    local pat=$1 extra=()
    shift
    [ "$1" = run ] && extra=(--tokens 1 -n 1)
    if "$WICK_BIN" "$@" -m "$tmp/tiny.gguf" "${extra[@]}" 2>"$tmp/err" >/dev/null; then
        echo "FAIL: wick $* accepted"; exit 1
    fi
    grep -q -- "$pat" "$tmp/err" || { echo "FAIL: wick $*: $(cat "$tmp/err")"; exit 1; }
}
for cmd in run bench serve; do
    refused "'rows' is not layer or tensor" $cmd --split rows
    refused "--gpu-mem" $cmd --gpu-mem lots
    refused "it needs --device cuda" $cmd --gpu-mem 1G
    refused "NCCL" $cmd --split tensor
done
refused "bad GPU number in 'cuda:0,'" run --device cuda:0,
refused "more than 8 GPUs" run --device cuda:0,1,2,3,4,5,6,7,0
refused "measures one device" sheet --device cpu --split layer

# cuda: runs, or says why not (no crash: exit status 1 with a message)
set +e
"$WICK_BIN" run -m "$tmp/tiny.gguf" --device cuda --tokens 1,2,3 -n 2 >/dev/null 2>"$tmp/err"
rc=$?
set -e
if [ "$rc" != 0 ]; then
    [ "$rc" = 1 ] || { echo "FAIL: --device cuda exited with $rc: $(cat "$tmp/err")"; exit 1; }
    grep -q -i -E "built without CUDA|cuda" "$tmp/err" || { echo "FAIL: unclear error: $(cat "$tmp/err")"; exit 1; }
    echo "cuda not usable here: $(head -n 1 "$tmp/err")"
fi
echo "device_option: ok"
