#!/usr/bin/env bash
# The CUDA checks of issue 5, in one command on a GPU machine (the H200 test machine has no compiler
# toolchain for our C deps and no LuaJIT: build here with CUDA, copy libglm53.so* and test_cuda_ops into .h200/,
# fetch LuaJIT with ../shared/tools/h200-lua-env, and carry .debs and .h200):
#   . .debs/env.sh && tests/cuda/h200_check.sh [.h200]
# 1. every CUDA op against the CPU op (tests/cuda/test_cuda_ops);
# 2. the whole model on CUDA: every fixture, prefill/decode/chunked, against the float64 transformers logits;
# 3. batched steps, fork and truncate on CUDA (the same specs as on the CPU, GLM53_DEVICE=cuda);
# 4. the same with F32 activations, which separates kernel errors from BF16 rounding;
# 5. the vision ops and the vision tower / image prompts on CUDA;
# 6. steady-state decode (the engine-architecture issue): no cudaMalloc, one host wait per step, a captured step
#    replayed with the eager step's logits, on the fixtures and on the real-dimension bench model (made on the
#    GPU into $BENCH_MODEL, default /tmp/bm: KDA + dense, sparse MLA + 288-expert MoE; skipped when
#    BENCH_MODEL=none); then scripts/bench.lua on that model.
set -uo pipefail
bin=${1:-.h200}
export GLM53_LIB=$PWD/$bin/libglm53.so
out=${OUT:-/tmp}
status=0

echo "== CUDA ops vs CPU ops"
TEST="$bin/test_cuda_ops" RUN_TIMEOUT=240 GROUP_TIMEOUT=40 tests/cuda/run.sh > "$out/cuda_ops.log" 2>&1; rc=$?
grep -E "FAIL|cuda ops:" "$out/cuda_ops.log" | tail -n 40; [ $rc -eq 0 ] || status=1
timeout 120 "$bin/test_cuda_vision_ops" > "$out/cuda_vision_ops.log" 2>&1; rc=$?
grep -E "FAIL|passed" "$out/cuda_vision_ops.log" | tail -n 10; [ $rc -eq 0 ] || status=1

echo "== model on CUDA vs float64 reference, and CUDA caches"
busted_bin=$(command -v busted)
GLM53_DEVICE=cuda timeout 300 luajit "$busted_bin" --lua=luajit -o TAP tests/lua/fixtures_spec.lua \
    tests/lua/model_cache_spec.lua > "$out/cuda_model.log" 2>&1; rc=$?
grep -E "rel err|^not ok|^# " "$out/cuda_model.log" | head -60
grep -cE "^ok" "$out/cuda_model.log" | sed 's/^/model specs passed: /'
[ $rc -eq 0 ] || status=1

echo "== model on CUDA with F32 activations (isolates rounding from kernel errors)"
GLM53_DEVICE=cuda GLM53_ACTIVATIONS=f32 timeout 300 luajit "$busted_bin" --lua=luajit -o TAP \
    tests/lua/fixtures_spec.lua tests/lua/model_cache_spec.lua > "$out/cuda_model_f32.log" 2>&1; rc=$?
grep -E "rel err|^not ok" "$out/cuda_model_f32.log" | head -40
grep -cE "^ok" "$out/cuda_model_f32.log" | sed 's/^/model specs passed (f32): /'
[ $rc -eq 0 ] || status=1

echo "== vision on CUDA"
for act in bf16 f32; do
    GLM53_DEVICE=cuda GLM53_ACTIVATIONS=$act timeout 200 luajit "$busted_bin" --lua=luajit -o TAP \
        tests/lua/vision_spec.lua > "$out/cuda_vision_$act.log" 2>&1; rc=$?
    grep -E "rel err|^not ok" "$out/cuda_vision_$act.log" | grep -v "^ok" | head -20
    grep -cE "^ok" "$out/cuda_vision_$act.log" | sed "s/^/vision specs passed ($act): /"
    [ $rc -eq 0 ] || status=1
done
echo "== steady-state decode: allocations, waits, capture and replay"
bench_model=${BENCH_MODEL:-/tmp/bm}
graph_models="tests/fixtures/tiny-fp8 tests/fixtures/tiny-mtp tests/fixtures/tiny-bf16-kpool8 tests/fixtures/tiny-f32"
if [ "$bench_model" != none ]; then
    if [ ! -f "$bench_model/model.safetensors" ]; then
        timeout 300 python3 scripts/make_bench_model.py --gpu --out "$bench_model" --layers kda-dense,mla-moe \
            > "$out/bench_model.log" 2>&1 || { tail -5 "$out/bench_model.log"; status=1; }
    fi
    graph_models="$bench_model $graph_models"
fi
timeout 300 "$bin/test_cuda_graph" $graph_models > "$out/cuda_graph.log" 2>&1; rc=$?
grep -E "^FAIL|model |yes|NO|test_cuda_graph:" "$out/cuda_graph.log" | tail -n 12; [ $rc -eq 0 ] || status=1
if [ "$bench_model" != none ] && [ -f "$bench_model/model.safetensors" ]; then
    timeout 300 luajit scripts/bench.lua --model "$bench_model" --device cuda --prompt 512 --decode 32 --repeat 2 \
        > "$out/bench.log" 2>&1; rc=$?
    tail -n 4 "$out/bench.log"; [ $rc -eq 0 ] || status=1
fi
exit $status
