#!/usr/bin/env bash
# Instructions executed per kernel call, scalar against NEON / dotprod, on an
# emulated AArch64 CPU (qemu-aarch64-static, one instruction per translation
# block, every executed instruction logged). A count of instructions, not a
# time: it leaves out latency, memory and how many instructions a core issues
# per cycle, and nothing here ran on Arm hardware.
# Usage: scripts/kernel-insns.sh [BUILD_DIR] (default build-aarch64; needs
# what scripts/test-aarch64.sh needs).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-aarch64}
cmake -S . -B "$B" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
    -DWICK_CUDA=OFF >/dev/null
cmake --build "$B" -j"$(getconf _NPROCESSORS_ONLN)" --target kernel_insns >/dev/null
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wick-insns.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/log"
# exec lines look like "Trace 0: 0x7f.. [0000000000000000/0000005500801234/00000000/00000000] kernel_insns_begin"
awk '{ if (match($0, /\[[0-9a-f]+\/[0-9a-f]+\//)) { s = substr($0, RSTART + 1, RLENGTH - 2); sub(/^[0-9a-f]+\//, "", s); print s } }' \
    <"$tmp/log" >"$tmp/pcs" &
reader=$!
qemu-aarch64-static -L / -singlestep -d exec,nochain -D "$tmp/log" "$B/kernel_insns" >"$tmp/out"
wait $reader
python3 - "$tmp/out" "$tmp/pcs" <<'PY'
import sys
out = open(sys.argv[1]).read().split("\n")
begin, end = (int(x, 16) for x in out[0].split()[1::2])
kernels = [l.split()[1:] for l in out[1:] if l.startswith("KERNEL")]
counts, n, inside = [], 0, False
for line in open(sys.argv[2]):
    pc = int(line, 16)
    if pc == begin:
        inside, n = True, 0
    elif pc == end:
        inside = False
        counts.append(n)
    elif inside:
        n += 1
assert len(counts) == len(kernels), (len(counts), len(kernels))
scalar = {}
rows = []
for (name, level, elems), c in zip(kernels, counts):
    if level == "scalar":
        scalar[name] = c
    rows.append((name, level, int(elems), c))
print(f"{'kernel':30} {'level':8} {'elements':>9} {'instructions':>13} {'per element':>12} {'scalar / this':>14}")
for name, level, elems, c in rows:
    ratio = scalar[name] / c if name in scalar and c else float("nan")
    print(f"{name:30} {level:8} {elems:9d} {c:13d} {c / elems:12.2f} {ratio:13.1f}x")
PY
