#!/usr/bin/env bash
# The whole training run on one GPU machine, inside one 10-minute command:
# data (the machine's Python stdlib + site-packages) -> tokenized data and
# chat pools -> target and draft trained side by side -> export (bf16
# safetensors) -> quality numbers and the Hugging Face reference check ->
# what comes back, under $OUT (at most 8 files of 16 MiB).
#   TOK=folder-with-tokenizer.json OUT=... tools/train/device_run.sh
# Knobs for a CPU smoke run: TARGET=micro DRAFT=micro MAX_MB=2 END_S=... WORKERS=1
# DRAFT=none trains the target alone (the whole GPU for it); DRAFT_HF=folder then names an
# exported draft of an earlier run, for the agreement numbers.
set -uo pipefail
cd "$(dirname "$0")"
T0=$(date +%s)
TARGET=${TARGET:-target} DRAFT=${DRAFT:-draft} MAX_MB=${MAX_MB:-300} END_S=${END_S:-540}
WORKERS=${WORKERS:-14} W=${W:-/tmp/wick-train} DRAFT_HF=${DRAFT_HF:-}
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$W" "$OUT"
LOG=$OUT/run.log
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
say "python $(python3 -c 'import sys; print(sys.version.split()[0])'), torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())')"
python3 - <<'PY' 2>&1 | tee -a "$LOG"
import importlib
for m in ("transformers", "tokenizers", "safetensors"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "missing:", e)
for m in ("transformers.models.qwen3_5", "transformers.models.qwen3_next"):
    try:
        importlib.import_module(m)
        print(m, "present")
    except Exception as e:
        print(m, "absent:", type(e).__name__, e)
PY
nvidia-smi -L 2>/dev/null | tee -a "$LOG"
read -r STDLIB PURELIB < <(python3 -c 'import sysconfig as s; p = s.get_paths(); print(p["stdlib"], p["purelib"])')
say "corpus from $STDLIB and $PURELIB"
python3 corpus.py --root "stdlib=$STDLIB" --root "site=$PURELIB" --out "$W/data" --max-mb "$MAX_MB" --seed 1 2>&1 | tee -a "$LOG"
python3 train.py --preset "$TARGET" --data "$W/data" --tok "$TOK" --out "$W/prep" --prep "$W/prep.pkl" --prep-only \
    --workers "$WORKERS" 2>&1 | tee -a "$LOG"
BUDGET=$(( END_S - 55 - ($(date +%s) - T0) ))
STOP=$(( T0 + END_S - 40 ))
say "training $TARGET and $DRAFT for $BUDGET s (hard stop at +$(( STOP - T0 )) s)"
python3 train.py --preset "$TARGET" --data "$W/data" --tok "$TOK" --out "$W/target" --prep "$W/prep.pkl" \
    --time-budget "$BUDGET" --stop-at "$STOP" --seed 1 > "$W/target.out" 2>&1 &
PT=$!
RD=skipped
if [ "$DRAFT" != none ]; then
  python3 train.py --preset "$DRAFT" --data "$W/data" --tok "$TOK" --out "$W/draft" --prep "$W/prep.pkl" \
      --time-budget "$BUDGET" --stop-at "$STOP" --seed 2 > "$W/draft.out" 2>&1 &
  PD=$!
fi
wait $PT; RT=$?
[ "$DRAFT" != none ] && { wait $PD; RD=$?; }
say "target exit $RT, draft exit $RD"
tail -n 3 "$W/target.out" "$W"/draft.out 2>/dev/null | tee -a "$LOG"
for m in target draft; do
  [ -f "$W/$m/ckpt.pt" ] && python3 export.py --ckpt "$W/$m/ckpt.pt" --tok "$TOK" --out "$W/hf-$m" --dtype bf16 \
      --shard-mb 15 2>&1 | tee -a "$LOG"
done
if [ -d "$W/hf-target" ]; then
  ARGS=(--model "$W/hf-target" --data "$W/data" --window 4096 --max-files 300 --hf-check --json "$W/quality.json")
  [ -d "$W/hf-draft" ] && ARGS+=(--draft "$W/hf-draft")
  [ ! -d "$W/hf-draft" ] && [ -n "$DRAFT_HF" ] && ARGS+=(--draft "$DRAFT_HF")
  python3 evaluate.py "${ARGS[@]}" 2>&1 | tee -a "$LOG"
fi
# what comes back: the weights as they are, everything small in one archive
mkdir -p "$W/meta"
for m in target draft; do
  [ -d "$W/hf-$m" ] || continue
  for f in "$W/hf-$m"/*.safetensors; do cp "$f" "$OUT/$m-$(basename "$f")"; done
  mkdir -p "$W/meta/$m"; cp "$W/hf-$m"/*.json "$W/meta/$m/"
  cp "$W/$m/train.log" "$W/meta/$m/"
done
cp "$W/target.out" "$W/draft.out" "$W/data/manifest.json" "$W/meta/" 2>/dev/null
[ -f "$W/quality.json" ] && cp "$W/quality.json" "$W/meta/"
say "done"
cp "$LOG" "$W/meta/"
tar -C "$W" -czf "$OUT/meta.tar.gz" meta
ls -la "$OUT"
