#!/usr/bin/env bash
# Build the CUDA binaries HERE (a build machine with nvcc and wick's -dev packages, no GPU)
# and run them THERE (a GPU machine without them), so that device time goes to runs, not
# compiles. Run from the repository root.
#   bench/gpu_carry.sh build    incremental build (JOBS parallel compiles, default 2) into
#                               $B/bin: wick, e2e_cuda, golden_cuda, test_cuda, bench_cuda
#                               (cudart static; they need libcublas and the Debian runtime
#                               libraries of libjansson, libmicrohttpd, libpcre2, libssl,
#                               libxxhash on the GPU machine)
#   bench/gpu_carry.sh pack [BIN...]
#                               after build: strips the named binaries (default: all five)
#                               into one gzip'd tar, $B/bins.tgz (12 MB for four, against ~50 MB
#                               unstripped: a carry holds 64 MiB with the tracked files, ~37 MB)
#   bench/gpu_carry.sh env      (there, sourced: `. bench/gpu_carry.sh env`) unpacks $B/bins.tgz
#                               into $B/bin if it is there, the .debs of $DEBS into $B/root, and
#                               puts them and cuBLAS on LD_LIBRARY_PATH
# Carry $B/bins.tgz (or $B/bin), $DEBS (default build-cudaint-carry/debs: the runtime packages
# named in bench/gpu_wick.sh's header are enough) and the golden folder. Environment: NVCC, B
# (default build-cuda-carry), JOBS, DEBS.
B=${B:-build-cuda-carry}
DEBS=${DEBS:-build-cudaint-carry/debs}

carry_env() {
  mkdir -p "$B/root" "$B/bin"
  if [ -f "$B/bins.tgz" ]; then # binaries already there and newer (a build here) stay
    tar -C "$B/bin" --keep-newer-files -xzf "$B/bins.tgz" 2>/dev/null || echo "gpu_carry: cannot unpack $B/bins.tgz" >&2
  fi
  for d in "$DEBS"/*.deb; do dpkg -x "$d" "$B/root"; done
  if ! ldconfig -p | grep -q 'libgnutls.so.30 '; then
    for d in "$DEBS"/gnutls/*.deb; do dpkg -x "$d" "$B/root"; done
  fi
  local cub
  cub=$(ls /usr/local/cuda/lib64/libcublas.so.1[0-9] 2>/dev/null | head -1)
  [ -n "$cub" ] || cub=$(find /usr /opt -name 'libcublas.so.1[0-9]' 2>/dev/null | head -1)
  local root="$B/root"
  case "$root" in /*) ;; *) root="$PWD/$root" ;; esac
  export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${cub:+:$(dirname "$cub")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

if [ "${1:-}" = env ]; then
  carry_env
  return 0 2>/dev/null || exit 0
fi

set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = pack ]; then
  shift
  bins=${*:-wick e2e_cuda golden_cuda test_cuda bench_cuda}
  st=$(mktemp -d)
  for b in $bins; do strip -o "$st/$b" "$B/bin/$b"; done
  tar -C "$st" -czf "$B/bins.tgz" .
  rm -rf "$st"
  ls -la "$B/bins.tgz"
  exit 0
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${JOBS:-2}
ARCH="-gencode arch=compute_90a,code=sm_90a"
CUFLAGS="-std=c++17 -O3 $ARCH -Isrc --expt-relaxed-constexpr -D_GNU_SOURCE -lineinfo"
CFLAGS="-std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE -fno-math-errno -DWICK_HAVE_CUDA=1 -Isrc -Itests/cuda -I$(dirname "$NVCC")/../include"
mkdir -p "$B/obj" "$B/bin" "$B/generated"
cmake -DOUT="$B/generated/web_assets.c" -DDIR=web/monitor -P cmake/embed_assets.cmake

# one line per compile whose object is missing or older than its source or a header
newest_h=$(find src tests/cuda -name '*.h' -o -name '*.cuh' | xargs ls -t | head -1)
list=$(mktemp)
for f in src/backend/cuda/*.cu $(find src tests/cuda -name '*.c' | sort) "$B/generated/web_assets.c"; do
  o="$B/obj/$(echo "${f%.*}" | tr / _).o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ "$newest_h" -nt "$o" ]; then
    case "$f" in
      *_neon*.c) ;; # AArch64 kernels: not part of an x86-64 build
      *.cu) echo "$NVCC $CUFLAGS -c $f -o $o" ;;
      *_avx2.c) echo "cc $CFLAGS -mavx2 -mfma -mf16c -c $f -o $o" ;;
      *_amx_avx512.c) echo "cc $CFLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c -mamx-tile -mamx-int8 -mamx-bf16 -c $f -o $o" ;;
      *_avx512.c) echo "cc $CFLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c -c $f -o $o" ;;
      *) echo "cc $CFLAGS -c $f -o $o" ;;
    esac
  fi
done >"$list"
echo "== $(wc -l <"$list") compiles, $JOBS at a time"
xargs -P "$JOBS" -I{} sh -c '{} || { echo "FAILED: {}"; exit 255; }' <"$list"
rm -f "$list"

O=$B/obj
cudalib="$(dirname "$NVCC")/../lib64"
core="$(ls $O/src_*.o | grep -v '/src_cli_') $(ls $O/*web_assets.o)"
cli=$(ls $O/src_cli_*.o)
libs="-L$cudalib -lcublas -lcudart_static -lmicrohttpd -ljansson -lpcre2-8 -lcrypto -lxxhash -lz -lzstd -lpthread -lm -ldl -lrt"
g++ -o "$B/bin/wick" $core $cli $libs
g++ -o "$B/bin/e2e_cuda" $core $O/tests_cuda_e2e_cuda.o $O/tests_cuda_ref.o $libs
g++ -o "$B/bin/golden_cuda" $core $O/tests_cuda_golden_*.o $O/tests_cuda_compare_ops.o $O/tests_cuda_ref.o $libs
g++ -o "$B/bin/test_cuda" $core $O/tests_cuda_test_cuda_*.o $O/tests_cuda_ref.o $libs
g++ -o "$B/bin/bench_cuda" $core $O/tests_cuda_bench_cuda.o $O/tests_cuda_bench_cuda_attn.o $O/tests_cuda_bench_cuda_moe.o $O/tests_cuda_ref.o $libs
ls -la "$B/bin"
