/*
 * gemm_wgmma.cuh - the grouped prefill experts' matmul on Hopper's warpgroup MMA (wgmma, sm_90a): a block tile of
 * 128 (or 64) activation rows times 128 weight rows, K in steps of 64, FP8 E4M3 weights with 128 x 128 block
 * scales. Private to the CUDA backend; moe.cu's grouped experts use it where every expert fits
 * (gemm_wgmma_weight_fits), and gemm_mma.cuh's mma.sync tile elsewhere.
 *
 * Why: gemm_mma.cuh's tile (64 x 128, mma.sync, each FP8 code converted in registers by both warps that read it)
 * ran the grouped experts of an 8,192-token prefill at about 85 TFLOP/s on the H100 (0.11 of the BF16 floor), and
 * a cp.async ring for its weights changed nothing: the time goes on instruction issue, not on waiting for memory.
 * wgmma reads both operands from shared memory itself (no fragment loads), runs asynchronously while the threads
 * stage the next step, and its m64n128k16 shape does 64 times the work of an m16n8k16 per instruction. Measured
 * (H100, 2026-12-07): gate + up of that prefill 127.3 -> 51.2 ms, down 62.2 -> 27.7 ms, about 215 TFLOP/s, with
 * one block of 8 warps a multiprocessor (193 registers) and a third of the issue slots busy (Nsight Compute).
 *
 * Three forms of the block (gemm_wgmma_block<SKIP, FOLDED, BM>; gemm_wg_shape gives each one's threads, stages
 * and shared memory):
 *   - promoted (FOLDED false, BM 128; GLM53_CUDA_GROUPED_FOLDED=0): 256 threads, 4 stages (129 KB), one block a
 *     multiprocessor. The codes are converted to BF16 exactly; every 128 k-values (one scale block) the warpgroup
 *     waits for its MMAs and adds the block's F32 sums times the block scale of each weight half into running sums
 *     (the scale "promotion" of DeepSeek-style FP8 GEMMs). That drain is 0.71 ms of the 3.73 ms bench_grouped
 *     measures for a 4,096-row chunk's gate + up (H100), and the second array of 64 sums takes the registers
 *     (193) that keep the block alone on its multiprocessor, so nothing covers its waits.
 *   - folded (FOLDED true, BM 128; GLM53_CUDA_GROUPED_FOLDED=1): the conversion multiplies each code by its rows'
 *     block scale of the step's k-block and rounds to BF16 (the dequantised weight of linear.cu's cuBLAS fallback,
 *     bit for bit), so the wgmma accumulates straight through all of K: no wait and no promotion per 128 k-values,
 *     no second array of sums. 3 stages (105 KB) and at most 128 registers (__launch_bounds__(256, 2)): two blocks share a
 *     multiprocessor and each runs while the other waits at a barrier.
 *   - folded 64 (FOLDED true, BM 64): one warpgroup of 128 threads computes 64 rows; 3 stages, 81 KB, two blocks a
 *     multiprocessor. For chunks whose experts hold few rows each (a chunked prefill of 2,048 tokens gives about
 *     57 rows an expert at 288 experts, top 8), where a 128-row tile would be half empty (moe.cu chooses).
 *
 * Block: BM / 64 warpgroups; warpgroup w computes tile rows 64 w .. 64 w + 63 against all 128 weight rows (wgmma
 * m64n128k16, BF16 x BF16 -> F32, both operands from shared memory). Per K step of 64:
 *   - cp.async brings x [BM rows][64] BF16 (gathered rows: row r of the tile is x + x_row[r] * ldx; a negative
 *     x_row zero-fills) and the weights' codes [128 rows][64] FP8 into stage s % STAGES, STAGES - 1 steps ahead;
 *   - each thread converts the codes it copied (512 / threads 16-byte pieces) to BF16 into the converted buffer of
 *     the step (two, alternating): exactly (every E4M3 value is a BF16 value; gemm_wg_fp8x4_to_bf16x4), or, folded,
 *     times the block scale and rounded (gemm_wg_dequantize_piece);
 *   - x and the converted weights sit in the 128-byte swizzled K-major layout wgmma reads without bank conflicts
 *     (16-byte piece c of row r at r * 128 + ((c ^ (r % 8)) * 16), 1024-byte aligned tiles);
 *   - the four k16 MMAs of the step are issued; they run while the threads wait for and convert the next step.
 * Two barriers a step: one before a stage is refilled (every warpgroup is past the MMAs that read it), one before
 * the next step's MMAs (every thread's copies and conversions are visible; fence.proxy.async makes the generic
 * proxy's shared-memory writes visible to the MMA's async proxy).
 *
 * Precision contracts. Promoted: products of BF16 x and the exact weight values summed in F32 by the tensor cores
 * over a scale block of 128 k-values (the order within it is the hardware's), times the block scale, blocks added
 * in K order, F32 to the caller's epilogue. Folded (either BM): each weight is round-to-nearest-even BF16 of (code
 * value x block scale) in F32, the bits linear.cu's dequantise gives the cuBLAS fallback ("dequantise to BF16, then
 * a BF16 GEMM with F32 accumulation"); products with BF16 x summed in F32 by the tensor cores over all of K (the
 * hardware's order), F32 to the epilogue. The 128- and 64-row forms issue the same MMAs for a row in the same
 * order, so they give a row the same bits. Either way a row's result depends only on that x row and the weights (a
 * wgmma row sees no other row): batch invariant within a form, the same as gemm_mma.cuh's and the other form's up
 * to rounding (F32 sums; folded: each weight's BF16 rounding, a relative 2^-9 at most), not in bits.
 * Needs K % 128 == 0, weight halves starting at multiples of 64 rows (so a half's rows share one scale-block row),
 * 128 x 128 scale blocks, 16-byte aligned rows.
 */
#ifndef GLM53_CUDA_GEMM_WGMMA_CUH
#define GLM53_CUDA_GEMM_WGMMA_CUH

#include "kernels/cuda/gemm_mma.cuh"   /* gemm_mma_tile */

enum {
    GEMM_WG_THREADS = 256,       /* the promoted and folded 128-row forms */
    GEMM_WG_BM = 128,            /* activation rows of a block tile: two warpgroups of 64 (the folded 64: one) */
    GEMM_WG_BN = 128,            /* weight rows: two halves of 64 (gemm_mma_tile's w[0], w[1]) */
    GEMM_WG_BK = 64,             /* k-values per step: one 128-byte swizzled row of BF16 */
    GEMM_WG_STAGES = 4,          /* cp.async stages of x and codes (promoted; folded: 3) */
    GEMM_WG_C_LD = 128 + 4,      /* result row, floats */
};

constexpr size_t GEMM_WG_X_BYTES = (size_t)GEMM_WG_BM * GEMM_WG_BK * 2;    /* 16 KB: x [128][64] BF16, swizzled */
constexpr size_t GEMM_WG_WB_BYTES = (size_t)GEMM_WG_BN * GEMM_WG_BK * 2;   /* 16 KB: weights [128][64] BF16, swizzled */
constexpr size_t GEMM_WG_W8_BYTES = (size_t)GEMM_WG_BN * GEMM_WG_BK;       /* 8 KB: codes [128][64] as copied */

/* A form of gemm_wgmma_block: threads (a warpgroup of 128 a 64 rows), stages, the 16-byte pieces of codes a thread
 * copies and converts a step, and dynamic shared memory: x stages [BM][64] BF16, two converted buffers, code stages,
 * and 1024 bytes to align the base. The result tile [BM][C_LD] F32 reuses the front. Promoted: 129 KB; folded:
 * 105 KB; folded 64: 81 KB. */
template <bool FOLDED, int BM>
struct gemm_wg_shape {
    static_assert(BM == GEMM_WG_BM || (BM == 64 && FOLDED), "the 64-row tile is folded");
    static constexpr int THREADS = 2 * BM;
    static constexpr int STAGES = FOLDED ? 3 : GEMM_WG_STAGES;
    static constexpr int PIECES = GEMM_WG_BN * GEMM_WG_BK / 16 / THREADS;   /* 2, or 4 at 64 rows */
    static constexpr size_t X_BYTES = (size_t)BM * GEMM_WG_BK * 2;
    static constexpr size_t SMEM = STAGES * (X_BYTES + GEMM_WG_W8_BYTES) + 2 * GEMM_WG_WB_BYTES + 1024;
    static_assert((size_t)BM * GEMM_WG_C_LD * 4 <= SMEM - 1024, "the result tile reuses the stages");
};
constexpr size_t GEMM_WG_SMEM = gemm_wg_shape<false, GEMM_WG_BM>::SMEM;   /* the promoted form's */

/* Whether gemm_wgmma_block takes weight w with K columns (moe.cu checks every expert's three). */
static inline bool gemm_wgmma_weight_fits(const weight_ref &w, int64_t K) {
    return w.dtype == GLM53_F8_E4M3 && w.scale && w.block_rows == 128 && w.block_cols == 128 && K % 128 == 0 &&
           (uintptr_t)w.data % 16 == 0;
}

/* Byte offset of 16-byte piece c of row r in a 128-byte swizzled tile (the layout of wgmma's 128B swizzle mode,
 * which is also TMA's CU_TENSOR_MAP_SWIZZLE_128B). */
__device__ inline uint32_t gemm_wg_swizzle(int r, int c) { return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4)); }

/* wgmma's shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle: start address >> 4 (bits 0-13),
 * leading byte offset 16 >> 4 (unused by this layout), stride byte offset 1024 >> 4 (8 rows of 128 bytes), swizzle
 * mode 1 = 128 bytes (bits 62-63). A k16 step within the 64-wide row adds 32 bytes (2) to the start address. */
__device__ inline uint64_t gemm_wg_desc(const void *tile) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(tile);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

__device__ inline void gemm_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ inline void gemm_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ inline void gemm_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
/* Shared-memory writes of this thread (generic proxy) made visible to wgmma's reads (async proxy). */
__device__ inline void gemm_wg_fence_proxy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* Keeps the compiler from moving accesses of d across a wgmma boundary (the MMA writes it asynchronously). */
__device__ inline void gemm_wg_fence_operand(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d [64 rows of the warpgroup][128 weight rows] (+)= A (64 x 16, K-major BF16) . B (128 x 16, K-major BF16)^T;
 * accumulate 0: d = A . B^T. Thread layout of d: warp v of the warpgroup holds rows 16 v .., lane (g = lane / 4,
 * q = lane % 4): d[4 j + e] is row 16 v + g + 8 (e / 2), column 8 j + 2 q + e % 2 (mma.sync's C fragment per n8). */
__device__ inline void gemm_wg_mma(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "r"(accumulate));
}

/* Four E4M3 codes (code i in byte i) as two BF16 pairs in code order (lo: codes 0, 1), exactly (every E4M3 value
 * is a BF16 value): E4M3 -> F16 pairs -> F32 -> BF16 pairs. A bit placement with one BF16 multiply instead (integer
 * and BF16 ops only, exact too) measured slower on the H100 (2026-12-07: gate + up of an 8,192-token prefill 51.2 ->
 * 54.5 ms): the conversions are not what holds this kernel back. */
__device__ inline void gemm_wg_fp8x4_to_bf16x4(uint32_t codes, uint32_t &lo, uint32_t &hi) {
    uint32_t out[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(codes >> (16 * j)), __NV_E4M3);
        const __nv_bfloat162 b = __floats2bfloat162_rn(__half2float(__ushort_as_half(h.x)), __half2float(__ushort_as_half(h.y)));
        out[j] = *reinterpret_cast<const uint32_t *>(&b);
    }
    lo = out[0];
    hi = out[1];
}

/* Piece i of a step's codes (row i / 4, codes 16 (i % 4) .. + 15, 16 bytes at codes + 16 i) converted to BF16 into
 * the row's 16-byte pieces 2 (i % 4) and 2 (i % 4) + 1 of the swizzled buffer. */
__device__ inline void gemm_wg_convert_piece(uint8_t *buffer, const uint8_t *codes, int i) {
    const int r = i / 4, c = i % 4;
    const uint4 v = *reinterpret_cast<const uint4 *>(codes + i * 16);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[8];
#pragma unroll
    for (int e = 0; e < 4; e++) gemm_wg_fp8x4_to_bf16x4(words[e], o[2 * e], o[2 * e + 1]);
    *reinterpret_cast<uint4 *>(buffer + gemm_wg_swizzle(r, 2 * c)) = make_uint4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<uint4 *>(buffer + gemm_wg_swizzle(r, 2 * c + 1)) = make_uint4(o[4], o[5], o[6], o[7]);
}


/* Piece i of a step's codes, as gemm_wg_convert_piece places it, each code dequantised with its rows' block scale:
 * the code's exact value (E4M3 -> F16 pairs -> F32) times `scale` in F32, rounded to nearest even BF16 by
 * cuda_float8_to_bf16x8 -- linear.cu's dequantize_fp8x16_kernel computes cuda_fp8_e4m3_to_float(code) * scale and
 * rounds with the same function, so the converted buffer holds the bits of the cuBLAS fallback's dequantised
 * weight. (The pairwise conversion gives cuda_fp8_e4m3_to_float's values with half the conversions.) */
__device__ inline void gemm_wg_dequantize_piece(uint8_t *buffer, const uint8_t *codes, int i, float scale) {
    const int r = i / 4, c = i % 4;
    const uint4 v = *reinterpret_cast<const uint4 *>(codes + i * 16);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    float value[2][8];   /* codes 0-7, 8-15 of the piece: the row's BF16 pieces 2 c and 2 c + 1 */
#pragma unroll
    for (int p = 0; p < 8; p++) {   /* codes 2 p, 2 p + 1 */
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(words[p / 2] >> (16 * (p % 2))), __NV_E4M3);
        value[p / 4][2 * (p % 4)] = __fmul_rn(__half2float(__ushort_as_half(h.x)), scale);
        value[p / 4][2 * (p % 4) + 1] = __fmul_rn(__half2float(__ushort_as_half(h.y)), scale);
    }
    *reinterpret_cast<uint4 *>(buffer + gemm_wg_swizzle(r, 2 * c)) = cuda_float8_to_bf16x8(value[0]);
    *reinterpret_cast<uint4 *>(buffer + gemm_wg_swizzle(r, 2 * c + 1)) = cuda_float8_to_bf16x8(value[1]);
}

/* The block scales of weight half j's rows, one per k-block (NULL: the half lies wholly past its end). */
__device__ inline const float *gemm_wg_half_scales(const gemm_mma_tile &t, int j) {
    return t.n[j] < t.end[j] ? t.w[j].scale + (t.n[j] / 128) * t.w[j].scale_stride : nullptr;
}

/* A warpgroup's sums into the result tile [BM][GEMM_WG_C_LD]: its warp `warp` (0-3) holds tile rows
 * row_base + 16 warp .. (the C fragment layout of gemm_wg_mma). */
__device__ inline void gemm_wg_store_sums(float *c, const float (&sum)[64], int row_base, int warp, int lane) {
    const int g = lane / 4, q = lane % 4, row0 = row_base + warp * 16 + g;
#pragma unroll
    for (int i = 0; i < 64; i++) c[(row0 + 8 * ((i % 4) / 2)) * GEMM_WG_C_LD + 8 * (i / 4) + 2 * q + (i % 2)] = sum[i];
}

/* Stages kernels/cuda/bench/grouped.cu leaves out, one at a time, to find where the block's time goes (the
 * results are then wrong; the engine always runs GEMM_WG_ALL). */
enum {
    GEMM_WG_ALL = 0,
    GEMM_WG_SKIP_X_COPY = 1,     /* no cp.async of x */
    GEMM_WG_SKIP_W_COPY = 2,     /* no cp.async of the codes */
    GEMM_WG_SKIP_CONVERT = 4,    /* no conversion of the codes (the buffers keep what they held) */
    GEMM_WG_SKIP_MMA = 8,        /* no wgmma */
    GEMM_WG_SKIP_PROMOTE = 16,   /* no wait for a k-block's MMAs and no promotion (the promoted form's) */
};

/* The block tile: c[r][col] = x row r . weight row col (col < 64: w[0] row n[0] + col, else w[1] row n[1] + col -
 * 64), F32, left in `smem` as [BM][GEMM_WG_C_LD] and returned, valid for every thread after the final barrier.
 * FOLDED and BM pick the form (the file's head). x_row[j] is the x row (or -1: zeros) of tile row threadIdx.x / 8 +
 * (BM / 4) j, whose 16-byte piece threadIdx.x % 8 of every step this thread copies. Every thread of the block must
 * call it; blockDim.x == gemm_wg_shape<FOLDED, BM>::THREADS. */
template <int SKIP = GEMM_WG_ALL, bool FOLDED = false, int BM = GEMM_WG_BM>
__device__ inline const float *gemm_wgmma_block(uint8_t *smem_raw, const gemm_mma_tile &t, const int64_t (&x_row)[4]) {
    using Shape = gemm_wg_shape<FOLDED, BM>;
    constexpr int ST = Shape::STAGES, THREADS = Shape::THREADS, PIECES = Shape::PIECES;
    const int tid = threadIdx.x, wg = BM == GEMM_WG_BM ? tid / 128 : 0, lane = tid & 31, warp_in_wg = (tid / 32) % 4;
    /* the 1024-byte aligned base the swizzle and the descriptors assume */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    uint8_t *smem = smem_raw + ((1024u - (raw & 1023u)) & 1023u);
    uint8_t *xs = smem, *wb = smem + ST * Shape::X_BYTES, *w8 = wb + 2 * GEMM_WG_WB_BYTES;

    /* this thread's 16-byte pieces of codes a step: piece i = tid + THREADS j is row i / 4, bytes 16 (i % 4) .. of
     * the step's 64, in half j / (PIECES / 2) (rows 0-63 half 0); rows at or past the half's end copy nothing and
     * read as zero */
    const uint8_t *w_src[PIECES];
    bool w_ok[PIECES];
#pragma unroll
    for (int j = 0; j < PIECES; j++) {
        const int half = j / (PIECES / 2), row = (tid + THREADS * j) / 4;
        const int64_t n = t.n[half] + row % 64;
        w_ok[j] = n < t.end[half];
        w_src[j] = (const uint8_t *)t.w[half].data + (w_ok[j] ? n : 0) * t.K + 16 * (tid % 4);
    }
    const __nv_bfloat16 *x_src[4];
#pragma unroll
    for (int j = 0; j < 4; j++) x_src[j] = t.x + (x_row[j] >= 0 ? x_row[j] * t.ldx : 0) + 8 * (tid % 8);

    const auto load = [&](int step, int stage) {
        const int k0 = step * GEMM_WG_BK;
        uint8_t *xd = xs + stage * Shape::X_BYTES;
        if constexpr (!(SKIP & GEMM_WG_SKIP_X_COPY))
#pragma unroll
            for (int j = 0; j < 4; j++)
                cuda_cp_async16(xd + gemm_wg_swizzle(tid / 8 + THREADS / 8 * j, tid % 8), x_src[j] + k0,
                                x_row[j] >= 0 ? 16 : 0);
        uint8_t *wd = w8 + stage * GEMM_WG_W8_BYTES;
        if constexpr (!(SKIP & GEMM_WG_SKIP_W_COPY))
#pragma unroll
            for (int j = 0; j < PIECES; j++)
                cuda_cp_async16(wd + (tid + THREADS * j) * 16, w_src[j] + k0, w_ok[j] ? 16 : 0);
    };
    /* The block scales of this thread's weight halves (promoted: of the columns d[0..31], d[32..63]), per k-block. */
    const float *scale[2] = {gemm_wg_half_scales(t, 0), gemm_wg_half_scales(t, 1)};
    /* this thread's pieces of the codes of `stage` to BF16 (gemm_wg_convert_piece), or, folded, dequantised with the
     * scales `half_scale` of the step's k-block (gemm_wg_dequantize_piece) */
    const auto convert = [&](int stage, int buffer, const float (&half_scale)[2]) {
        uint8_t *to = wb + buffer * GEMM_WG_WB_BYTES;
        const uint8_t *from = w8 + stage * GEMM_WG_W8_BYTES;
        if constexpr (!(SKIP & GEMM_WG_SKIP_CONVERT)) {
#pragma unroll
            for (int j = 0; j < PIECES; j++) {
                if constexpr (FOLDED) gemm_wg_dequantize_piece(to, from, tid + THREADS * j, half_scale[j / (PIECES / 2)]);
                else gemm_wg_convert_piece(to, from, tid + THREADS * j);
            }
        }
    };
    /* folded: this thread's halves' scales at k-block kb (zeros past K's end or a half past its weight's end) */
    const auto block_scales = [&](int kb, float (&half_scale)[2]) {
#pragma unroll
        for (int h = 0; h < 2; h++) half_scale[h] = scale[h] && kb < t.K / 128 ? scale[h][kb] : 0.0f;
    };

    const int steps = t.K / GEMM_WG_BK;   /* even: K % 128 == 0 */
    float scale_now[2] = {0.0f, 0.0f};    /* folded: the k-block of the step converted next */
    if constexpr (FOLDED) block_scales(0, scale_now);
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < steps) load(s, s);
        cuda_cp_async_commit();
    }
    cuda_cp_async_wait<ST - 2>();
    convert(0, 0, scale_now);
    gemm_wg_fence_proxy();
    __syncthreads();

    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
    /* While the MMAs of step s run: wait for the step before's, refill the stage step s - 1 used, convert step
     * s + 1's codes (folded: with its k-block's scales), and make step s + 1's operands visible to every MMA (the
     * caller's barrier follows). */
    const auto advance = [&](int s, const float (&next_scale)[2]) {
        gemm_wg_wait<1>();
        __syncthreads();   /* every warpgroup is past the MMAs of step s - 1: its stage and buffer are free */
        if (s + ST - 1 < steps) load(s + ST - 1, (s + ST - 1) % ST);
        cuda_cp_async_commit();
        if (s + 1 < steps) {
            cuda_cp_async_wait<ST - 2>();   /* this thread's copies of step s + 1 have landed */
            convert((s + 1) % ST, (s + 1) % 2, next_scale);
            gemm_wg_fence_proxy();
        }
    };
    const auto issue = [&](int s, bool first) {   /* the step's four k16 MMAs: rows 64 wg .. of x, all 128 weights */
        const uint64_t a = gemm_wg_desc(xs + (s % ST) * Shape::X_BYTES + wg * 64 * 128);
        const uint64_t b = gemm_wg_desc(wb + (s % 2) * GEMM_WG_WB_BYTES);
        gemm_wg_fence();
        if constexpr (!(SKIP & GEMM_WG_SKIP_MMA))
#pragma unroll
            for (int k = 0; k < GEMM_WG_BK / 16; k++) gemm_wg_mma(d, a + 2 * k, b + 2 * k, first && k == 0 ? 0 : 1);
        gemm_wg_commit();
    };
    float *c = reinterpret_cast<float *>(smem);   /* the result tile, once every MMA has completed */

    if constexpr (FOLDED) {
        /* Two steps (one k-block) a round, as the promoted loop; the MMAs accumulate into d through all of K, the last
         * step's still running across the loop's back edge while the next round's scales load. */
        for (int s = 0; s < steps; s += 2) {
            float scale_next[2];   /* step s + 2's k-block, converted at the end of this round */
            block_scales(s / 2 + 1, scale_next);
            gemm_wg_fence_operand(d);
            issue(s, s == 0);
            advance(s, scale_now);   /* step s + 1: this k-block */
            __syncthreads();
            issue(s + 1, false);
            advance(s + 1, scale_next);
            __syncthreads();   /* step s + 2's operands are all in place */
#pragma unroll
            for (int h = 0; h < 2; h++) scale_now[h] = scale_next[h];
        }
        gemm_wg_wait<0>();
        gemm_wg_fence_operand(d);
        __syncthreads();   /* every warpgroup's MMAs have completed: the stages are free */
        gemm_wg_store_sums(c, d, wg * 64, warp_in_wg, lane);
    } else {
        float sum[64];
#pragma unroll
        for (int i = 0; i < 64; i++) sum[i] = 0.0f;
        /* Two steps (one 128-k scale block) a round, so the accumulators are never in flight across the loop's back
         * edge (ptxas inserted a wait for them there when a round was one step). */
        for (int s = 0; s < steps; s += 2) {
            const int kb = s / 2;   /* this k-block's scales, loaded while its MMAs run */
            const float s0 = scale[0] ? scale[0][kb] : 0.0f, s1 = scale[1] ? scale[1][kb] : 0.0f;
            gemm_wg_fence_operand(d);
            issue(s, true);
            advance(s, scale_now);
            __syncthreads();   /* step s + 1's x and converted weights are all in place */
            issue(s + 1, false);
            advance(s + 1, scale_now);
            if constexpr (!(SKIP & GEMM_WG_SKIP_PROMOTE)) {
                gemm_wg_wait<0>();   /* the block's sums are complete */
                gemm_wg_fence_operand(d);
#pragma unroll
                for (int i = 0; i < 64; i++) sum[i] = fmaf(d[i], i < 32 ? s0 : s1, sum[i]);   /* promote the block's sums */
            }
            __syncthreads();   /* step s + 2's operands are all in place */
        }

        if constexpr (SKIP & GEMM_WG_SKIP_PROMOTE) {
            gemm_wg_wait<0>();
            __syncthreads();
        }
        /* the result tile (the stages are free: every MMA has completed, the last barrier passed) */
        gemm_wg_store_sums(c, sum, wg * 64, warp_in_wg, lane);
    }
    __syncthreads();
    return c;
}

/* ------------------------------------------------------------------------------------------------------------
 * The same tile, warp-specialized (bench_grouped's variant "warp-specialized"; not yet used by moe.cu, not yet run):
 * 384 threads, warpgroup 0 the producer (cp.async of x and the codes two steps ahead, the conversion, 56 registers
 * after setmaxnreg), warpgroups 1 and 2 the consumers (64 tile rows each: wgmma, the promotion, 224 registers). The
 * lockstep above makes both warpgroups copy, convert and wait at two block barriers a step; here the consumers only
 * wait for a stage to be full and the producer only for one to be empty, through named barriers (ids 1-4: stage
 * full, the producer arriving and the consumers syncing; 5-8: stage empty, the other way round; 384 threads each;
 * 9: the consumers alone, before the result tile).
 * Four stages of x, codes and converted weights (40 KB a stage). The arithmetic is gemm_wgmma_block's: the same
 * products in the same wgmma instructions, the same promotion, so the same bits.
 */
enum { GEMM_WS_THREADS = 384, GEMM_WS_STAGES = 4, GEMM_WS_AHEAD = 2 };
constexpr size_t GEMM_WS_STAGE_BYTES = GEMM_WG_X_BYTES + GEMM_WG_WB_BYTES + GEMM_WG_W8_BYTES;
constexpr size_t GEMM_WS_SMEM = GEMM_WS_STAGES * GEMM_WS_STAGE_BYTES + 1024;
static_assert((size_t)GEMM_WG_BM * GEMM_WG_C_LD * 4 <= GEMM_WS_SMEM - 1024, "the result tile reuses the stages");

__device__ inline void gemm_ws_bar_sync(int id) { asm volatile("bar.sync %0, 384;" ::"r"(id) : "memory"); }
__device__ inline void gemm_ws_bar_arrive(int id) { asm volatile("bar.arrive %0, 384;" ::"r"(id) : "memory"); }
__device__ inline int gemm_ws_full(int stage) { return 1 + stage; }
__device__ inline int gemm_ws_empty(int stage) { return 1 + GEMM_WS_STAGES + stage; }

/* c[r][col] as gemm_wgmma_block's, [128][GEMM_WG_C_LD] F32 in `smem`. x_row[j] (producer threads only, threadIdx.x
 * < 128) is the x row (or -1) of tile row threadIdx.x / 8 + 16 j, whose 16-byte piece threadIdx.x % 8 this thread
 * copies. Every thread of the block must call it; blockDim.x == GEMM_WS_THREADS. */
__device__ inline const float *gemm_wgmma_ws_block(uint8_t *smem_raw, const gemm_mma_tile &t, const int64_t (&x_row)[8]) {
    constexpr int ST = GEMM_WS_STAGES;
    const int tid = threadIdx.x, wg = tid / 128;
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    uint8_t *smem = smem_raw + ((1024u - (raw & 1023u)) & 1023u);
    const auto xs = [&](int stage) { return smem + stage * GEMM_WS_STAGE_BYTES; };
    const auto wb = [&](int stage) { return smem + stage * GEMM_WS_STAGE_BYTES + GEMM_WG_X_BYTES; };
    const auto w8 = [&](int stage) { return smem + stage * GEMM_WS_STAGE_BYTES + GEMM_WG_X_BYTES + GEMM_WG_WB_BYTES; };
    const int steps = t.K / GEMM_WG_BK;   /* even: K % 128 == 0 */
    float *c = reinterpret_cast<float *>(smem);

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        /* pieces of codes: i = tid + 128 j is row i / 4 (half i / 256 ... rows 0-63 half 0), bytes 16 (i % 4) .. */
        const uint8_t *w_src[4];
        bool w_ok[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int row = (tid + 128 * j) / 4, half = row / 64;
            const int64_t n = t.n[half] + row % 64;
            w_ok[j] = n < t.end[half];
            w_src[j] = (const uint8_t *)t.w[half].data + (w_ok[j] ? n : 0) * t.K + 16 * (tid % 4);
        }
        const auto load = [&](int step, int stage) {
            const int k0 = step * GEMM_WG_BK;
#pragma unroll
            for (int j = 0; j < 8; j++)
                cuda_cp_async16(xs(stage) + gemm_wg_swizzle(tid / 8 + 16 * j, tid % 8),
                                t.x + (x_row[j] >= 0 ? x_row[j] * t.ldx : 0) + 8 * (tid % 8) + k0, x_row[j] >= 0 ? 16 : 0);
#pragma unroll
            for (int j = 0; j < 4; j++) cuda_cp_async16(w8(stage) + (tid + 128 * j) * 16, w_src[j] + k0, w_ok[j] ? 16 : 0);
        };
        for (int a = 0; a < GEMM_WS_AHEAD; a++) {
            if (a < steps) load(a, a);
            cuda_cp_async_commit();
        }
        for (int s = 0; s < steps; s++) {
            const int a = s + GEMM_WS_AHEAD;
            if (a < steps) {
                if (a >= ST) gemm_ws_bar_sync(gemm_ws_empty(a % ST));   /* the consumers are done with step a - ST */
                load(a, a % ST);
            }
            cuda_cp_async_commit();
            cuda_cp_async_wait<GEMM_WS_AHEAD>();   /* this thread's copies of step s have landed */
#pragma unroll
            for (int j = 0; j < 4; j++) gemm_wg_convert_piece(wb(s % ST), w8(s % ST), tid + 128 * j);
            gemm_wg_fence_proxy();   /* x (landed) and the converted codes, to the MMAs' async proxy */
            gemm_ws_bar_arrive(gemm_ws_full(s % ST));
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
        const int cw = wg - 1;   /* tile rows 64 cw .. 64 cw + 63 */
        float sum[64];
#pragma unroll
        for (int i = 0; i < 64; i++) sum[i] = 0.0f;
        const float *scale[2] = {gemm_wg_half_scales(t, 0), gemm_wg_half_scales(t, 1)};
        float d[64];
#pragma unroll
        for (int i = 0; i < 64; i++) d[i] = 0.0f;
        const auto issue = [&](int s, bool first) {
            gemm_ws_bar_sync(gemm_ws_full(s % ST));
            const uint64_t a = gemm_wg_desc(xs(s % ST) + cw * 64 * 128), b = gemm_wg_desc(wb(s % ST));
            gemm_wg_fence();
#pragma unroll
            for (int k = 0; k < GEMM_WG_BK / 16; k++) gemm_wg_mma(d, a + 2 * k, b + 2 * k, first && k == 0 ? 0 : 1);
            gemm_wg_commit();
        };
        for (int s = 0; s < steps; s += 2) {
            const int kb = s / 2;
            const float s0 = scale[0] ? scale[0][kb] : 0.0f, s1 = scale[1] ? scale[1][kb] : 0.0f;
            gemm_wg_fence_operand(d);
            issue(s, true);
            issue(s + 1, false);
            gemm_wg_wait<0>();
            gemm_wg_fence_operand(d);
            /* both stages are free again: tell the producer, if it will refill them */
            if (s + ST < steps) gemm_ws_bar_arrive(gemm_ws_empty(s % ST));
            if (s + 1 + ST < steps) gemm_ws_bar_arrive(gemm_ws_empty((s + 1) % ST));
#pragma unroll
            for (int i = 0; i < 64; i++) sum[i] = fmaf(d[i], i < 32 ? s0 : s1, sum[i]);
        }
        /* both consumers' MMAs have completed (and the producer wrote its last stage before the last full
         * barrier): the result tile may reuse the stages */
        asm volatile("bar.sync %0, 256;" ::"r"(1 + 2 * GEMM_WS_STAGES) : "memory");
        gemm_wg_store_sums(c, sum, cw * 64, (tid / 32) % 4, tid & 31);
    }
    __syncthreads();
    return c;
}

#endif
