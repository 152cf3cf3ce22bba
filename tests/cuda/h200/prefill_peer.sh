#!/usr/bin/env bash
# The prefill issue's item 4 on the GPU machine: glm53's prefill against transformers' on the same shapes, same
# run. Makes the two-layer slice (scripts/make_bench_model.py --gpu --layers kda-dense,mla-moe: KDA + dense, then
# sparse MLA + 288-expert MoE, real dimensions, random weights) into /tmp/bm_two_mm, times glm53's one-shot
# prefill of 2048 and 8192 tokens (profile_step --prefill, median of 3, the performance switches off and on:
# docs/cuda.md) and transformers' (scripts/hf_decode_bench.py --decode 0: BF16, its own attention and grouped_mm
# experts, a warm-up prefill first; running out of memory is reported as such), then prints one table. Run from
# the project root carrying .h200 (tests/cuda/h200/pack.sh) and .debs; logs to $OUT.
set -u
. tests/cuda/h200/setup.sh
off="GLM53_CUDA_GEMV_STREAM=0 GLM53_CUDA_PDL=0 GLM53_CUDA_KDA_SEQUENCES=0 GLM53_CUDA_GROUPED_EXPERTS=0"
on="GLM53_CUDA_GEMV_STREAM=1 GLM53_CUDA_PDL=1 GLM53_CUDA_KDA_SEQUENCES=1 GLM53_CUDA_GROUPED_EXPERTS=1"
[ -d /tmp/bm_two_mm ] || timeout 200 python3 scripts/make_bench_model.py --gpu --layers kda-dense,mla-moe \
  --out /tmp/bm_two_mm > $o/make_two_mm.log 2>&1 || { echo "make two_mm failed"; tail -3 $o/make_two_mm.log; exit 1; }
el "two-layer slice ready"
declare -A ms
for n in 2048 8192; do
  for pf in off on; do
    env ${!pf} timeout 150 /tmp/hb/profile_step /tmp/bm_two_mm --prefill $n --steps 3 > $o/prefill_two_mm_${n}_$pf.txt 2>&1
    ms[$n,$pf]=$(sed -n "s/^prefill $n tokens, chunks of $n: \([0-9.]*\) ms.*/\1/p" $o/prefill_two_mm_${n}_$pf.txt)
    el "glm53 prefill $n, switches $pf: ${ms[$n,$pf]:-failed}"
  done
  timeout 300 python3 scripts/hf_decode_bench.py --model /tmp/bm_two_mm --prompt $n --decode 0 \
    --out $o/hf_prefill_$n.json > $o/hf_prefill_$n.log 2>&1
  ms[$n,hf]=$(python3 -c "import json; r = json.load(open('$o/hf_prefill_$n.json')); print('oom' if r['oom'] else round(r['prefill_ms'], 1))" 2>/dev/null)
  el "transformers prefill $n: ${ms[$n,hf]:-failed}"
done
echo "| tokens | glm53, switches off | glm53, switches on | transformers 5.17 (BF16) | speed-up (best glm53) |"
echo "|---|---|---|---|---|"
for n in 2048 8192; do
  python3 - "$n" "${ms[$n,off]:-nan}" "${ms[$n,on]:-nan}" "${ms[$n,hf]:-nan}" <<'PY'
import math, sys
n, off, on, hf = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
best = min(v for v in (off, on) if not math.isnan(v)) if not (math.isnan(off) and math.isnan(on)) else float("nan")
hf_s, up = ("out of memory", "-") if hf == "oom" else (f"{float(hf):.1f} ms", f"{float(hf) / best:.1f}x")
print(f"| {n} | {off:.1f} ms | {on:.1f} ms | {hf_s} | {up} |")
PY
done
