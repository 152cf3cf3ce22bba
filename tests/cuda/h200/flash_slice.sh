#!/usr/bin/env bash
# The flash slice on the H200 (the decode and prefill issues' workload: the real schedule's first 8 layers plus
# the MTP layer, real dimensions, random weights): made on the GPU (scripts/make_bench_model.py --gpu --layers
# flash --mtp, about 45 GB into /tmp), then the decode profile at batch 1 at contexts 2048 and 8192 (eager step,
# graph replay, per-kernel table: tests/cuda/profile_step.c) and glm53 bench's floor table with the batched rows
# (the union of experts the rows read). Run there from the project root, carrying .h200 (tests/cuda/h200/pack.sh)
# and .debs; BATCH (default 1,8) and PROMPT (default 2048) set the bench rows; SPEC=1,2,3,4 adds MTP rounds at
# forced acceptance (glm53 bench --spec-k). Output and logs go to $OUT.
set -u
. tests/cuda/h200/setup.sh
df -h /tmp | tail -1
rm -rf /tmp/bm_* /tmp/bm
timeout 420 python3 scripts/make_bench_model.py --gpu --layers flash --mtp --out /tmp/flash > $o/make_flash.log 2>&1
el "flash slice made: rc=$?"; tail -1 $o/make_flash.log
p=$o/flash_profiles.txt; : > $p
for c in 2048 8192; do
  timeout 240 /tmp/hb/profile_step /tmp/flash --context $c --steps 20 >> $p 2>&1 || echo "profile at context $c failed"
done
el "profiles"; grep -E '^/tmp|decode step' $p
timeout 300 luajit scripts/bench.lua --model /tmp/flash --device cuda --prompt ${PROMPT:-2048} --decode 16 --repeat 1 \
  --batch ${BATCH:-1,8} > $o/flash_bench.txt 2>&1; el "bench: rc=$?"; cat $o/flash_bench.txt
if [ -n "${SPEC:-}" ]; then   # MTP at forced acceptance (the decode issue's item 4): SPEC=1,2,3,4
  timeout 300 luajit scripts/bench.lua --model /tmp/flash --device cuda --prompt ${PROMPT:-2048} --decode 32 --repeat 1 \
    --spec-k 0,$SPEC --accept all,none > $o/flash_spec.txt 2>&1; el "spec bench: rc=$?"; tail -12 $o/flash_spec.txt
fi
