/*
 * gemv.cuh - the warp dot product of the small-row-count matmuls: private to the CUDA backend, shared by the
 * FP8 GEMV of matmul (linear.cu), the fused dense SwiGLU (linear.cu) and the routed experts of decode (moe.cu).
 *
 * One warp computes dot(x[m], w[n]) for up to MAX_M rows m of x against one weight row n. Lane l takes the
 * 16-element chunks l*16, l*16 + 512, ... when K is a multiple of 16 (for FP8 weights, one 16-byte load of codes
 * per chunk), else the single elements l, l + 32, ...; per chunk the 16 products are summed in order and added
 * to the lane's accumulator; cuda_warp_sum finishes. Every caller goes through this one function, so the same
 * (x row, weight row) pair gives the same bits whichever kernel asks: the fused paths equal the generic ones.
 */
#ifndef GLM53_CUDA_GEMV_CUH
#define GLM53_CUDA_GEMV_CUH

#include "kernels/cuda/cuda_common.cuh"

/* Whether the 16-element chunk walk applies to a weight with rows of K elements. */
__host__ __device__ inline bool gemv_vec16(const weight_ref &w, int64_t K) {
    if (K % 16) return false;
    return w.dtype != GLM53_F8_E4M3 || (uintptr_t)w.data % 16 == 0;
}

/* acc[m] += this lane's share of sum_k x[x0 + m * K + k] * w[n, k], for m < M. */
template <int MAX_M>
__device__ inline void gemv_lane_partials(float (&acc)[MAX_M], const weight_ref &w, int64_t n, act_in x, int64_t x0,
                                          int M, int64_t K, bool vec16, int lane) {
    const bool fp8 = w.dtype == GLM53_F8_E4M3;
    const uint8_t *codes = fp8 ? (const uint8_t *)w.data + n * K : nullptr;
    const float *srow = fp8 && w.scale ? w.scale + (n / w.block_rows) * w.scale_stride : nullptr;
    if (vec16) {
        for (int64_t k0 = (int64_t)lane * 16; k0 < K; k0 += 32 * 16) {
            float wv[16];
            if (fp8) {
                uint4 packed = *reinterpret_cast<const uint4 *>(codes + k0);
                uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
                for (int j = 0; j < 16; j++) wv[j] = cuda_fp8_e4m3_to_float((uint8_t)(words[j / 4] >> (8 * (j % 4))));
                if (srow) {
                    int64_t b0 = k0 / w.block_cols, b1 = (k0 + 15) / w.block_cols;
                    if (b0 == b1) {
                        float s = srow[b0];
#pragma unroll
                        for (int j = 0; j < 16; j++) wv[j] *= s;
                    } else {
#pragma unroll
                        for (int j = 0; j < 16; j++) wv[j] *= srow[(k0 + j) / w.block_cols];
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 16; j++) wv[j] = w.at(n, k0 + j);
            }
#pragma unroll
            for (int m = 0; m < MAX_M; m++) {
                if (m < M) {
                    float part = 0.0f;
#pragma unroll
                    for (int j = 0; j < 16; j++) part += x[x0 + (int64_t)m * K + k0 + j] * wv[j];
                    acc[m] += part;
                }
            }
        }
    } else {
        for (int64_t k = lane; k < K; k += 32) {
            float wv;
            if (fp8) {
                wv = cuda_fp8_e4m3_to_float(codes[k]);
                if (srow) wv *= srow[k / w.block_cols];
            } else {
                wv = w.at(n, k);
            }
#pragma unroll
            for (int m = 0; m < MAX_M; m++)
                if (m < M) acc[m] += x[x0 + (int64_t)m * K + k] * wv;
        }
    }
}

/* A value as an activation of this dtype would hold it (the rounding a store and a reload would apply). */
__device__ inline float round_as_act(float v, bool bf16) { return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v; }

#endif /* GLM53_CUDA_GEMV_CUH */
