#!/usr/bin/env bash
# The decode issue's item 5 on the GPU machine: glm53 against transformers on the same shapes, and the per-layer
# times a projection of the whole 45-layer model is made from. Makes four bench models (scripts/make_bench_model.py
# --gpu, real dimensions, random weights) into /tmp: one1 = kda-dense; two_kd = kda-dense x 2; two_mm = kda-dense,
# mla-moe (the two-layer slice the issue measured first); two_km = kda-dense,kda-moe. Times glm53's batch-1 decode
# step at context 2048 on each (profile_step, CUDA graph replay) and transformers' on two_mm
# (scripts/hf_decode_bench.py, BF16, its default kernels), then prints the per-layer times:
#   base (embedding, final norm, LM head, sampling) = one1 - kd;  kd = two_kd - one1;  mm = two_mm - one1;
#   km = two_km - one1
# and the 45-layer projection base + 3 kd + 31 km + 11 mm (the real schedule: dense KDA at 0-2, sparse MLA at
# every 4th layer from 3, KDA + MoE elsewhere). Run from the project root carrying .h200 and .debs; logs to $OUT.
set -u
. tests/cuda/h200/setup.sh
declare -A layers=([one1]=kda-dense [two_kd]=kda-dense,kda-dense [two_mm]=kda-dense,mla-moe [two_km]=kda-dense,kda-moe)
declare -A step
for m in one1 two_kd two_mm two_km; do
  rm -rf /tmp/bm_$m
  timeout 200 python3 scripts/make_bench_model.py --gpu --layers ${layers[$m]} --out /tmp/bm_$m > $o/make_$m.log 2>&1 \
    || { echo "make $m failed"; tail -3 $o/make_$m.log; continue; }
  timeout 120 /tmp/hb/profile_step /tmp/bm_$m --context 2048 --steps 20 > $o/profile_$m.txt 2>&1
  step[$m]=$(sed -n 's/.*graph replay \([0-9.]*\) ms.*/\1/p' $o/profile_$m.txt)
  el "$m (${layers[$m]}): graph replay ${step[$m]:-?} ms"
  [ $m = two_mm ] || rm -rf /tmp/bm_$m
done
timeout 400 python3 scripts/hf_decode_bench.py --model /tmp/bm_two_mm --prompt 2048 --decode 16 --out $o/hf_two_mm.json \
  > $o/hf_two_mm.log 2>&1; el "transformers rc=$?"; grep -E "parameters|prefill|decode step|Error|error" $o/hf_two_mm.log | tail -4
hf=$(python3 -c "import json; print(round(json.load(open('$o/hf_two_mm.json'))['step_ms_median'], 3))" 2>/dev/null)
python3 - "${step[one1]:-nan}" "${step[two_kd]:-nan}" "${step[two_mm]:-nan}" "${step[two_km]:-nan}" "${hf:-nan}" <<'PY'
import sys
one1, two_kd, two_mm, two_km, hf = map(float, sys.argv[1:])
kd, mm, km = two_kd - one1, two_mm - one1, two_km - one1
base = one1 - kd
t45 = base + 3 * kd + 31 * km + 11 * mm
print("| part | ms |\n|---|---|")
for name, v in (("base (embedding, final norm, LM head, sampling)", base), ("KDA + dense MLP layer", kd),
                ("sparse MLA + MoE layer", mm), ("KDA + MoE layer", km), ("45 layers, batch 1, one GPU", t45)):
    print(f"| {name} | {v:.3f} |")
print(f"two-layer slice (kda-dense, mla-moe): glm53 {two_mm:.3f} ms, transformers {hf:.3f} ms: {hf / two_mm:.1f}x")
PY
