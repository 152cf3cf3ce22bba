#!/usr/bin/env bash
# The decode kernels on the H200 (run there from the project root, carrying .h200 from tests/cuda/h200/pack.sh and
# .debs): every CUDA op against the CPU op, the fixtures on CUDA in F32 against the float64 logits, steady-state
# graphs, then the per-kernel profile of decode steps on one-layer real-dimension models (docs/performance.md),
# then the MTP-depth sweep of the bundled model on CUDA (docs/mtp.md; its 3-repetition figures, see there).
# Prints a short summary; the logs, the profiles and the report go to $OUT.
set -u
. tests/cuda/h200/setup.sh
for k in kda-dense kda-moe mla-moe; do
  (timeout 200 python3 scripts/make_bench_model.py --gpu --out /tmp/bm_$k --layers $k > /tmp/make_$k.log 2>&1 || tail -3 /tmp/make_$k.log) &
done
TEST=/tmp/hb/test_cuda_ops RUN_TIMEOUT=200 GROUP_TIMEOUT=40 tests/cuda/run.sh > $o/cuda_ops.log 2>&1; el "cuda ops rc=$?"
grep -E "FAIL|cuda ops:" $o/cuda_ops.log | tail -n 12
busted_bin=$(command -v busted)
GLM53_DEVICE=cuda GLM53_ACTIVATIONS=f32 timeout 240 luajit "$busted_bin" --lua=luajit -o TAP tests/lua/fixtures_spec.lua \
  tests/lua/model_cache_spec.lua > $o/cuda_model_f32.log 2>&1; el "fixtures f32 rc=$?"
grep -E "rel err|^not ok" $o/cuda_model_f32.log | head -14; grep -cE "^ok" $o/cuda_model_f32.log
wait; el "models made"
timeout 90 /tmp/hb/test_cuda_graph /tmp/bm_mla-moe tests/fixtures/tiny-fp8 tests/fixtures/tiny-mtp > $o/graph.log 2>&1; el "graph rc=$?"; tail -5 $o/graph.log
p=$o/profiles.txt; : > $p
for k in kda-dense kda-moe mla-moe; do timeout 100 /tmp/hb/profile_step /tmp/bm_$k --context 2048 --steps 30 >> $p 2>&1 || echo "profile $k failed"; done
timeout 100 /tmp/hb/profile_step /tmp/bm_mla-moe --context 8192 --steps 30 >> $p 2>&1 || echo "profile c8192 failed"
for b in 8 32 64; do timeout 100 /tmp/hb/profile_step /tmp/bm_mla-moe --context 2048 --batch $b --steps 20 >> $p 2>&1 || echo "profile b$b failed"; done
el "profiles done"; grep -E '^/tmp|decode step' $p
timeout 360 bin/glm53 mtp-depth --device cuda --model models/glm53-tiny --task evals/data/tiny/arith.jsonl \
  --task evals/data/tiny/mc.jsonl --task evals/data/tiny/tools.jsonl --per-family 8 --k 0,1,2,3,4,6,8 \
  --modes greedy,sample --draft fixed,threshold:0.3,adaptive,adaptive:cost=0.9,min_depth=0,budget:budget=16 \
  --reps 3 --max-new 64 --out $o/mtp_cuda > $o/mtp.log 2>&1; el "mtp rc=$?"
tail -30 $o/mtp.log | cut -c1-160
