#!/usr/bin/env bash
# The CUDA checks of the committed tree on the H200, short enough for the end of a session: every CUDA op
# against the CPU op (with the timings), the vision ops, the fixtures on CUDA against the float64 logits in BF16
# and F32 activations with the cache specs, steady-state graphs on the fixtures (also with one NCCL rank), and
# test_nccl (one NCCL rank vs none, CUDA F32 vs CPU). Carry .h200 (tests/cuda/h200/pack.sh) and .debs.
set -u
. tests/cuda/h200/setup.sh
TEST=/tmp/hb/test_cuda_ops RUN_TIMEOUT=200 GROUP_TIMEOUT=40 tests/cuda/run.sh > $o/cuda_ops.log 2>&1; el "cuda ops rc=$?"
grep -E "FAIL|cuda ops:" $o/cuda_ops.log | tail -n 12
timeout 120 /tmp/hb/test_cuda_vision_ops > $o/vision_ops.log 2>&1; el "vision ops rc=$?"; grep -E "FAIL|passed" $o/vision_ops.log | tail -3
busted_bin=$(command -v busted)
for act in bf16 f32; do
  GLM53_DEVICE=cuda GLM53_ACTIVATIONS=$act timeout 240 luajit "$busted_bin" --lua=luajit -o TAP tests/lua/fixtures_spec.lua \
    tests/lua/model_cache_spec.lua > $o/model_$act.log 2>&1; el "fixtures $act rc=$?"
  grep -E "rel err|^not ok" $o/model_$act.log | head -14; grep -cE "^ok" $o/model_$act.log | sed "s/^/model specs passed ($act): /"
done
fx="tests/fixtures/tiny-fp8 tests/fixtures/tiny-mtp tests/fixtures/tiny-bf16-kpool8 tests/fixtures/tiny-f32"
timeout 90 /tmp/hb/test_cuda_graph $fx > $o/graph.log 2>&1; el "graph rc=$?"; tail -6 $o/graph.log
timeout 90 /tmp/hb/test_cuda_graph --nccl tests/fixtures/tiny-mtp tests/fixtures/tiny-fp8 tests/fixtures/tiny-f32 > $o/graph_nccl.log 2>&1
el "graph --nccl rc=$?"; tail -5 $o/graph_nccl.log
timeout 120 /tmp/hb/test_nccl > $o/nccl.log 2>&1; el "nccl rc=$?"; tail -14 $o/nccl.log
