#!/usr/bin/env bash
# Packs the CUDA build (build/, or BUILD=DIR; made here with nvcc -arch=sm_90a) for the H200 test machine into
# .h200/bin.txz (ignored by git): the library, the CUDA test binaries and bench_gemv, stripped, in one xz tarball,
# because a run there carries the whole working tree and that must stay under 64 MiB (setup.sh unpacks it into
# /tmp/hb). Then, with LuaJIT from ../shared/tools/h200-lua-env:
#     tests/cuda/h200/pack.sh && <run on the H200, carrying .h200 and .debs>: tests/cuda/h200/decode_profile.sh
set -eu
cd "$(git rev-parse --show-toplevel)"
rm -rf /tmp/h200pack && mkdir -p /tmp/h200pack
b=${BUILD:-build}   # BUILD=DIR packs another build folder
cp $b/libglm53.so.0.1.0 /tmp/h200pack/libglm53.so
for t in profile_step test_cuda_graph test_cuda_ops test_cuda_vision_ops test_nccl bench_gemv bench_launch bench_grouped; do cp $b/$t /tmp/h200pack/; done
strip /tmp/h200pack/*
mkdir -p .h200
tar cf - -C /tmp/h200pack . | xz -9e --lzma2=dict=96MiB -T2 > ${PACK:-.h200/bin.txz}   # the binaries share the library: one dictionary holds it once
ls -la ${PACK:-.h200/bin.txz}
