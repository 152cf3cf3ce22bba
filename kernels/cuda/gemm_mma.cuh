/*
 * gemm_mma.cuh - the many-row matmul on tensor cores for prefill: a block tile of 64 activation rows times 128
 * weight rows, K in steps of 64, with FP8 or BF16 weights read as stored. Private to the CUDA backend; used by
 * the grouped prefill experts (moe.cu), whose rows are gathered per expert on the device.
 *
 * Why not cuBLAS there: an expert's rows are a device-side list (tokens routed to it), so a cuBLAS call per
 * expert needs the counts on the host (a stream synchronisation per MoE layer) and 288 x 3 launches, and an FP8
 * expert had to be dequantised to BF16 scratch first (the read of 25 MB, the write and read of 50 MB, per expert
 * per 512-row chunk). Here one launch computes every expert's rows: block (n-tile, m-tile) finds its expert from
 * the m-tile index (moe.cu), gathers its 64 x rows and streams the expert's weight rows as stored.
 *
 * Block: 256 threads, 8 warps as 2 (rows) x 4 (weight rows); a warp computes 32 x 32 outputs as 2 x 4 MMAs
 * (mma.sync m16n8k16, BF16 inputs, F32 accumulation) per 16 k-values. The 128 weight rows are two halves of 64,
 * each of its own weight (w[0] rows n[0] .., w[1] rows n[1] ..): the gate and up rows of the same outputs (the
 * SwiGLU epilogue sees both), or 128 consecutive rows of one weight. Shared memory holds two stages of
 * x [64][64 + 4] BF16 and w [128][64] FP8 or [128][64] BF16; the next K step's global loads are in registers
 * while the current one is computed; one barrier per K step. The result tile goes through shared memory
 * ([64][128 + 4] F32) to the caller's epilogue, so stores are coalesced whatever they write.
 *
 * Fragments and K order (as gemv_mma.cuh): lane (g = lane / 4, q = lane % 4) reads 16 bytes of weight row g of an
 * n8 tile at byte 16 q of a chunk (64 FP8 or 32 BF16 k-values) and feeds the MMA's k-steps from them; its A
 * fragment reads x at the same columns (8 bytes per row per step), x staged times 2^64 with each 4 columns in the
 * order 0, 2, 1, 3 for FP8 weights (the bit-placed codes' pairs, gemv_mma_fp8x4_to_bf16x2_even/odd).
 *
 * Precision contract: products of BF16 x and the exact weight values summed by the MMA in F32 over a chunk of 64
 * k-values (FP8: each chunk's sum times its block scale), the chunks added in K order, F32 to the epilogue. A row's
 * result depends only on that x row and the weight (an MMA row does not see the others): it is the same at any
 * number of rows and any place in the tile (batch invariant within this path; gemv_mma's K split across warps
 * rounds differently, so a row here and the same row through the GEMV agree to F32 rounding, not in bits).
 * Needs K % 64 == 0, 16-byte aligned x rows and weights, FP8 scale blocks whole n8 tiles and chunks
 * (gemv_mma_weight_fits).
 */
#ifndef GLM53_CUDA_GEMM_MMA_CUH
#define GLM53_CUDA_GEMM_MMA_CUH

#include "kernels/cuda/gemv_mma.cuh"

enum {
    GEMM_MMA_THREADS = 256,
    GEMM_MMA_BM = 64,             /* activation rows of a block tile */
    GEMM_MMA_BN = 128,            /* weight rows of a block tile: two halves of 64 */
    GEMM_MMA_BK = 64,             /* k-values per step */
    GEMM_MMA_X_LD = 64 + 4,       /* staged x row, BF16 elements: 136 bytes (8 mod 32), so a half-warp's 8-byte A
                                     loads (4 rows, 4 lanes a row 32 bytes apart for FP8) hit 16 different banks */
    GEMM_MMA_C_LD = 128 + 4,      /* result row, floats */
};

/* One stage of shared memory: x [64][X_LD] BF16 (GEMM_MMA_X_BYTES), then w [128][64] FP8 or BF16. */
constexpr size_t GEMM_MMA_X_BYTES = (size_t)GEMM_MMA_BM * GEMM_MMA_X_LD * 2;
__host__ __device__ constexpr size_t gemm_mma_stage_bytes(bool fp8) {
    return GEMM_MMA_X_BYTES + (size_t)GEMM_MMA_BN * GEMM_MMA_BK * (fp8 ? 1 : 2);
}

/* Dynamic shared memory: two stages of x and w, or the result tile, whichever is larger. */
static inline size_t gemm_mma_smem(bool fp8) {
    const size_t result = (size_t)GEMM_MMA_BM * GEMM_MMA_C_LD * 4;
    return 2 * gemm_mma_stage_bytes(fp8) > result ? 2 * gemm_mma_stage_bytes(fp8) : result;
}

/* One block tile's operands: x rows (row r of the tile is x + x_row[r] * ldx, x_row[r] < 0: a zero row) and the
 * two weight halves (rows n[h] .. n[h] + 64 of w[h], rows at or past end[h] read as zero), K columns each. */
struct gemm_mma_tile {
    const __nv_bfloat16 *x;
    int64_t              ldx;
    weight_ref           w[2];
    int64_t              n[2], end[2];
    int                  K;
};

/* What a thread carries from global memory for one K step: 2 x chunks of 16 bytes and 2 (FP8) or 4 (BF16) w
 * chunks. */
template <bool FP8>
struct gemm_mma_regs {
    uint4 x[2];
    uint4 w[FP8 ? 2 : 4];
};

template <bool FP8>
__device__ inline void gemm_mma_fetch(gemm_mma_regs<FP8> &r, const gemm_mma_tile &t, const int64_t (&x_row)[2],
                                      int k0) {
    /* x: 64 rows x 8 chunks of 8 BF16; thread i takes chunks i and i + 256 (row i / 8, 8 columns at 8 (i % 8)) */
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int c = (threadIdx.x % 8) * 8;
        r.x[j] = x_row[j] >= 0 ? *reinterpret_cast<const uint4 *>(t.x + x_row[j] * t.ldx + k0 + c)
                               : make_uint4(0, 0, 0, 0);
    }
    /* w: 128 rows of 64 (FP8: 4 chunks of 16 bytes a row) or 128 (BF16: 8 chunks) bytes */
    constexpr int CHUNKS = FP8 ? 4 : 8, PER = FP8 ? 2 : 4;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int i = threadIdx.x + j * GEMM_MMA_THREADS, row = i / CHUNKS, c = i % CHUNKS;
        const bool second = row >= 64;   /* selects, not t.w[row / 64]: a runtime index would put t in local memory */
        const int64_t n = (second ? t.n[1] : t.n[0]) + row % 64, end = second ? t.end[1] : t.end[0];
        const uint8_t *w = (const uint8_t *)(second ? t.w[1].data : t.w[0].data);
        r.w[j] = n < end ? gemv_mma_load_stream(w + (n * t.K + k0) * (FP8 ? 1 : 2) + 16 * c) : make_uint4(0, 0, 0, 0);
    }
}

/* Stores one K step's registers into a stage: x as the MMA reads it (FP8: times 2^64, columns 0, 2, 1, 3). */
template <bool FP8>
__device__ inline void gemm_mma_stash(uint8_t *stage, const gemm_mma_regs<FP8> &r) {
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(stage);
    uint8_t *ws = stage + GEMM_MMA_X_BYTES;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = threadIdx.x + j * GEMM_MMA_THREADS, row = i / 8, c = (i % 8) * 8;
        const uint4 v = FP8 ? gemv_mma_x8_for_fp8<false>(r.x[j]) : r.x[j];
        uint2 *to = reinterpret_cast<uint2 *>(xs + row * GEMM_MMA_X_LD + c);   /* rows are 8-byte aligned */
        to[0] = make_uint2(v.x, v.y);
        to[1] = make_uint2(v.z, v.w);
    }
    constexpr int PER = FP8 ? 2 : 4;
#pragma unroll
    for (int j = 0; j < PER; j++) {   /* chunk i: the fetch's (row i / chunks a row, chunk i % chunks a row) */
        const int i = threadIdx.x + j * GEMM_MMA_THREADS;
        *reinterpret_cast<uint4 *>(ws + (size_t)i * 16) = r.w[j];
    }
}

/* The MMAs of one stage: acc[mi][ni] (rows 32 wm + 16 mi .., weight rows 32 wn + 8 ni ..) += x w^T over 64 k,
 * FP8 chunk sums times their block scales (scale[ni], already times 2^56). */
template <bool FP8>
__device__ inline void gemm_mma_step(float (&acc)[2][4][4], const uint8_t *stage, const float (&scale)[4], int wm,
                                     int wn, int g, int q) {
    const __nv_bfloat16 *xs = reinterpret_cast<const __nv_bfloat16 *>(stage);
    const uint8_t *ws = stage + GEMM_MMA_X_BYTES;
    constexpr int ROW_BYTES = FP8 ? 64 : 128, CHUNK = FP8 ? 64 : 32, STEPS = FP8 ? 4 : 2, CH = FP8 ? 16 : 8;
#pragma unroll
    for (int k = 0; k < GEMM_MMA_BK; k += CHUNK) {
        float d[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++) d[mi][ni][0] = d[mi][ni][1] = d[mi][ni][2] = d[mi][ni][3] = 0.0f;
        uint32_t bw[4][2 * STEPS];   /* n8 tile ni: this lane's CH weights of row g as BF16 pairs */
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const uint4 v = *reinterpret_cast<const uint4 *>(ws + (wn * 32 + ni * 8 + g) * ROW_BYTES +
                                                             (k / CHUNK) * 64 + 16 * q);
            const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (FP8) {
                    bw[ni][2 * j] = gemv_mma_fp8x4_to_bf16x2_even(words[j]);
                    bw[ni][2 * j + 1] = gemv_mma_fp8x4_to_bf16x2_odd(words[j]);
                } else {
                    bw[ni][j] = words[j];
                }
            }
        }
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            const __nv_bfloat16 *xa = xs + (wm * 32 + mi * 16 + g) * GEMM_MMA_X_LD + k + CH * q;
            const __nv_bfloat16 *xb = xa + 8 * GEMM_MMA_X_LD;
#pragma unroll
            for (int st = 0; st < STEPS; st++) {
                const uint2 a = *reinterpret_cast<const uint2 *>(xa + 4 * st);
                const uint2 b = *reinterpret_cast<const uint2 *>(xb + 4 * st);
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
                    gemv_mma_16816(d[mi][ni], a.x, b.x, a.y, b.y, bw[ni][2 * st], bw[ni][2 * st + 1]);
            }
        }
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[mi][ni][j] += FP8 ? d[mi][ni][j] * scale[ni] : d[mi][ni][j];
    }
}

/* The block tile: c[r][col] = x row r . weight row col (col < 64: w[0] row n[0] + col, else w[1] row n[1] + col -
 * 64), F32, left in `smem` as [64][GEMM_MMA_C_LD] and returned, valid for every thread after the final barrier.
 * x_row[j] is the x row (or -1: zeros) of tile row threadIdx.x / 8 + 32 j, which this thread loads 8 columns
 * of; the caller gives it (it knows where a row comes from). Every thread of the block must call it. */
template <bool FP8>
__device__ inline const float *gemm_mma_block(uint8_t *smem, const gemm_mma_tile &t, const int64_t (&x_row)[2]) {
    constexpr size_t STAGE = gemm_mma_stage_bytes(FP8);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    const int wm = warp % 2, wn = warp / 2;   /* this warp's 32 rows and 32 weight rows of the tile */
    const bool second = wn >= 2;   /* the weight half of this warp's 32 rows (selects: see gemm_mma_fetch) */
    const weight_ref w = second ? t.w[1] : t.w[0];
    const int64_t tile_row0 = (second ? t.n[1] : t.n[0]) + (wn % 2) * 32, end = second ? t.end[1] : t.end[0];
    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) acc[mi][ni][0] = acc[mi][ni][1] = acc[mi][ni][2] = acc[mi][ni][3] = 0.0f;

    gemm_mma_regs<FP8> r;
    gemm_mma_fetch<FP8>(r, t, x_row, 0);
    gemm_mma_stash<FP8>(smem, r);
    __syncthreads();
    const int steps = t.K / GEMM_MMA_BK;
    for (int s = 0; s < steps; s++) {
        if (s + 1 < steps) gemm_mma_fetch<FP8>(r, t, x_row, (s + 1) * GEMM_MMA_BK);
        float scale[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        if (FP8) {
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int64_t row = tile_row0 + ni * 8;
                float block_scale = 1.0f;   /* no scale: block_rows and block_cols are not set */
                if (w.scale && row < end) {
                    const int64_t k_block = (int64_t)s * GEMM_MMA_BK / w.block_cols;
                    block_scale = w.scale[(row / w.block_rows) * w.scale_stride + k_block];
                }
                scale[ni] = block_scale * GEMV_MMA_UNSCALE;
            }
        }
        gemm_mma_step<FP8>(acc, smem + (s % 2) * STAGE, scale, wm, wn, g, q);
        if (s + 1 < steps) gemm_mma_stash<FP8>(smem + ((s + 1) % 2) * STAGE, r);
        __syncthreads();
    }

    /* C fragment: acc[mi][ni][0..1] row g, columns 2q, 2q + 1 of the n8 tile; [2..3] row g + 8 */
    float *c = reinterpret_cast<float *>(smem);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                c[(wm * 32 + mi * 16 + g + (j >= 2 ? 8 : 0)) * GEMM_MMA_C_LD + wn * 32 + ni * 8 + 2 * q + (j & 1)] =
                    acc[mi][ni][j];
    __syncthreads();
    return c;
}

#endif
