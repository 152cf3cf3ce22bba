#!/usr/bin/env bash
# CUDA kernel variants side by side on a device machine (issues 16 and 17), with the checks that must hold first.
# A variant is a name and the environment switches it sets (docs/cuda.md "Performance switches"; each read at
# backend creation): VARIANTS="name:VAR=value,VAR=value name2:..." (a name with nothing after the colon runs the
# defaults). The first variant is the baseline. Default:
#     VARIANTS="off:GLM53_CUDA_GEMV_STREAM=0,GLM53_CUDA_PDL=0,GLM53_CUDA_KDA_SEQUENCES=0,GLM53_CUDA_GROUPED_EXPERTS=0 on:"
#   1. for every variant but the baseline: test_cuda_ops' groups of the decode and prefill kernels against the CPU
#      ops (OP_GROUPS=...), test_cuda_graph (eager step against its replayed graph) on the fixtures, and (not QUICK)
#      the fixtures on CUDA with BF16 activations against the float64 logits (busted: carry .debs made with the
#      busted packages, see below);
#   2. greedy token ids of the bundled model and its FP8 copy under every variant: must equal the baseline's;
#   3. the flash slice (make_bench_model.py --layers flash --mtp, kept in /tmp/flash between calls on a warm
#      machine): decode step at context 2048 for each variant at batch 1 (and batch 8 unless CORE), context 8192 for
#      the last variant unless QUICK (profile_step: eager, graph replay and the per-kernel table into $OUT, bundled
#      with the prefill tables and bench_gemv.txt into $OUT/tables.tgz at the end: a call brings back few files);
#   4. prefill of the flash slice (issue 17), the baseline and the last variant (and BASE_PACK's build, 2048 one-shot):
#      2048 tokens one-shot and in chunks of 512, 8192 one-shot and in chunks of 2048 and 512 (one-shot only for
#      the baseline under QUICK), the per-kernel tables of the one-shot 8192 (2048 under CORE); PREFILL=0 skips it;
#   5. bench_gemv --quick: every GEMV version at the real projection shapes, M = 1, 4, 16 (versions 5 must give
#      version 4's bits: "same-v4"; the M = 1 rows are printed). GEMV=0 skips it.
# Run there from the project root, carrying .h200 (PACK=.h200/ab.txz tests/cuda/h200/pack.sh) and .debs
# (../shared/tools/h200-lua-env lua-busted lua-cliargs lua-dkjson lua-filesystem lua-luassert lua-mediator
# lua-penlight lua-say lua-system lua-term). CHECK_ONLY=1 stops after step 2; QUICK=1 (short budget) skips the
# fixtures and context 8192; CORE=1 is QUICK without batch 8 and with prefill of 2048 tokens only. BASE_PACK=FILE
# (an older pack.sh tarball) adds that build's decode profiles to step 3, under the switches BASE_ENV="VAR=1,...".
# B8=0 skips batch 8 in step 3.
set -u
[ -n "${CORE:-}" ] && QUICK=1
. tests/cuda/h200/setup.sh
VARIANTS=${VARIANTS:-"off:GLM53_CUDA_GEMV_STREAM=0,GLM53_CUDA_PDL=0,GLM53_CUDA_KDA_SEQUENCES=0,GLM53_CUDA_GROUPED_EXPERTS=0 on:"}
OP_GROUPS=${OP_GROUPS:-matmul,norm,elementwise,mhc,kda,moe,index,indexer}
names=(); envs=()
for v in $VARIANTS; do names+=("${v%%:*}"); envs+=("$(echo "${v#*:}" | tr , ' ')"); done
last=$(( ${#names[@]} - 1 ))
venv() { env ${envs[$1]} "${@:2}"; }   # venv INDEX CMD...: CMD under variant INDEX's switches
el "variants: ${names[*]} (baseline ${names[0]})"

for i in $(seq 1 $last); do
  n=${names[$i]}
  venv $i TEST=/tmp/hb/test_cuda_ops RUN_TIMEOUT=${RUN_TIMEOUT:-150} GROUP_TIMEOUT=${GROUP_TIMEOUT:-40} \
    tests/cuda/run.sh --only $OP_GROUPS --no-bench > $o/cuda_ops_$n.log 2>&1
  el "$n: cuda ops rc=$?"; grep -E "FAIL|cuda ops:" $o/cuda_ops_$n.log | tail -n 12
  venv $i timeout 90 /tmp/hb/test_cuda_graph tests/fixtures/tiny-fp8 tests/fixtures/tiny-mtp tests/fixtures/tiny-bf16-kpool8 \
    > $o/graph_$n.log 2>&1
  el "$n: graph rc=$?"; tail -1 $o/graph_$n.log
  if [ -z "${QUICK:-}" ]; then
    busted_bin=$(command -v busted)
    if [ -n "$busted_bin" ]; then
      venv $i GLM53_DEVICE=cuda GLM53_ACTIVATIONS=bf16 timeout 150 luajit "$busted_bin" --lua=luajit -o TAP \
        tests/lua/fixtures_spec.lua tests/lua/model_cache_spec.lua > $o/model_bf16_$n.log 2>&1
      el "$n: fixtures bf16 rc=$?"
      grep -E "^not ok" $o/model_bf16_$n.log | head -5
      echo "$n: model specs passed (bf16): $(grep -cE '^ok' $o/model_bf16_$n.log), failed: $(grep -cE '^not ok' $o/model_bf16_$n.log)"
    else
      echo "$n: fixtures bf16 not run: no busted in .debs"
    fi
  fi
done

rm -rf /tmp/glm53-tiny-fp8
python3 training/make_fp8.py --src models/glm53-tiny --out /tmp/glm53-tiny-fp8 > /dev/null 2>&1 || echo "make_fp8 failed"
ids() { venv $1 bin/glm53 generate --device cuda --model $2 --temperature 0 --max-tokens 48 --json "$3" |
        luajit -e 'io.write(io.read("a"):match([=["ids": %[([^%]]*)%]]=]) or "?")'; }
for model in models/glm53-tiny /tmp/glm53-tiny-fp8; do
  for prompt in "What is 17 + 25?" "The code of QZX-17 is 4821. The code of ABC-3 is 1234. What is the code of QZX-17?"; do
    a=$(ids 0 $model "$prompt"); r=""
    for i in $(seq 1 $last); do
      b=$(ids $i $model "$prompt")
      [ "$a" = "$b" ] && [ "$a" != "?" ] && r="$r ${names[$i]}:equal" || r="$r ${names[$i]}:DIFFER"
    done
    echo "$(basename $model) greedy ids against ${names[0]}:$r"
  done
done
el "greedy ids"
[ -n "${CHECK_ONLY:-}" ] && { el "done (checks only)"; exit 0; }

rm -rf /tmp/bm_* /tmp/bm
[ -d /tmp/flash ] || timeout 420 python3 scripts/make_bench_model.py --gpu --layers flash --mtp --out /tmp/flash > $o/make_flash.log 2>&1
el "flash slice ready"
prof() {   # prof VARIANT BATCH CONTEXT
  local n=${names[$1]} batch=$2 ctx=$3
  venv $1 timeout 120 /tmp/hb/profile_step /tmp/flash --context $ctx --batch $batch --steps 20 > $o/profile_${n}_b${batch}_$ctx.txt 2>&1
  echo "$n (batch $batch, context $ctx): $(grep 'decode step' $o/profile_${n}_b${batch}_$ctx.txt || tail -1 $o/profile_${n}_b${batch}_$ctx.txt)"
}
base_prof() {   # base_prof BATCH CONTEXT: the older build of BASE_PACK, with the switches of BASE_ENV
  [ -n "${BASE_PACK:-}" ] || return 0
  [ -x /tmp/hb_base/profile_step ] || { mkdir -p /tmp/hb_base && xz -dc $BASE_PACK | tar xf - -C /tmp/hb_base; }
  env $(echo "${BASE_ENV:-}" | tr , ' ') timeout 120 /tmp/hb_base/profile_step /tmp/flash --context $2 --batch $1 --steps 20 \
    > $o/profile_base_b$1_$2.txt 2>&1
  echo "base build (batch $1, context $2): $(grep 'decode step' $o/profile_base_b$1_$2.txt || tail -1 $o/profile_base_b$1_$2.txt)"
}
base_prof 1 2048
for i in $(seq 0 $last); do prof $i 1 2048; done
[ -n "${CORE:-}" ] || [ "${B8:-1}" = 0 ] || { base_prof 8 2048; for i in $(seq 0 $last); do prof $i 8 2048; done; }
[ -n "${QUICK:-}" ] || prof $last 1 8192
if [ "${PREFILL:-1}" = 1 ]; then
  if [ -n "${BASE_PACK:-}" ]; then   # the older build's one-shot prefill of 2048 tokens
    env $(echo "${BASE_ENV:-}" | tr , ' ') timeout 100 /tmp/hb_base/profile_step /tmp/flash --prefill 2048 --steps 3 \
      > $o/prefill_2048_base.txt 2>&1
    el "prefill, base build: rc=$?"; grep -hE "^prefill|failed" $o/prefill_2048_base.txt
  fi
  for i in 0 $last; do
    n=${names[$i]}
    venv $i timeout 100 /tmp/hb/profile_step /tmp/flash --prefill 2048 --chunks 2048,512 --steps 3 > $o/prefill_2048_$n.txt 2>&1
    chunks=8192,2048,512; [ -n "${QUICK:-}" ] && [ $i = 0 ] && chunks=8192
    [ -n "${CORE:-}" ] || venv $i timeout 200 /tmp/hb/profile_step /tmp/flash --prefill 8192 --chunks $chunks --steps 2 \
      > $o/prefill_8192_$n.txt 2>&1
    el "prefill, $n: rc=$?"; grep -hE "^prefill|failed" $o/prefill_2048_$n.txt $o/prefill_8192_$n.txt 2>/dev/null
  done
  table=8192; [ -n "${CORE:-}" ] && table=2048
  for i in 0 $last; do sed -n '/^per kernel/,/^total/p' $o/prefill_${table}_${names[$i]}.txt | head -24; done
fi
if [ "${GEMV:-1}" = 1 ]; then
  timeout 150 /tmp/hb/bench_gemv --quick > $o/bench_gemv.txt 2>&1; el "bench_gemv rc=$?"
  grep -E "^# |^shape| 1 (4 R2 U2|4 R1 U8|5 R|6 R|7 R|cublas)|FAIL|failed" $o/bench_gemv.txt | cut -c1-110 | head -110
fi
# A call brings back only a few files of $OUT: the per-variant profiles and tables go back as one tarball.
if [ -n "${OUT:-}" ]; then
  (cd "$OUT" && files=$(ls profile_*.txt prefill_*.txt bench_gemv.txt 2>/dev/null); [ -n "$files" ] &&
     tar czf tables.tgz $files && rm -f $files graph_*.log make_flash.log)
fi
el "done (the profiles: tables.tgz in \$OUT)"
