#!/usr/bin/env bash
# training/h200.sh MODE [MINUTES] - the H200 commands of the tiny model, one device call each (docs/tiny-model.md).
#
#   smoke            train.py --smoke (tiny config, 30 steps, export, reload), make_fp8, check_hf --eval-n 8
#   all [MINUTES]    train.py --minutes MINUTES (default 7), make_fp8, check_hf --eval-n 50   (fits one 10-min call)
#   train [MINUTES]  train.py --minutes MINUTES (default 8.5) only
#   check            make_fp8 + check_hf --eval-n 50 on models/glm53-tiny (already in the work tree)
#   continue [MIN]   more training from models/glm53-tiny (in the work tree; new optimiser, lr 1e-3), default 8.5
#   finish [MIN]     continue [MIN], pack the model at once, then check it (stopped 20 s before a 600 s call ends)
#   ab [MINUTES]     two training runs side by side on the one GPU (default 6 minutes each, 7 data workers each):
#                    train.py with ARGS_A and with ARGS_B (environment), into training/runs/ab_a and ab_b; their logs,
#                    curves and exported models come back (an experiment, e.g. a curriculum against a control)
#
# TRAIN_ARGS (environment) adds train.py options to continue and finish, e.g. TRAIN_ARGS="--family-scale retrieval=2".
# Results come back through $OUT as bundle.tgz.part-* (at most 15 MiB each; the device returns at most 8 files of
# 16 MiB) and status.txt (finish: model.tgz.part-* then check.tgz.part-*, so a check cut short by the call's
# limit loses no model). Unpack at the repository root:  cat DIR/bundle.tgz.part-* | tar xzf -
# The bundle holds models/glm53-tiny/ (train, all), training/runs/<run>/{train.log,summary.json,history.json,
# loss.svg} and training/runs/check/ (check_hf's logits, index.json, eval.json). The FP8 copy is not in it:
# training/make_fp8.py rebuilds it anywhere with numpy (check_hf's index.json has the sha256 to compare).
set -uo pipefail
mode=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
out=${OUT:-$root/out}
mkdir -p "$out"
stage=$(mktemp -d)
status=0
note() { echo "h200.sh: $*" | tee -a "$out/status.txt"; }

note "mode ${mode:-?} at $(date -u +%H:%M:%S); $(nvidia-smi -L 2>/dev/null | head -1); $(python3 --version 2>&1)"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)' 2>&1 | tee -a "$out/status.txt"

run() {  # run NAME CMD...: runs a step, records its exit status
  local name=$1; shift
  local t0=$(date +%s)
  note "start $name: $*"
  "$@"
  local rc=$?
  note "end $name: exit $rc after $(( $(date +%s) - t0 )) s"
  [ $rc -eq 0 ] || status=1
  return $rc
}

copy_run() {  # copy_run RUN_DIR: the small files of a run into the bundle
  local d=$1 rel
  rel=${d#"$root"/}
  mkdir -p "$stage/$rel"
  for f in train.log summary.json history.json loss.svg profile.txt; do [ -f "$d/$f" ] && cp "$d/$f" "$stage/$rel/"; done
  [ -f "$d/summary.json" ] && tail -c 2000 "$d/summary.json" >> "$out/status.txt"
}

train_full() {  # train_full MINUTES
  run train python3 training/train.py --run training/runs/full --minutes "$1" --export-dir models/glm53-tiny
  copy_run "$root/training/runs/full"
  if [ -f models/glm53-tiny/model.safetensors ]; then
    mkdir -p "$stage/models" && cp -r models/glm53-tiny "$stage/models/"
  fi
}

check() {  # check MODEL_DIR EVAL_N [SECONDS]: SECONDS bounds check_hf (what it wrote by then still comes back)
  [ -f "$1/model.safetensors" ] || { note "no $1/model.safetensors: nothing to check"; status=1; return 1; }
  run make_fp8 python3 training/make_fp8.py --src "$1" --out training/runs/fp8-copy
  run check_hf timeout "${3:-100000}" python3 training/check_hf.py --model "$1" --fp8 training/runs/fp8-copy \
      --out training/runs/check --eval-n "$2"
  mkdir -p "$stage/training/runs" && cp -r training/runs/check "$stage/training/runs/"
}

pack() {  # pack NAME: what is staged so far -> $out/NAME.tgz.part-*, and an empty stage
  (cd "$stage" && tar czf - .) | split -b 15m -d - "$out/$1.tgz.part-"
  note "packed $1: $(ls "$out" | grep "^$1" | tr '\n' ' ')($(du -sh "$stage" | cut -f1) before compression)"
  rm -rf "$stage" && stage=$(mktemp -d)
}

continue_training() {  # continue_training MINUTES
  [ -f models/glm53-tiny/model.safetensors ] || { note "no models/glm53-tiny to continue from"; exit 1; }
  # shellcheck disable=SC2086  # TRAIN_ARGS: extra train.py options, word-split on purpose
  run continue python3 training/train.py --init-from models/glm53-tiny --lr 1e-3 --run training/runs/continue \
      --minutes "$1" --export-dir training/runs/continue/export ${TRAIN_ARGS:-}
  copy_run "$root/training/runs/continue"
  if [ -f training/runs/continue/export/model.safetensors ]; then
    mkdir -p "$stage/models" && cp -r training/runs/continue/export "$stage/models/glm53-tiny"
  fi
}

case "$mode" in
  smoke)
    run smoke python3 training/train.py --smoke --run training/runs/smoke
    copy_run "$root/training/runs/smoke"
    check training/runs/smoke/export 8
    ;;
  all)
    train_full "${2:-7}"
    check models/glm53-tiny 50
    ;;
  train)
    train_full "${2:-8.5}"
    ;;
  check)
    check models/glm53-tiny 50
    ;;
  continue)
    continue_training "${2:-8.5}"
    ;;
  finish)
    t_start=$(date +%s)
    continue_training "${2:-5}"
    pack model
    [ -f training/runs/continue/export/model.safetensors ] || { note "no continued model to check"; exit 1; }
    rm -rf models/glm53-tiny && cp -r training/runs/continue/export models/glm53-tiny
    check models/glm53-tiny 50 $(( 580 - ($(date +%s) - t_start) - 30 ))
    pack check
    note "overall exit $status"
    exit $status
    ;;
  ab)
    for arm in a b; do
      [ $arm = a ] && args=${ARGS_A:-} || args=${ARGS_B:-}
      # shellcheck disable=SC2086  # ARGS_A, ARGS_B: train.py options, word-split on purpose
      run "arm $arm" python3 training/train.py --run training/runs/ab_$arm --export-dir training/runs/ab_$arm/export \
          --minutes "${2:-6}" --workers 7 $args > "$out/ab_$arm.log" 2>&1 &
    done
    wait
    for arm in a b; do
      copy_run "$root/training/runs/ab_$arm"
      [ -f training/runs/ab_$arm/export/model.safetensors ] && cp -r training/runs/ab_$arm/export "$stage/models_ab_$arm"
      grep -E "\] (plan: [0-9]|val:|summary|FAILED)" "$out/ab_$arm.log" | sed "s/^/arm $arm: /"
      grep -E "\] step " "$out/ab_$arm.log" | awk 'NR % 4 == 1' | cut -c1-170 | sed "s/^/arm $arm: /"
    done
    ;;
  *)
    echo "usage: training/h200.sh smoke | all [MINUTES] | train [MINUTES] | check | continue [MINUTES] | finish [MINUTES] | ab [MINUTES]" >&2
    exit 2
    ;;
esac

pack bundle
note "overall exit $status"
rm -rf "$stage"
exit $status
