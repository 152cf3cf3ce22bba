#!/usr/bin/env bash
# The MTP-depth study of the bundled model on the H200 (docs/mtp.md), 5 repetitions, fixed K against the adaptive
# policy (at K = 1 it always drafts 1, so that pair is an A/A test of the timing noise), every family. Carry .h200
# (tests/cuda/h200/pack.sh) and .debs; the report goes to $OUT/mtp_cuda5.
set -u
. tests/cuda/h200/setup.sh
timeout 300 bin/glm53 mtp-depth --device cuda --model models/glm53-tiny --task evals/data/tiny/arith.jsonl \
  --task evals/data/tiny/mc.jsonl --task evals/data/tiny/tools.jsonl --per-family 8 --k 0,1,2,4,8 \
  --modes greedy,sample --draft fixed,adaptive,adaptive:cost=0.5 --reps 5 --max-new 64 --out $o/mtp_cuda5 > $o/mtp5.log 2>&1
el "mtp rc=$?"
tail -8 $o/mtp5.log | cut -c1-160
