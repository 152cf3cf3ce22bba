#!/usr/bin/env bash
# The rest of the decode issue's figures for one build and one set of switches, after decode_ab.sh on the same
# warm machine (it reuses /tmp/hb and the flash slice in /tmp/flash; makes the slice if it is missing):
#   1. the fixtures on CUDA against the float64 logits with F32 and with BF16 activations, and the cache specs
#      (issue 16 item 6; busted from .debs, see decode_ab.sh);
#   2. profile_step decode steps of the flash slice: batch 1 at context 8192, and the BATCHES at context 2048
#      (default 8,32,64; issue 16 items 2 and 3).
# SWITCHES="VAR=value,..." applies to every run (default: the build's defaults); FIXTURES=0 skips step 1, LONG=0 the
# context 8192. Output in $OUT.
set -u
. tests/cuda/h200/setup.sh
sw=$(echo "${SWITCHES:-}" | tr , ' ')
busted_bin=$(command -v busted)
[ "${FIXTURES:-1}" = 1 ] && for act in f32 bf16; do
  if [ -z "$busted_bin" ]; then echo "fixtures $act not run: no busted in .debs"; continue; fi
  env $sw GLM53_DEVICE=cuda GLM53_ACTIVATIONS=$act timeout 150 luajit "$busted_bin" --lua=luajit -o TAP \
    tests/lua/fixtures_spec.lua tests/lua/model_cache_spec.lua > $o/model_$act.log 2>&1
  el "fixtures and caches on CUDA, $act: rc=$?, passed $(grep -cE '^ok' $o/model_$act.log), failed $(grep -cE '^not ok' $o/model_$act.log)"
  grep -E "^not ok" $o/model_$act.log | head -5
done
[ -d /tmp/flash ] || timeout 420 python3 scripts/make_bench_model.py --gpu --layers flash --mtp --out /tmp/flash > $o/make_flash.log 2>&1
run() {   # run BATCH CONTEXT
  env $sw timeout 150 /tmp/hb/profile_step /tmp/flash --context $2 --batch $1 --steps ${STEPS:-20} > $o/more_b$1_$2.txt 2>&1
  el "batch $1, context $2: $(grep 'decode step' $o/more_b$1_$2.txt || tail -1 $o/more_b$1_$2.txt)"
}
[ "${LONG:-1}" = 1 ] && run 1 8192
for b in $(echo "${BATCHES:-8,32,64}" | tr , ' '); do run $b 2048; done
el "done"
