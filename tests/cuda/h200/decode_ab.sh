#!/usr/bin/env bash
# The performance switches side by side on the H200 (issues 16 and 17), with the checks that must hold first. The
# switches (docs/cuda.md "Performance switches"; each read at backend creation, "1" on, "0" off):
# GLM53_CUDA_GEMV_STREAM (the streaming tensor-core GEMV, the multi-weight launches and the streaming decode
# experts), GLM53_CUDA_PDL (programmatic dependent launch), GLM53_CUDA_KDA_SEQUENCES (the fused KDA op),
# GLM53_CUDA_GROUPED_EXPERTS (prefill experts grouped on the device).
#   1. test_cuda_ops' groups of the changed kernels against the CPU ops; the fixtures on CUDA (BF16) against the
#      float64 logits; test_cuda_graph (eager step against its replayed graph) on the fixtures;
#   2. greedy token ids of the bundled model and its FP8 copy with every switch off and on: must be equal;
#   3. the flash slice (make_bench_model.py --layers flash --mtp): decode step at context 2048, batch 1 with the
#      switches added one at a time, batch 8 all off and all on, context 8192 all on (profile_step: eager, graph
#      replay and the per-kernel table into $OUT);
#   4. prefill of the flash slice (issue 17), switches all off and all on: 2048 tokens one-shot and in chunks of
#      512, 8192 one-shot and in chunks of 2048 and 512, and the per-kernel tables of the one-shot 8192 (PREFILL=0
#      skips it);
#   5. bench_gemv --quick: every GEMV version at the real projection shapes, M = 1, 4, 16 (version 5, the
#      streaming form, must give version 4's bits: "same-v4"; the M = 1 rows are printed).
# Run there from the project root, carrying .h200 (tests/cuda/h200/pack.sh) and .debs. GEMV=0 skips step 5;
# CHECK_ONLY=1 stops after step 2; QUICK=1 (for a short device budget) skips the fixtures, runs the batch-1 and
# batch-8 profiles all off and all on only, and prefill 8192 one-shot only when off; CORE=1 (shorter still, about
# 5 minutes) is QUICK without batch 8 and with prefill of 2048 tokens only (its per-kernel tables instead).
set -u
[ -n "${CORE:-}" ] && QUICK=1
. tests/cuda/h200/setup.sh
off="GLM53_CUDA_GEMV_STREAM=0 GLM53_CUDA_PDL=0 GLM53_CUDA_KDA_SEQUENCES=0 GLM53_CUDA_GROUPED_EXPERTS=0"
on="GLM53_CUDA_GEMV_STREAM=1 GLM53_CUDA_PDL=1 GLM53_CUDA_KDA_SEQUENCES=1 GLM53_CUDA_GROUPED_EXPERTS=1"
env $on TEST=/tmp/hb/test_cuda_ops RUN_TIMEOUT=${RUN_TIMEOUT:-150} GROUP_TIMEOUT=${GROUP_TIMEOUT:-40} tests/cuda/run.sh --only matmul,norm,elementwise,mhc,kda,moe,index --no-bench > $o/cuda_ops.log 2>&1
el "cuda ops rc=$?"; grep -E "FAIL|cuda ops:" $o/cuda_ops.log | tail -n 12
if [ -z "${QUICK:-}" ]; then
  busted_bin=$(command -v busted)
  env $on GLM53_DEVICE=cuda GLM53_ACTIVATIONS=bf16 timeout 150 luajit "$busted_bin" --lua=luajit -o TAP tests/lua/fixtures_spec.lua \
    tests/lua/model_cache_spec.lua > $o/model_bf16.log 2>&1; el "fixtures bf16 rc=$?"
  grep -E "^not ok" $o/model_bf16.log | head -5; grep -cE "^ok" $o/model_bf16.log | sed "s/^/model specs passed (bf16): /"
fi
env $on timeout 90 /tmp/hb/test_cuda_graph tests/fixtures/tiny-fp8 tests/fixtures/tiny-mtp tests/fixtures/tiny-bf16-kpool8 > $o/graph.log 2>&1
el "graph rc=$?"; tail -4 $o/graph.log
rm -rf /tmp/glm53-tiny-fp8
python3 training/make_fp8.py --src models/glm53-tiny --out /tmp/glm53-tiny-fp8 > /dev/null 2>&1 || echo "make_fp8 failed"
ids() { env $1 bin/glm53 generate --device cuda --model $2 --temperature 0 --max-tokens 48 --json "$3" |
        luajit -e 'io.write(io.read("a"):match([=["ids": %[([^%]]*)%]]=]) or "?")'; }
for model in models/glm53-tiny /tmp/glm53-tiny-fp8; do
  for prompt in "What is 17 + 25?" "The code of QZX-17 is 4821. The code of ABC-3 is 1234. What is the code of QZX-17?"; do
    a=$(ids "$off" $model "$prompt"); b=$(ids "$on" $model "$prompt")
    [ "$a" = "$b" ] && [ "$a" != "?" ] && r=equal || r=DIFFER
    echo "$(basename $model) greedy ids, switches off / on: $r"
  done
done
el "greedy ids"
[ -n "${CHECK_ONLY:-}" ] && { el "done (checks only)"; exit 0; }
rm -rf /tmp/bm_* /tmp/bm
[ -d /tmp/flash ] || timeout 420 python3 scripts/make_bench_model.py --gpu --layers flash --mtp --out /tmp/flash > $o/make_flash.log 2>&1
el "flash slice ready"
prof() {   # prof NAME BATCH CONTEXT ENV...
  local name=$1 batch=$2 ctx=$3; shift 3
  env "$@" timeout 120 /tmp/hb/profile_step /tmp/flash --context $ctx --batch $batch --steps 20 > $o/profile_$name.txt 2>&1
  echo "$name (batch $batch, context $ctx): $(grep 'decode step' $o/profile_$name.txt || tail -1 $o/profile_$name.txt)"
}
prof b1_off 1 2048 $off
[ -n "${QUICK:-}" ] || prof b1_stream 1 2048 GLM53_CUDA_GEMV_STREAM=1 GLM53_CUDA_PDL=0 GLM53_CUDA_KDA_SEQUENCES=0
[ -n "${QUICK:-}" ] || prof b1_stream_kda 1 2048 GLM53_CUDA_GEMV_STREAM=1 GLM53_CUDA_PDL=0 GLM53_CUDA_KDA_SEQUENCES=1
prof b1_all 1 2048 $on
[ -n "${QUICK:-}" ] || prof b1_all_8192 1 8192 $on
[ -n "${CORE:-}" ] || prof b8_off 8 2048 $off
[ -n "${CORE:-}" ] || prof b8_all 8 2048 $on
if [ "${PREFILL:-1}" = 1 ]; then
  for pf in off on; do
    env ${!pf} timeout 100 /tmp/hb/profile_step /tmp/flash --prefill 2048 --chunks 2048,512 --steps 3 > $o/prefill_2048_$pf.txt 2>&1
    chunks=8192,2048,512; [ -n "${QUICK:-}" ] && [ $pf = off ] && chunks=8192
    [ -n "${CORE:-}" ] || env ${!pf} timeout 200 /tmp/hb/profile_step /tmp/flash --prefill 8192 --chunks $chunks --steps 2 \
      > $o/prefill_8192_$pf.txt 2>&1
    el "prefill, switches $pf: rc=$?"; grep -hE "^prefill|failed" $o/prefill_2048_$pf.txt $o/prefill_8192_$pf.txt 2>/dev/null
  done
  table=8192; [ -n "${CORE:-}" ] && table=2048
  sed -n '/^per kernel/,/^total/p' $o/prefill_${table}_off.txt | head -24
  sed -n '/^per kernel/,/^total/p' $o/prefill_${table}_on.txt | head -24
fi
if [ "${GEMV:-1}" = 1 ]; then
  timeout 150 /tmp/hb/bench_gemv --quick > $o/bench_gemv.txt 2>&1; el "bench_gemv rc=$?"
  grep -E " 1 (4 R2 U2|4 R1 U8|5 R|cublas)|FAIL|failed" $o/bench_gemv.txt | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$11,$13}' | head -70
fi
el "done"
