/*
 * gemv.cuh - the warp dot product of the small-row-count matmuls: private to the CUDA backend, shared by the
 * FP8 GEMV of matmul (linear.cu), the fused dense SwiGLU (linear.cu) and the routed experts of decode (moe.cu).
 *
 * One warp computes dot(x[m], w[n]) for up to MAX_M rows m of x against one weight row n. Lane l takes the
 * 16-element chunks l*16, l*16 + 512, ... when K is a multiple of 16 (for FP8 weights, one 16-byte load of codes
 * per chunk, converted two at a time by the hardware), else the single elements l, l + 32, ...; per chunk the 16
 * products are summed in order (times the chunk's FP8 block scale) and added to the lane's accumulator;
 * cuda_warp_sum finishes. Callers pick MAX_M as the smallest of 1, 2, 4, 8, 16 that holds their rows
 * (GEMV_DISPATCH_M), so one row does not pay for sixteen. Every caller goes through this one function, so the same
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

/* 16 consecutive activations x[i .. i+16) as floats (cuda_act_load8 twice). */
__device__ inline void gemv_load_x16(float (&xv)[16], act_in x, int64_t i, bool aligned) {
    float a[8], b[8];
    cuda_act_load8(x, i, aligned, a);
    cuda_act_load8(x, i + 8, aligned, b);
#pragma unroll
    for (int j = 0; j < 8; j++) xv[j] = a[j], xv[8 + j] = b[j];
}

/* acc[m] += this lane's share of sum_k x[x0 + m * K + k] * w[n, k], for m < M (M <= MAX_M).
 * FP8 chunks inside one scale block (every chunk when block_cols is a multiple of 16, as in the checkpoints):
 * the 16 products of codes and x are summed in order, and the sum is multiplied by the block's scale once;
 * a chunk that straddles scale blocks multiplies each code by its own scale first. The arithmetic of row m
 * does not depend on MAX_M or M, so a row gives the same bits in a batch of any size. */
template <int MAX_M>
__device__ inline void gemv_lane_partials(float (&acc)[MAX_M], const weight_ref &w, int64_t n, act_in x, int64_t x0,
                                          int M, int64_t K, bool vec16, int lane) {
    const bool fp8 = w.dtype == GLM53_F8_E4M3;
    const uint8_t *codes = fp8 ? (const uint8_t *)w.data + n * K : nullptr;
    const float *srow = fp8 && w.scale ? w.scale + (n / w.block_rows) * w.scale_stride : nullptr;
    if (vec16) {
        /* 16-byte alignment of every row's chunk: the base, x0 and K (a multiple of 16 here) */
        const bool x_aligned = (uintptr_t)x.data % 16 == 0 && x0 % 16 == 0;
        const int32_t bc = w.block_cols;
#pragma unroll 4   /* four 16-byte weight loads in flight per lane */
        for (int32_t k0 = lane * 16; k0 < (int32_t)K; k0 += 32 * 16) {
            float wv[16], s = 1.0f;
            bool scale_per_chunk = true;
            if (fp8) {
                uint4 packed = *reinterpret_cast<const uint4 *>(codes + k0);
                const uint16_t *pairs = reinterpret_cast<const uint16_t *>(&packed);
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    __half2_raw h2 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pairs[e], __NV_E4M3);
                    float2 f = __half22float2(__half2(h2));
                    wv[2 * e] = f.x, wv[2 * e + 1] = f.y;
                }
                if (srow) {
                    int32_t b0 = k0 / bc, b1 = (k0 + 15) / bc;
                    if (b0 == b1) {
                        s = srow[b0];
                    } else {
                        scale_per_chunk = false;
#pragma unroll
                        for (int j = 0; j < 16; j++) wv[j] *= srow[(k0 + j) / bc];
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 16; j++) wv[j] = w.at(n, k0 + j);
            }
#pragma unroll
            for (int m = 0; m < MAX_M; m++) {
                if (m < M) {
                    float xv[16];
                    gemv_load_x16(xv, x, x0 + (int64_t)m * K + k0, x_aligned);
                    float part = 0.0f;
#pragma unroll
                    for (int j = 0; j < 16; j++) part += xv[j] * wv[j];
                    acc[m] += scale_per_chunk ? part * s : part;
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

/* Runs BODY with the compile-time constant MAX_M_ set to the smallest of 1, 2, 4, 8, 16 that is >= m. */
#define GEMV_DISPATCH_M(m, BODY)                                              \
    do {                                                                      \
        if ((m) <= 1) { constexpr int MAX_M_ = 1; BODY; }                     \
        else if ((m) <= 2) { constexpr int MAX_M_ = 2; BODY; }                \
        else if ((m) <= 4) { constexpr int MAX_M_ = 4; BODY; }                \
        else if ((m) <= 8) { constexpr int MAX_M_ = 8; BODY; }                \
        else { constexpr int MAX_M_ = 16; BODY; }                             \
    } while (0)

/* A value as an activation of this dtype would hold it (the rounding a store and a reload would apply). */
__device__ inline float round_as_act(float v, bool bf16) { return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v; }

#endif /* GLM53_CUDA_GEMV_CUH */
