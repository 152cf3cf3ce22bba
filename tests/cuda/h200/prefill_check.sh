#!/usr/bin/env bash
# One lean device call for the prefill work (issue 17): the checks a tree must pass before its figures count, then
# the figures, then where the wgmma experts tile spends its time. Everything goes into $OUT/all.tgz (a call brings
# back about eight files) and a summary is printed last (a call shows the last 12,000 characters):
#   1. test_cuda_ops (every group), test_cuda_graph, greedy ids of glm53-tiny and its FP8 copy with the prefill
#      switches off and on (must be equal), the fixtures and cache specs on CUDA with F32 activations;
#   2. the flash slice (scripts/make_bench_model.py --gpu --layers flash --mtp, kept in /tmp/flash on a warm
#      machine): decode at contexts 2048 and 8192, prefill of 8192 tokens one shot and in chunks of 2048 and 512 (switches
#      on), one shot with them off, 2048 one shot and in chunks of 512, and 32768 one shot (PREFILL_32K=0 skips
#      it), each with its per-kernel table; then AB="name:VAR=v,VAR=v ..." runs the 8192 one shot once more per
#      entry with those variables set (an A/B of a switch in the same call);
#   3. bench_grouped (kernels/cuda/bench/grouped.cu): the wgmma tile whole and with one stage left out at a time;
#   4. NCU="regex ...": Nsight Compute on the first launch of each matching kernel in a 2048-token prefill.
# Run there from the project root, carrying .h200 (PACK=.h200/main.txz tests/cuda/h200/pack.sh) and .debs (see
# decode_ab.sh for the busted packages). About 200 s on an H100 with the flash slice to make.
set -u
export PACK=${PACK:-.h200/main.txz}
RESULTS=${OUT:-/tmp}; export OUT=/tmp/prefill_check; mkdir -p $OUT   # setup.sh sources .debs/env.sh, which sets R
. tests/cuda/h200/setup.sh
off="GLM53_CUDA_GROUPED_WGMMA=0 GLM53_CUDA_KDA_CHUNKED=0"
sum=$o/summary.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $sum
TEST=/tmp/hb/test_cuda_ops RUN_TIMEOUT=150 GROUP_TIMEOUT=40 tests/cuda/run.sh --no-bench > $o/ops.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] test_cuda_ops rc=$?: $(grep -E 'cuda ops:' $o/ops.log | tail -1)" >> $sum
grep -E "FAIL" $o/ops.log | head -8 >> $sum
timeout 90 /tmp/hb/test_cuda_graph tests/fixtures/tiny-fp8 tests/fixtures/tiny-mtp tests/fixtures/tiny-bf16-kpool8 > $o/graph.log 2>&1
echo "graph rc=$?: $(tail -1 $o/graph.log)" >> $sum
rm -rf /tmp/glm53-tiny-fp8; python3 training/make_fp8.py --src models/glm53-tiny --out /tmp/glm53-tiny-fp8 > /dev/null 2>&1
ids() { env $1 bin/glm53 generate --device cuda --model $2 --temperature 0 --max-tokens 48 --json "$3" |
        luajit -e 'io.write(io.read("a"):match([=["ids": %[([^%]]*)%]]=]) or "?")'; }
for m in models/glm53-tiny /tmp/glm53-tiny-fp8; do
  for p in "What is 17 + 25?" "The code of QZX-17 is 4821. The code of ABC-3 is 1234. What is the code of QZX-17?"; do
    a=$(ids "$off" $m "$p"); b=$(ids "" $m "$p")
    if [ "$a" = "$b" ] && [ "$a" != "?" ]; then r=equal; else r=DIFFER; fi
    echo "$(basename $m) greedy ids, prefill switches off / on: $r" >> $sum
  done
done
if busted_bin=$(command -v busted); then
  GLM53_DEVICE=cuda timeout 90 luajit $busted_bin --lua=luajit -o TAP tests/lua/fixtures_spec.lua \
    tests/lua/model_cache_spec.lua > $o/fix_f32.log 2>&1
  echo "[$(( $(date +%s) - t0 )) s] F32 fixtures+cache rc=$?: ok $(grep -cE '^ok' $o/fix_f32.log) not ok $(grep -cE '^not ok' $o/fix_f32.log)" >> $sum
else
  echo "F32 fixtures+cache NOT RUN: no busted in .debs (make .debs with the busted packages: decode_ab.sh's header)" >> $sum
fi
[ -d /tmp/flash ] || timeout 300 python3 scripts/make_bench_model.py --gpu --layers flash --mtp --out /tmp/flash > $o/make_flash.log 2>&1
timeout 60 /tmp/hb/profile_step /tmp/flash --context 2048 --batch 1 --steps 20 > $o/decode_2048.txt 2>&1
echo "decode 2048: $(grep 'decode step' $o/decode_2048.txt)" >> $sum
timeout 60 /tmp/hb/profile_step /tmp/flash --context 8192 --batch 1 --steps 20 > $o/decode_8192.txt 2>&1
echo "decode 8192: $(grep 'decode step' $o/decode_8192.txt)" >> $sum
timeout 150 /tmp/hb/profile_step /tmp/flash --prefill 8192 --chunks 8192,2048,512 --steps 2 > $o/prefill_8192_on.txt 2>&1
env $off timeout 90 /tmp/hb/profile_step /tmp/flash --prefill 8192 --steps 2 > $o/prefill_8192_off.txt 2>&1
timeout 90 /tmp/hb/profile_step /tmp/flash --prefill 2048 --chunks 2048,512 --steps 3 > $o/prefill_2048_on.txt 2>&1
for v in ${AB:-}; do
  env $(echo ${v#*:} | tr , ' ') timeout 90 /tmp/hb/profile_step /tmp/flash --prefill 8192 --steps 2 \
    > $o/prefill_8192_ab_${v%%:*}.txt 2>&1
done
[ "${PREFILL_32K:-1}" = 1 ] && timeout 150 /tmp/hb/profile_step /tmp/flash --prefill 32768 --steps 1 > $o/prefill_32768.txt 2>&1
timeout 120 /tmp/hb/bench_grouped > $o/bench_grouped.txt 2>&1; echo "bench_grouped rc=$?" >> $sum
# NCU="regex ..." profiles the first launch of each kernel whose name matches, in a prefill of NCU_TOKENS (default
# 2048) tokens (Nsight Compute, full set, clocks as they run); the report goes into all.tgz, its headline metrics
# into the summary
for k in ${NCU:-}; do
  timeout 120 ncu --clock-control none --set full -k regex:$k -c 1 \
    /tmp/hb/profile_step /tmp/flash --prefill ${NCU_TOKENS:-2048} --steps 1 > $o/ncu_$k.txt 2>&1
  echo "ncu $k:" >> $sum
  headline="^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread"
  headline="$headline|Achieved Occupancy|Issue Slots Busy|No Eligible|Dynamic Shared Memory Per Block"
  grep -E "$headline" $o/ncu_$k.txt | head -12 >> $sum
done
echo "[$(( $(date +%s) - t0 )) s] done" >> $sum
tar czf $RESULTS/all.tgz -C $o . && echo "outputs: $RESULTS/all.tgz, $(du -k $RESULTS/all.tgz | cut -f1) KB" >> $sum
cat $sum
for f in $o/prefill_*.txt; do echo "$(basename $f .txt): $(grep -h '^prefill' $f | tr '\n' ';')"; done
for f in $o/prefill_8192_on.txt $o/prefill_32768.txt $o/prefill_8192_ab_*.txt; do
  [ -f $f ] && { echo "== $(basename $f)"; sed -n '/^per kernel/,/^total/p' $f | head -${TABLE_ROWS:-14}; }
done
cat $o/bench_grouped.txt
