#!/usr/bin/env bash
# The `wick` binary with the CUDA backend on a GPU machine that lacks CMake's
# configure-time tools (pkg-config) or the Debian -dev packages: compiles
# src/ with cc and src/backend/cuda/*.cu with nvcc directly (same flags as the
# CMake Release build, WICK_HAVE_CUDA on), then checks and measures it.
# Run from the repository root.
#   bench/gpu_wick.sh build             -> build-cuda-wick/wick
#   bench/gpu_wick.sh golden [DIR]      wick run --device cuda --tokens … --dump-logits on every
#                                       case of DIR/cases.txt (default .golden, made by
#                                       bench/gpu.sh prepare-golden): max |logit − reference|
#                                       against the case's tolerance, and the greedy
#                                       continuation (16 tokens) on cuda vs cpu
#   bench/gpu_wick.sh bench PRESET TYPE [wick bench args]
#                                       wick synth --preset PRESET --type TYPE, then
#                                       wick bench --device cuda on it
# WICK_DEBS: a folder of .deb files (libjansson-dev, libmicrohttpd-dev, libpcre2-dev,
#   libxxhash-dev, libssl-dev and their library packages; get them with `apt-get
#   download` on a Debian machine) unpacked under $B/debroot and used first for
#   headers and libraries; its gnutls/ subfolder (libmicrohttpd's TLS library and
#   what that needs) is unpacked only when the machine has no libgnutls.so.30.
# Environment: NVCC, WICK_CUDA_ARCH (default sm_90a), B (build folder, default
#   build-cuda-wick), OUT (optional folder for logs).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-build}
B=${B:-build-cuda-wick}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${WICK_CUDA_ARCH:--gencode arch=compute_90a,code=sm_90a}
log=${OUT:-$B}
mkdir -p "$B" "$log"

debroot_env() {
  local r="$PWD/$B/debroot"
  if [ -d "$r/usr/lib/x86_64-linux-gnu" ]; then
    export LD_LIBRARY_PATH="$r/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

build() {
  local inc="" lib="" r="$PWD/$B/debroot"
  if [ -n "${WICK_DEBS:-}" ] && ls "$WICK_DEBS"/*.deb >/dev/null 2>&1; then
    rm -rf "$r"; mkdir -p "$r"
    for d in "$WICK_DEBS"/*.deb; do dpkg -x "$d" "$r"; done
    if ! ldconfig -p | grep -q 'libgnutls.so.30 ' && ls "$WICK_DEBS"/gnutls/*.deb >/dev/null 2>&1; then
      echo "(no libgnutls.so.30 here: using the carried one)"
      for d in "$WICK_DEBS"/gnutls/*.deb; do dpkg -x "$d" "$r"; done
    fi
    inc="-I$r/usr/include -I$r/usr/include/x86_64-linux-gnu"
    lib="-L$r/usr/lib/x86_64-linux-gnu -Wl,-rpath-link,$r/usr/lib/x86_64-linux-gnu"
  fi
  local jobs; jobs=$(nproc 2>/dev/null || echo 4)
  echo "== build wick with CUDA ($NVCC, $ARCH, $jobs jobs)"
  mkdir -p "$B/obj" "$B/generated"
  cmake -DOUT="$B/generated/web_assets.c" -DDIR=web/monitor -P cmake/embed_assets.cmake
  local cuflags="-std=c++17 -O3 $ARCH -Isrc --expt-relaxed-constexpr -D_GNU_SOURCE"
  local cflags="-std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE -fno-math-errno -DWICK_HAVE_CUDA=1 -Isrc $inc"
  local objs=() pids=() f o extra
  for f in src/backend/cuda/*.cu; do
    o="$B/obj/$(echo "${f%.cu}" | tr / _).o"
    objs+=("$o")
    rm -f "$o.failed"
    { "$NVCC" $cuflags -c "$f" -o "$o" >"$o.log" 2>&1 || touch "$o.failed"; } &
    pids+=($!)
  done
  for f in $(find src -name '*.c' | sort) "$B/generated/web_assets.c"; do
    case "$f" in
      *_neon*.c) continue ;; # AArch64 kernels: not part of an x86-64 build
      *_avx2.c) extra="-mavx2 -mfma -mf16c" ;;
      *_amx_avx512.c) extra="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c -mamx-tile -mamx-int8 -mamx-bf16" ;;
      *_avx512.c) extra="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c" ;;
      *) extra="" ;;
    esac
    o="$B/obj/$(echo "${f%.c}" | tr / _).o"
    objs+=("$o")
    rm -f "$o.failed"
    { cc $cflags $extra -c "$f" -o "$o" >"$o.log" 2>&1 || touch "$o.failed"; } &
    pids+=($!)
    # keep at most ~2 jobs per core in flight
    if [ "${#pids[@]}" -ge $((jobs * 2)) ]; then wait "${pids[0]}" || true; pids=("${pids[@]:1}"); fi
  done
  local fail=0 p
  for p in "${pids[@]}"; do wait "$p" || true; done
  for l in "$B"/obj/*.failed; do [ -e "$l" ] && { echo "--- ${l%.failed}.log"; cat "${l%.failed}.log"; fail=1; }; done
  [ "$fail" = 0 ] || { echo "build failed"; exit 1; }
  local cudalib; cudalib="$(dirname "$NVCC")/../lib64"
  # cudart static (as nvcc links it): the binary then needs only libcublas from the CUDA toolkit
  g++ -o "$B/wick" "${objs[@]}" $lib -L"$cudalib" -lcublas -lcudart_static -lmicrohttpd -ljansson -lpcre2-8 -lcrypto -lz -lzstd \
    -lxxhash -lpthread -lm -ldl -lrt
  echo "built $B/wick"
}

golden() {
  local dir=${1:-.golden}
  debroot_env
  [ -x "$B/wick" ] || { echo "no $B/wick: run bench/gpu_wick.sh build first"; exit 1; }
  [ -f "$dir/cases.txt" ] || { echo "no $dir/cases.txt"; exit 1; }
  echo "== golden models through wick run --device cuda ($dir)"
  mkdir -p "$B/golden"
  local n_ok=0 n_fail=0 model nt nv tol lg gen toks greedy name gcu gcp
  printf "%-28s %6s %10s %8s %s\n" "model" "tol" "max|diff|" "greedy" "result"
  while read -r model nt nv tol lg gen toks greedy; do
    [ -f "$dir/$model" ] || continue
    name=$(basename "$model" .gguf)
    if ! "$B/wick" run -m "$dir/$model" --device cuda --tokens "$toks" --dump-logits "$B/golden/$name.cuda.bin" -n 0 \
         >"$B/golden/$name.log" 2>&1 </dev/null; then
      printf "%-28s %6s %10s %8s %s\n" "$name" "$tol" "-" "-" "FAIL: $(grep -m1 'wick run' "$B/golden/$name.log")"
      n_fail=$((n_fail + 1)); continue
    fi
    # greedy continuation: cuda vs cpu (16 tokens, ids printed when the model has no tokenizer, else text)
    gcu=$("$B/wick" run -m "$dir/$model" --device cuda --tokens "$toks" -n 16 --temp 0 --ignore-eos 2>/dev/null </dev/null |
          md5sum || true)
    gcp=$("$B/wick" run -m "$dir/$model" --device cpu --tokens "$toks" -n 16 --temp 0 --ignore-eos 2>/dev/null </dev/null |
          md5sum || true)
    local res
    res=$(python3 - "$B/golden/$name.cuda.bin" "$dir/$lg" "$nt" "$nv" "$tol" <<'PY'
import sys
from array import array
def load(p):
    a = array("f")
    with open(p, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a
a, b = load(sys.argv[1]), load(sys.argv[2])
nt, nv = int(sys.argv[3]), int(sys.argv[4])
if len(a) != nt * nv or len(b) != nt * nv:
    print("nan size %d vs %d" % (len(a), len(b))); sys.exit()
d = max(abs(x - y) for x, y in zip(a, b))
top = lambda v, r: max(range(nv), key=lambda i: v[r * nv + i])
agree = sum(top(a, r) == top(b, r) for r in range(nt))
print("%.5f %d/%d" % (d, agree, nt))
PY
)
    local d=${res%% *} top1=${res#* }
    local same=no; [ "$gcu" = "$gcp" ] && same=yes
    if python3 -c "import sys; sys.exit(0 if float('$d') <= float('$tol') else 1)" 2>/dev/null; then
      n_ok=$((n_ok + 1)); printf "%-28s %6s %10s %8s ok (top-1 agrees %s)\n" "$name" "$tol" "$d" "$same" "$top1"
    else
      n_fail=$((n_fail + 1)); printf "%-28s %6s %10s %8s FAIL (top-1 agrees %s)\n" "$name" "$tol" "$d" "$same" "$top1"
    fi
  done <"$dir/cases.txt"
  echo "golden via wick run --device cuda: $n_ok passed, $n_fail failed (greedy = same 16-token greedy output as --device cpu)"
  [ "$n_fail" = 0 ]
}

bench() {
  local preset=$1 type=$2; shift 2
  debroot_env
  local f="$B/synth-$preset-$type.gguf"
  [ -f "$f" ] || "$B/wick" synth --preset "$preset" --type "$type" -o "$f" -q
  echo "== wick bench --device cuda: $preset $type"
  "$B/wick" bench -m "$f" --device cuda "$@"
}

case "$mode" in
  build) build ;;
  golden) shift; golden "$@" ;;
  bench) shift; bench "$@" ;;
  *) echo "usage: bench/gpu_wick.sh build|golden [DIR]|bench PRESET TYPE [args]"; exit 2 ;;
esac
