#!/usr/bin/env bash
# The micro configuration end to end on a CPU (Debian's python3-torch, numpy,
# regex): data -> tokenizer -> train -> export -> the cross-check case that
# tests/models/micro/ holds (a few minutes on 2 cores; not part of CI, which
# only replays its output: tests/cli/convert_micro.sh).
#   apt-get install -y python3-torch python3-numpy python3-regex libopenblas0-pthread
#   tools/train/micro.sh OUT_DIR [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
steps=${2:-200}
py=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 PYTHONPATH="$here"
stdlib=$($py -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
$py "$here/corpus.py" --root "stdlib=$stdlib" --out "$out/data" --max-mb 4 --seed 1
$py "$here/tokenizer.py" --data "$out/data" --vocab 640 --max-mb 4 --max-len 2048 --out "$out/tok"
$py "$here/train.py" --preset micro --data "$out/data" --tok "$out/tok" --out "$out/run" --prep "$out/prep.pkl" \
    --steps "$steps" --seed 1 --workers 1 --threads 2
$py "$here/export.py" --ckpt "$out/run/ckpt.pt" --tok "$out/tok" --out "$out/hf" --dtype bf16
$py "$here/evaluate.py" --model "$out/hf" --data "$out/data" --dump-tokens "$out/tokens.u32" \
    --dump-logits "$out/logits.f32" --n 64
$py "$here/evaluate.py" --model "$out/hf" --data "$out/data" --window 512 --json "$out/quality.json"
