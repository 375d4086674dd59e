#!/usr/bin/env bash
# Optimised build of the wick binary into build/ (usage: scripts/build.sh [cmake args...]).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(getconf _NPROCESSORS_ONLN)" --target wick
