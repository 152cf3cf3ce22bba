/*
 * gemv_mma.cuh - the small-row-count matmul y[M,N] = x[M,K] * w[N,K]^T on tensor cores, for BF16 activations and
 * M <= 16 (decode, speculative verification, small batches): private to the CUDA backend, used by matmul and the
 * dense SwiGLU (linear.cu) and the decode experts (moe.cu), timed against the other versions by
 * kernels/cuda/bench/gemv.cu.
 *
 * Why tensor cores for a GEMV: the CUDA-core GEMV (gemv.cuh) does M FMAs per weight and reads x once per row of
 * the batch, so at M = 2..16 it is bound by instructions and shared-memory traffic, not by the weight bytes
 * (H200: 0.03-0.3 of the bandwidth floor). An MMA takes 16 rows of x at once; padding rows cost nothing that
 * matters. And at M = 1 it converts each FP8 code once with the 16 rows' worth of products done by the MMA.
 *
 * Work split. A warp computes an n-tile of 8 weight rows for all M <= 16 activation rows: the MMA
 * (mma.sync m16n8k16, BF16 inputs, F32 accumulation) takes x as A (16 rows, rows >= M zero) and 16 k-values of
 * the 8 weight rows as B. A block's 8 warps split K: warp w takes the k-groups w, w + 8, ... (a group is 16 bytes
 * of each weight row per lane: 64 FP8 or 32 BF16 elements over the 4 lanes of a row), and the 8 partial sums
 * are added in warp order at the end. A block covers 8 R rows (R n-tiles per warp share each x fragment).
 * A warp works in steps of U groups and loads the next step's weights (and FP8 block scales) before computing
 * the current one, the first step's before x is staged, so it never waits on memory with nothing in flight.
 * x is staged in shared memory whole when it fits GEMV_MMA_X_BUDGET, else in slabs of a multiple of 512 columns
 * (8 groups of either kind, so a warp meets the same groups in the same order whatever the slab count). Slabs
 * cost: every slab boundary is a barrier that drains the loads in flight (on the H100, 2,048-column slabs made
 * the 4096 x 16384 FP8 GEMV 30% slower than version 1 at one row), so only M x K too large to stage uses them.
 *
 * Batch invariance. Row m's result depends only on x[m] and w: not on M, R or the other rows (an MMA row does
 * not see the others). So a row gives the same bits in a batch of any size up to 16, which exact greedy
 * speculative decoding needs (a verification row equals the plain decode row).
 *
 * K order. The MMA sums 16 k-values per step in its own order; which physical k a fragment slot holds is ours to
 * choose, as long as A and B agree. Lane (g = lane / 4, q = lane % 4) loads the 16 contiguous bytes
 * [group + CH q, + CH) of weight row g (CH = 16 FP8 or 8 BF16 elements) and, for step s, gives the MMA the four
 * elements CH q + 4 s + 0..3 as its logical k = 2q, 2q+1, 2q+8, 2q+9 (FP8: elements 0, 2, 1, 3 of the four,
 * see below); its A fragment reads x at the same columns from shared memory (8 bytes per row per step). One 16-byte weight load feeds CH / 4 steps.
 *
 * Precision contract (docs/cuda.md): products of BF16 x and the exact weight values, summed by the MMA in F32
 * over a group (64 FP8 or 32 BF16 columns), each FP8 group's sum times its block scale, the groups of a warp
 * added in order, the 8 warps added in order, one rounding to y's dtype. FP8 codes become BF16 by moving bits
 * (Marlin's conversion): the code's exponent and mantissa go to the low four exponent bits and top three mantissa
 * bits of a BF16, the sign to its sign, which is the code's value times 2^-120 for normal and subnormal codes
 * alike (a subnormal code gives a subnormal BF16, which the MMA takes as it is; test_cuda_ops checks a weight
 * of nothing but subnormal codes); the E4M3 NaN code reads as 480 (no checkpoint holds one). Two codes take
 * 3-4 integer operations, against the hardware cvt's one conversion at 16 per clock per SM plus 2 (the bench's
 * "cvt" versions keep that path: code -> f16 exactly, its bits shifted right by 3 are a BF16 of the value times
 * 2^-112). One 32-bit word of codes gives codes 0 and 2 as one pair and 1 and 3 as the other, so x is staged
 * with each 4 columns in the order 0, 2, 1, 3 to match. x is staged times 2^64 (exact in BF16), so every product
 * and partial sum is the true one times 2^-56, far from F32's subnormal range, and the block scale times 2^56
 * undoes it: the same roundings as without the scaling.
 */
#ifndef GLM53_CUDA_GEMV_MMA_CUH
#define GLM53_CUDA_GEMV_MMA_CUH

#include "kernels/cuda/cuda_common.cuh"

enum {
    GEMV_MMA_THREADS = 256,
    GEMV_MMA_WARPS = 8,
    GEMV_MMA_MAX_M = 16,
    GEMV_MMA_X_BUDGET = 144 * 1024,   /* bytes of staged x at most (the H100 and H200 give a block 227 KiB) */
    GEMV_MMA_PAD = 8,                 /* BF16 elements after each staged x row (16 bytes), to spread the banks */
    GEMV_MMA_FP8_BLOCKS = 3,          /* blocks per multiprocessor of the FP8 streaming kernels under
                                         GLM53_CUDA_FP8_OCCUPANCY (2 fit their registers otherwise) */
};
constexpr float GEMV_MMA_X_SCALE = 18446744073709551616.0f;   /* 2^64 */
constexpr float GEMV_MMA_UNSCALE = 72057594037927936.0f;       /* 2^56 = 2^120 / 2^64 (codes placed by bits) */
constexpr float GEMV_MMA_UNSCALE_CVT = 281474976710656.0f;    /* 2^48 = 2^112 / 2^64 (codes through the cvt) */

/* Staged x rows: M, or 16 when M > 8 (rows 8..15 feed the A fragment's second half). */
__host__ __device__ inline int gemv_mma_x_rows(int M) { return M <= 8 ? M : 16; }

/* x columns staged at a time: all K when they fit GEMV_MMA_X_BUDGET, else the most multiples of 512 that do. */
static inline int gemv_mma_slab(int M, int K) {
    const int64_t row_bytes = 2 * (int64_t)gemv_mma_x_rows(M);
    if (row_bytes * (K + GEMV_MMA_PAD) <= GEMV_MMA_X_BUDGET) return K;
    return (int)((GEMV_MMA_X_BUDGET / row_bytes - GEMV_MMA_PAD) / 512 * 512);
}

/* Dynamic shared memory of one block: the x slab [rows, slab + PAD] BF16 and the warps' sums [8][R][16][8] F32. */
static inline size_t gemv_mma_smem(int M, int R, int slab) {
    return (size_t)gemv_mma_x_rows(M) * (slab + GEMV_MMA_PAD) * 2 + (size_t)GEMV_MMA_WARPS * R * 16 * 8 * 4;
}

/* Whether a weight [N, K] suits the tensor-core path: BF16, or FP8 whose scale blocks hold whole groups and
 * n-tiles; K a multiple of a group; 16-byte aligned. */
static inline bool gemv_mma_weight_fits(const weight_ref &w, int64_t K) {
    if ((uintptr_t)w.data % 16) return false;
    if (w.dtype == GLM53_BF16) return K % 32 == 0;
    if (w.dtype != GLM53_F8_E4M3 || K % 64) return false;
    return !w.scale || (w.block_cols % 64 == 0 && w.block_rows % 8 == 0);
}

/* Whether the tensor-core path applies to x [M, K] (BF16, the caller checks) times w: M <= 16, x 16-byte aligned. */
static inline bool gemv_mma_fits(const weight_ref &w, int64_t M, int64_t K, const void *x) {
    return M >= 1 && M <= GEMV_MMA_MAX_M && (uintptr_t)x % 16 == 0 && gemv_mma_weight_fits(w, K);
}

__device__ inline void gemv_mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Codes 0 and 2 (even) or 1 and 3 (odd) of four E4M3 codes as a BF16 pair, each value times 2^-120, by moving
 * bits: a code's exponent and mantissa land in the low four exponent bits and the top three mantissa bits of a
 * BF16, its sign on the sign (see the top of the file). */
__device__ inline uint32_t gemv_mma_fp8x4_to_bf16x2_odd(uint32_t codes) {
    return (codes & 0x80008000u) | ((codes & 0x7f007f00u) >> 4);
}
__device__ inline uint32_t gemv_mma_fp8x4_to_bf16x2_even(uint32_t codes) {
    return gemv_mma_fp8x4_to_bf16x2_odd(codes << 8);
}

/* Two E4M3 codes as a BF16 pair through the hardware cvt, each value times 2^-112 (see the top of the file). */
__device__ inline uint32_t gemv_mma_fp8x2_to_bf16x2(uint16_t pair) {
    __half2_raw h2 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pair, __NV_E4M3);
    uint32_t h = (uint32_t)h2.x | ((uint32_t)h2.y << 16);
    return ((h >> 3) & 0x0fff0fffu) | (h & 0x80008000u);
}

/* 16 bytes of weights nothing reads again soon: past L1, first out of L2. */
__device__ inline uint4 gemv_mma_load_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* What a lane loads of one n-tile: its weight row (the tile's first row + g, NULL past the weight's end: it
 * loads zeros) and the tile's FP8 block-scale row (NULL: scale 1; a tile's 8 rows share one, block_rows % 8 == 0). */
struct gemv_mma_lane_rows {
    const uint8_t *row;
    const float   *scale_row;
    int            block_cols;
};

template <bool FP8>
__device__ inline gemv_mma_lane_rows gemv_mma_rows_of(const weight_ref &w, int64_t tile_row, int64_t tile_end, int K,
                                                      int g) {
    const int64_t n = tile_row + g;
    gemv_mma_lane_rows t;
    t.row = n < tile_end ? (const uint8_t *)w.data + n * (int64_t)K * (FP8 ? 1 : 2) : nullptr;
    t.scale_row =
        FP8 && w.scale && tile_row < tile_end ? w.scale + (tile_row / w.block_rows) * w.scale_stride : nullptr;
    t.block_cols = w.block_cols;
    return t;
}

/* The lane's 16 bytes of k-group kg of its row (CH elements from column kg * GROUP + CH q), and the FP8 block scale
 * of that group: what a step reads, whether into registers (gemv_mma_load) or elsewhere (the bench's rings). */
template <bool FP8>
__device__ inline const uint8_t *gemv_mma_piece(const gemv_mma_lane_rows &t, int64_t kg, int q) {
    constexpr int CH = FP8 ? 16 : 8, GROUP = 4 * CH;
    return t.row + (kg * GROUP + CH * q) * (FP8 ? 1 : 2);
}
__device__ inline const float *gemv_mma_scale_of(const gemv_mma_lane_rows &t, int64_t kg) {
    return t.scale_row + kg * 64 / t.block_cols;   /* FP8 groups are 64 columns */
}

/* One step's weights in registers: U k-groups of R n-tiles (16 bytes a lane each) and their FP8 block scales. */
template <bool FP8, int R, int U>
struct gemv_mma_step {
    uint4 w[U][R];
    float scale[U][R];
};

/* Loads the step of k-groups kg0, kg0 + 8, ... (U of them; those >= groups read as zero) of the R n-tiles; kg_base
 * is the first group of the staged slab. */
template <bool FP8, int R, int U>
__device__ inline void gemv_mma_load(gemv_mma_step<FP8, R, U> &s, const gemv_mma_lane_rows (&t)[R], int kg0,
                                     int groups, int kg_base, int q) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int kg = kg0 + GEMV_MMA_WARPS * u;
#pragma unroll
        for (int r = 0; r < R; r++) {
            s.w[u][r] = kg < groups && t[r].row ? gemv_mma_load_stream(gemv_mma_piece<FP8>(t[r], kg_base + kg, q))
                                                : make_uint4(0, 0, 0, 0);
            s.scale[u][r] = FP8 && t[r].scale_row && kg < groups ? *gemv_mma_scale_of(t[r], kg_base + kg) : 1.0f;
        }
    }
}

/* 8 consecutive BF16 x values as an FP8 weight's MMA reads them: times 2^64, and (bit-placed codes, !HW_CVT) each
 * 4 in the order 0, 2, 1, 3. gemv_mma_stage_x and gemm_mma.cuh's staging share it. */
template <bool HW_CVT>
__device__ inline uint4 gemv_mma_x8_for_fp8(uint4 v) {
    float f[8];
    cuda_bf16x8_to_float(v, f);
    uint32_t o[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int a = HW_CVT ? 2 * j : (j & ~1) * 2 + (j & 1), b = HW_CVT ? a + 1 : a + 2;
        __nv_bfloat162 h = __floats2bfloat162_rn(f[a] * GEMV_MMA_X_SCALE, f[b] * GEMV_MMA_X_SCALE);
        o[j] = *reinterpret_cast<uint32_t *>(&h);
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* Stages x[0..M, k0 .. k0 + slab) (rows M..MS zero) into xs [MS, ld] BF16, times 2^64 for FP8 weights (with the
 * bit-placed codes each 4 columns in the order 0, 2, 1, 3). Every thread of the block takes part; no barrier. */
template <bool FP8, bool HW_CVT>
__device__ inline void gemv_mma_stage_x(__nv_bfloat16 *xs, int ld, const __nv_bfloat16 *__restrict__ x, int M, int MS,
                                        int K, int k0, int slab) {
    for (int i = threadIdx.x; i < MS * slab / 8; i += blockDim.x) {
        int m = i / (slab / 8), c = (i % (slab / 8)) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m < M) {
            v = *reinterpret_cast<const uint4 *>(x + (size_t)m * K + k0 + c);
            if (FP8) v = gemv_mma_x8_for_fp8<HW_CVT>(v);
        }
        *reinterpret_cast<uint4 *>(xs + (size_t)m * ld + c) = v;
    }
}

/* The MMAs of one loaded step: acc[r] += x[x_row0 .. + M] (staged, rows past M zero) times the step's groups of
 * n-tile r, each FP8 group's sum times its block scale. */
template <bool FP8, int R, int U, bool HW_CVT>
__device__ inline void gemv_mma_compute(float (&acc)[R][4], const gemv_mma_step<FP8, R, U> &p,
                                        const __nv_bfloat16 *xs, int ld, int x_row0, int M, int kg0, int groups, int g,
                                        int q) {
    constexpr int CH = FP8 ? 16 : 8, GROUP = 4 * CH, STEPS = CH / 4;
    const __nv_bfloat16 *xa_row = xs + (size_t)(x_row0 + g) * ld, *xb_row = xs + (size_t)(x_row0 + g + 8) * ld;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int kg = kg0 + GEMV_MMA_WARPS * u;
        if (kg >= groups) break;
        const int col = kg * GROUP + CH * q;   /* in the slab */
        uint2 xa[STEPS], xb[STEPS];            /* x rows g and g + 8 at columns col + 4 s .. + 4 */
#pragma unroll
        for (int st = 0; st < STEPS; st++) {
            xa[st] = g < M ? *reinterpret_cast<const uint2 *>(xa_row + col + 4 * st) : make_uint2(0, 0);
            xb[st] = g + 8 < M ? *reinterpret_cast<const uint2 *>(xb_row + col + 4 * st) : make_uint2(0, 0);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint32_t words[4] = {p.w[u][r].x, p.w[u][r].y, p.w[u][r].z, p.w[u][r].w};
            uint32_t bw[2 * STEPS];   /* this lane's CH weights as BF16 pairs */
            if constexpr (FP8 && HW_CVT) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    bw[2 * j] = gemv_mma_fp8x2_to_bf16x2((uint16_t)(words[j] & 0xffffu));
                    bw[2 * j + 1] = gemv_mma_fp8x2_to_bf16x2((uint16_t)(words[j] >> 16));
                }
            } else if constexpr (FP8) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    bw[2 * j] = gemv_mma_fp8x4_to_bf16x2_even(words[j]);
                    bw[2 * j + 1] = gemv_mma_fp8x4_to_bf16x2_odd(words[j]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) bw[j] = words[j];
            }
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int st = 0; st < STEPS; st++)
                gemv_mma_16816(d, xa[st].x, xb[st].x, xa[st].y, xb[st].y, bw[2 * st], bw[2 * st + 1]);
            if constexpr (FP8) {
                const float s = p.scale[u][r] * (HW_CVT ? GEMV_MMA_UNSCALE_CVT : GEMV_MMA_UNSCALE);
#pragma unroll
                for (int j = 0; j < 4; j++) acc[r][j] += d[j] * s;
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) acc[r][j] += d[j];
            }
        }
    }
}

/* The 8 warps' partial sums added in warp order into sums [R][16][8] (warp 0's part of the [8][R][16][8] area
 * `sums` points at): the C fragment's acc[r][0..1] are row g, tile columns 2q and 2q + 1, acc[r][2..3] row g + 8.
 * Two barriers; the result is valid for every thread after the second. */
template <int R>
__device__ inline void gemv_mma_reduce(float *sums, const float (&acc)[R][4], int warp, int g, int q) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < 4; j++) sums[((warp * R + r) * 16 + g + (j >= 2 ? 8 : 0)) * 8 + 2 * q + (j & 1)] = acc[r][j];
    __syncthreads();
    for (int i = threadIdx.x; i < R * 16 * 8; i += blockDim.x) {
        float s = sums[i];
        for (int v = 1; v < GEMV_MMA_WARPS; v++) s += sums[v * R * 16 * 8 + i];
        sums[i] = s;
    }
    __syncthreads();
}

/* The block's part of the product: for n-tile r (rows tile_row[r] .. + 8 of weight tile_w[r], rows past
 * tile_end[r] read as zero), sums[r][m][c] = x[m] . w_r[tile_row[r] + c] for m < 16 (rows >= M are zero), in F32,
 * the 8 warps' partial sums added in warp order. `smem` is the block's dynamic shared memory
 * (gemv_mma_smem(M, R, slab_cols) bytes); the sums are left in it (returned), valid for every thread after the
 * final barrier. Every thread of the block must call it. */
template <bool FP8, int R, int U, bool HW_CVT = false>
__device__ inline const float *gemv_mma_block(uint8_t *smem, const weight_ref (&tile_w)[R],
                                              const int64_t (&tile_row)[R], const int64_t (&tile_end)[R],
                                              const __nv_bfloat16 *__restrict__ x, int M, int K, int slab_cols) {
    constexpr int GROUP = FP8 ? 64 : 32;   /* elements of a weight row per group */
    const int MS = gemv_mma_x_rows(M), ld = slab_cols + GEMV_MMA_PAD;
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(smem);
    float *sums = reinterpret_cast<float *>(smem + (size_t)MS * ld * 2);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    gemv_mma_lane_rows rows[R];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = gemv_mma_rows_of<FP8>(tile_w[r], tile_row[r], tile_end[r], K, g);

    float acc[R][4];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;

    /* Each step's weights are loaded one step ahead of their use: the first step's while x is staged, each next
     * step's while the current one is computed. */
    gemv_mma_step<FP8, R, U> next;
    for (int k_slab = 0; k_slab < K; k_slab += slab_cols) {
        const int slab = min(slab_cols, K - k_slab), groups = slab / GROUP, kg_base = k_slab / GROUP;
        gemv_mma_load(next, rows, warp, groups, kg_base, q);
        if (k_slab) __syncthreads();   /* every warp is done with the previous slab */
        gemv_mma_stage_x<FP8, HW_CVT>(xs, ld, x, M, MS, K, k_slab, slab);
        __syncthreads();
        for (int kg0 = warp; kg0 < groups; kg0 += GEMV_MMA_WARPS * U) {
            const gemv_mma_step<FP8, R, U> p = next;
            if (kg0 + GEMV_MMA_WARPS * U < groups)
                gemv_mma_load(next, rows, kg0 + GEMV_MMA_WARPS * U, groups, kg_base, q);
            gemv_mma_compute<FP8, R, U, HW_CVT>(acc, p, xs, ld, 0, M, kg0, groups, g, q);
        }
    }
    gemv_mma_reduce<R>(sums, acc, warp, g, q);
    return sums;   /* [R][16][8] */
}

/* ------------------------------------------------------------------------------------------------------------
 * The streaming form: a block computes several consecutive tiles (8 R weight rows each) with x staged once, and
 * each warp's loads run on across the tiles: the first step of the next tile is in flight while the current
 * tile's sums are reduced and stored. The one-tile-per-block kernel pays, per 16 rows, the staging of x, a load
 * round trip with nothing in flight, the reduction's barriers with nothing in flight, and a block launch; at
 * one row that was 0.33-0.58 of the H200's bandwidth for the decode projections (docs/performance.md). A tile's
 * arithmetic is gemv_mma_block's exactly (the same groups per warp in the same order, the same reduction): the
 * same bits. Needs x whole in shared memory (gemv_mma_slab(M, K) == K).
 *
 * What a tile is comes from the caller's `Tiles` functor:
 *   rows_before_wait: a static constexpr bool, true when rows() reads nothing earlier kernels write (then the
 *     first tile's first loads go out before the programmatic-launch wait), false when it does (routed ids);
 *   rows(t, lane_rows[R], g) -> int x_row0: fills the lane's rows of tile t and returns the first staged x row
 *     the tile multiplies (the MMA's rows are x_row0 .. x_row0 + M);
 *   store(t, sums [R][16][8]) : the epilogue, called by every thread after the tile's reduction.
 * Shared memory: the staged x rows [x_rows, K + PAD] BF16, then two [8][R][16][8] F32 areas for the sums (tile
 * parity picks one, so the next tile's partial sums never overwrite sums an epilogue may still read).
 */
static inline size_t gemv_mma_stream_smem(int x_rows, int R, int K) {
    return (size_t)x_rows * (K + GEMV_MMA_PAD) * 2 + 2 * (size_t)GEMV_MMA_WARPS * R * 16 * 8 * 4;
}

/* The streaming kernels' grid: as many blocks as the device holds at once (or fewer, with fewer tiles), each
 * taking an equal run of per_block consecutive tiles. */
static inline glm53_status gemv_mma_stream_grid(cuda_backend *cb, const void *kernel, size_t smem, int tiles,
                                                unsigned *blocks, int *per_block) {
    int per_sm = 0;
    GLM53_TRY(cuda_blocks_per_sm(cb, kernel, GEMV_MMA_THREADS, smem, &per_sm));
    const int most = per_sm * cb->sm_count;
    *per_block = (tiles + most - 1) / most;
    *blocks = (unsigned)((tiles + *per_block - 1) / *per_block);
    return GLM53_OK;
}

/* Tiles [t_begin, t_end) of the product, x [x_rows, K] staged whole. Every thread of the block calls it. The
 * first step's weights are requested before the wait for the previous kernel: weights are never written. */
template <bool FP8, int R, int U, class Tiles>
__device__ inline void gemv_mma_stream(uint8_t *smem, const Tiles &tiles, int t_begin, int t_end,
                                       const __nv_bfloat16 *__restrict__ x, int x_rows, int M, int K) {
    constexpr int GROUP = FP8 ? 64 : 32;
    const int ld = K + GEMV_MMA_PAD, groups = K / GROUP;
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(smem);
    float *sums = reinterpret_cast<float *>(smem + (size_t)x_rows * ld * 2);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    cuda_pdl_launch_dependents();

    gemv_mma_lane_rows cur[R], nxt[R];
    int x_row = 0, nxt_x_row = 0;
    gemv_mma_step<FP8, R, U> next;
    if constexpr (!Tiles::rows_before_wait) cuda_pdl_wait();
    if (t_begin < t_end) {
        x_row = tiles.rows(t_begin, cur, g);
        gemv_mma_load(next, cur, warp, groups, 0, q);
    }
    if constexpr (Tiles::rows_before_wait) cuda_pdl_wait();
    if (t_begin >= t_end) return;   /* the whole block */
    gemv_mma_stage_x<FP8, false>(xs, ld, x, x_rows, x_rows, K, 0, K);
    __syncthreads();
    for (int t = t_begin, parity = 0; t < t_end; t++, parity ^= 1) {
        const bool more = t + 1 < t_end;
        if (more) nxt_x_row = tiles.rows(t + 1, nxt, g);
        float acc[R][4];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
        for (int kg0 = warp; kg0 < groups; kg0 += GEMV_MMA_WARPS * U) {
            const gemv_mma_step<FP8, R, U> p = next;
            if (kg0 + GEMV_MMA_WARPS * U < groups) gemv_mma_load(next, cur, kg0 + GEMV_MMA_WARPS * U, groups, 0, q);
            else if (more) gemv_mma_load(next, nxt, warp, groups, 0, q);   /* the next tile's first step */
            gemv_mma_compute<FP8, R, U, false>(acc, p, xs, ld, x_row, M, kg0, groups, g, q);
        }
        float *s = sums + parity * GEMV_MMA_WARPS * R * 16 * 8;
        gemv_mma_reduce<R>(s, acc, warp, g, q);
        tiles.store(t, s);
#pragma unroll
        for (int r = 0; r < R; r++) cur[r] = nxt[r];
        x_row = nxt_x_row;
    }
}

/* The tiles of a matmul over several weights that read the same x (a segment per weight; y_s[M, N_s] = x w_s^T):
 * segment s holds tiles first_tile .. of 8 R rows each. */
enum { GEMV_MMA_MAX_SEGMENTS = 8 };
struct gemv_mma_segment {
    weight_ref w;
    act_out    y;            /* [M, n_rows] */
    int        n_rows;
    int        first_tile;
};
struct gemv_mma_segments {
    gemv_mma_segment seg[GEMV_MMA_MAX_SEGMENTS];
    int              n, tiles;
};

template <bool FP8, int R>
struct gemv_mma_segment_tiles {
    static constexpr bool rows_before_wait = true;   /* the segments are kernel parameters */
    const gemv_mma_segments &segs;
    int M, K;
    __device__ int segment_of(int t) const {
        int s = 0;
        while (s + 1 < segs.n && segs.seg[s + 1].first_tile <= t) s++;
        return s;
    }
    __device__ int rows(int t, gemv_mma_lane_rows (&lane_rows)[R], int g) const {
        const gemv_mma_segment &sg = segs.seg[segment_of(t)];
        const int64_t row0 = (int64_t)(t - sg.first_tile) * 8 * R;
#pragma unroll
        for (int r = 0; r < R; r++) lane_rows[r] = gemv_mma_rows_of<FP8>(sg.w, row0 + 8 * r, sg.n_rows, K, g);
        return 0;
    }
    __device__ void store(int t, const float *sums) const {
        const gemv_mma_segment &sg = segs.seg[segment_of(t)];
        const int64_t row0 = (int64_t)(t - sg.first_tile) * 8 * R;
        for (int i = threadIdx.x; i < R * 16 * 8; i += blockDim.x) {
            const int r = i / 128, m = (i / 8) % 16, c = i % 8;
            const int64_t n = row0 + 8 * r + c;
            if (m < M && n < sg.n_rows) sg.y.store((int64_t)m * sg.n_rows + n, sums[i]);
        }
    }
};

/* y_s = x w_s^T for every segment: grid ceil(tiles / tiles_per_block) blocks of GEMV_MMA_THREADS,
 * gemv_mma_stream_smem(gemv_mma_x_rows(M), R, K) bytes. */
template <bool FP8, int R, int U>
__device__ inline void gemv_mma_stream_segments(const gemv_mma_segments &segs, const __nv_bfloat16 *x, int M, int K,
                                                int tiles_per_block) {
    extern __shared__ __align__(16) uint8_t gemv_mma_smem_bytes[];
    const int t_begin = blockIdx.x * tiles_per_block, t_end = min(t_begin + tiles_per_block, segs.tiles);
    const gemv_mma_segment_tiles<FP8, R> tiles{segs, M, K};
    gemv_mma_stream<FP8, R, U>(gemv_mma_smem_bytes, tiles, t_begin, t_end, x, M, M, K);
}
template <bool FP8, int R, int U>
__global__ void __launch_bounds__(GEMV_MMA_THREADS)
gemv_mma_stream_kernel(const __grid_constant__ gemv_mma_segments segs, const __nv_bfloat16 *x, int M, int K,
                       int tiles_per_block) {
    gemv_mma_stream_segments<FP8, R, U>(segs, x, M, K, tiles_per_block);
}
/* The same with registers budgeted for GEMV_MMA_FP8_BLOCKS blocks a multiprocessor (GLM53_CUDA_FP8_OCCUPANCY, FP8
 * weights): the same instructions and bits, fewer registers, a few spills. */
template <bool FP8, int R, int U>
__global__ void __launch_bounds__(GEMV_MMA_THREADS, GEMV_MMA_FP8_BLOCKS)
gemv_mma_stream_kernel_occupancy(const __grid_constant__ gemv_mma_segments segs, const __nv_bfloat16 *x, int M, int K,
                                 int tiles_per_block) {
    gemv_mma_stream_segments<FP8, R, U>(segs, x, M, K, tiles_per_block);
}

/* y[M, N] = x[M, K] * w[N, K]^T. Grid: ceil(N / (8 R)) blocks of GEMV_MMA_THREADS, gemv_mma_smem(M, R, slab)
 * bytes of dynamic shared memory, slab = gemv_mma_slab(M, K). FP8: w is F8_E4M3 (with or without a block scale),
 * else BF16. U: k-groups per step (a lane has 2 U R 16-byte loads in flight at most). */
template <bool FP8, int R, int U, bool HW_CVT = false>
__global__ void __launch_bounds__(GEMV_MMA_THREADS)
gemv_mma_kernel(act_out y, const __nv_bfloat16 *__restrict__ x, weight_ref w, int M, int N, int K, int slab_cols) {
    extern __shared__ __align__(16) uint8_t gemv_mma_smem_bytes[];
    weight_ref tile_w[R];
    int64_t tile_row[R], tile_end[R];
#pragma unroll
    for (int r = 0; r < R; r++) tile_w[r] = w, tile_row[r] = (int64_t)blockIdx.x * 8 * R + 8 * r, tile_end[r] = N;
    const float *sums = gemv_mma_block<FP8, R, U, HW_CVT>(gemv_mma_smem_bytes, tile_w, tile_row, tile_end, x, M, K,
                                                          slab_cols);
    for (int i = threadIdx.x; i < R * 16 * 8; i += blockDim.x) {
        const int r = i / 128, m = (i / 8) % 16, c = i % 8;
        const int64_t n = tile_row[r] + c;
        if (m < M && n < N) y.store((int64_t)m * N + n, sums[i]);
    }
}

#endif /* GLM53_CUDA_GEMV_MMA_CUH */
