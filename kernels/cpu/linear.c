/*
 * linear.c - matmul y[M,N] = x[M,K] * w[N,K]^T over F32, BF16, F16 and block-scaled FP8 weights.
 *
 * The output is cut into tiles of MATMUL_TILE_M rows of x by MATMUL_TILE_N rows of w; threads take contiguous
 * runs of tiles. With M <= MATMUL_TILE_M (decode, a batch of decode rows: the hot case) there is one tile row, so
 * the split is over output columns N and every weight byte is read once per step, whatever the batch size. With
 * large M, a thread's tiles share one block of x, which stays in cache while the weights stream by.
 *
 * Inside a tile, K is walked in blocks of MATMUL_BLOCK_K columns. F32 weights are read where they lie, BF16 too
 * when one group of x rows reads them (widened to F32 in registers, which is exact); F16 and FP8 rows, and BF16
 * rows that several groups read, are first decoded into a float scratch for the block. A micro-kernel
 * (cpu_dot_tile, cpu_ops.h) then takes up to 3 rows of x against up to 8 rows of w at once, so one weight load (and its widening) feeds several rows and one x load several weight rows: that reuse is
 * what makes a 16-row decode step cost far less than 16 one-row steps.
 *
 * The arithmetic of every output element is fixed, whatever M, NX, NW, the tile or the thread: per K block, 8
 * lane accumulators over the block's columns (lane = column mod 8, starting from 0), summed by v8f_sum, then the
 * block's last kb mod 8 columns added one by one, and the block sums added into the element in block order. So a
 * row's result does not depend on what else is in the batch (batch invariance, tests/c/test_cpu_ops.c), and it is
 * the result of the one-row-at-a-time kernel this replaced, bit for bit.
 *
 * The tile loop is compiled three times, for the baseline target, for AVX2+FMA and for AVX-512, chosen at backend
 * creation. In the FMA builds each multiply-add is one fused operation, written out (cpu_fma8, __builtin_fmaf), in
 * the baseline a multiply and an add: the baseline differs from the other two in rounding; the AVX-512 build
 * gives the AVX2+FMA build's results bit for bit (wide_tile says how), optimised or not.
 */
#include "kernels/cpu/cpu_ops.h"

enum {
    MATMUL_TILE_M = 32,
    MATMUL_TILE_N = 16,
    MATMUL_BLOCK_K = 256,   /* multiple of 128, so FP8 scale blocks split the scratch into whole runs */
};

typedef struct matmul_job {
    float              *y;           /* [M, N] */
    const float        *x;           /* [M, K] */
    const glm53_tensor *w;           /* [N, K] */
    const float        *fp8_table;
    int64_t             m, n, k;
    int64_t             n_tiles_n;   /* tiles along N; tile t covers tile row t / n_tiles_n */
} matmul_job;

/* ------------------------------------------------------------------------------------------------------------
 * The AVX-512 micro-kernel: two weight rows per 16-lane register (lanes 0-7 row j, lanes 8-15 row j + 1), each x
 * row's 8 columns broadcast to both halves. Every lane does what its 8-lane AVX2 counterpart does (lane l of
 * weight row j accumulates columns l, l + 8, ... with fused multiply-adds from 0), and each half is summed in
 * v8f_sum's order: the results are those of the AVX2+FMA build, bit for bit, at twice the multiply-adds per
 * instruction, with 32 registers for up to 24 accumulators.
 *
 * The block's weight rows are first packed, widened to F32, as row pairs ([pair][8-column chunk][16 floats]), so
 * that the multiply-adds take their weights straight from L1 (a memory operand) and the widening is paid once per
 * block rather than once per group of x rows. A one-row block has nothing to share it with and stays on the AVX2
 * kernel, as does an odd last weight row.
 */
#if defined(__x86_64__)
#include <immintrin.h>

#define WIDE_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#define WIDE_INLINE WIDE_TARGET __attribute__((always_inline)) static inline

enum { WIDE_MAX_NX = 6, WIDE_MAX_NP = 8 };

/* pairs[p][c][0..8) = w row 2p, columns 8c..8c+8; pairs[p][c][8..16) = w row 2p + 1, for p < tn / 2, c < kb / 8. */
WIDE_INLINE void wide_pack(const void *w, int64_t stride, const bool bf16, int64_t tn, int64_t kb, float *pairs) {
    const int64_t nc = kb / 8;
    for (int64_t p = 0; p < tn / 2; p++)
        for (int h = 0; h < 2; h++)
            for (int64_t c = 0; c < nc; c++) {
                __m256 v;
                if (bf16) {
                    __m128i raw = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + (2 * p + h) * stride + 8 * c));
                    v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
                } else {
                    v = _mm256_loadu_ps((const float *)w + (2 * p + h) * stride + 8 * c);
                }
                _mm256_store_ps(pairs + (p * nc + c) * 16 + 8 * h, v);
            }
}

typedef float v16f __attribute__((vector_size(64)));

/* v8f_sum of each half of a: ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)) (each addition pairs the same
 * operands; which side each is on does not change an IEEE sum). */
WIDE_INLINE void wide_halves_sum(v16f a, float *lo, float *hi) {
    v16f t = a + __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    t = t + __builtin_shufflevector(t, t, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    t = t + __builtin_shufflevector(t, t, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    *lo = t[0];
    *hi = t[8];
}

/* The v8f_sum of each of the 8 halves of a0..a3, in output order (a_q's lanes 0-7, then 8-15): the three levels
 * of ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)), each a shuffle and an add over four or eight halves at
 * once, with the same pairs added at every level as wide_halves_sum (and v8f_sum) add. */
WIDE_INLINE __m256 wide_sums8(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    /* level 1: 128-bit block 0 of t gets lanes 0-3 + 4-7 of half 0, block 2 the same of half 1 */
    __m512 t0 = _mm512_add_ps(a0, _mm512_shuffle_f32x4(a0, a0, _MM_SHUFFLE(2, 3, 0, 1)));
    __m512 t1 = _mm512_add_ps(a1, _mm512_shuffle_f32x4(a1, a1, _MM_SHUFFLE(2, 3, 0, 1)));
    __m512 t2 = _mm512_add_ps(a2, _mm512_shuffle_f32x4(a2, a2, _MM_SHUFFLE(2, 3, 0, 1)));
    __m512 t3 = _mm512_add_ps(a3, _mm512_shuffle_f32x4(a3, a3, _MM_SHUFFLE(2, 3, 0, 1)));
    /* the four level-1 quadruples of outputs 0-3, and of outputs 4-7, one per block */
    __m512 c0 = _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
    __m512 c1 = _mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(2, 0, 2, 0));
    /* level 2: lanes 0 and 2 of each block get u0 + u1 and u2 + u3; level 3: lane 0 gets their sum */
    c0 = _mm512_add_ps(c0, _mm512_permute_ps(c0, _MM_SHUFFLE(2, 3, 0, 1)));
    c1 = _mm512_add_ps(c1, _mm512_permute_ps(c1, _MM_SHUFFLE(2, 3, 0, 1)));
    c0 = _mm512_add_ps(c0, _mm512_permute_ps(c0, _MM_SHUFFLE(1, 0, 3, 2)));
    c1 = _mm512_add_ps(c1, _mm512_permute_ps(c1, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512i lane0s = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    return _mm512_castps512_ps256(_mm512_permutex2var_ps(c0, lane0s, c1));
}

/* acc[i * acc_stride + 2q + h] += (x row i) . (w row 2q + h) over kb columns, for i < nx, q < np, h < 2: the
 * packed pairs `pairs` (np of them, nc chunks each) for the whole chunks, w itself (rows w, `w_stride` apart) for
 * the last kb mod 8 columns. */
WIDE_INLINE void wide_tile(const float *x, int64_t x_stride, const float *pairs, int64_t nc, const void *w,
                           int64_t w_stride, const bool bf16, int64_t kb, const int nx, const int np, float *acc,
                           int64_t acc_stride) {
    __m512 a[WIDE_MAX_NX][WIDE_MAX_NP];
#pragma GCC unroll 8
    for (int i = 0; i < nx; i++)
#pragma GCC unroll 8
        for (int q = 0; q < np; q++) a[i][q] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
#pragma GCC unroll 8
        for (int i = 0; i < nx; i++) {
            __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + i * x_stride + 8 * c));
#pragma GCC unroll 8
            for (int q = 0; q < np; q++)
                a[i][q] = _mm512_fmadd_ps(xv, _mm512_load_ps(pairs + (q * nc + c) * 16), a[i][q]);
        }
    }
    if (8 * nc == kb && np % 4 == 0) {   /* no tail columns: eight sums at a time (wide_sums8) */
#pragma GCC unroll 8
        for (int i = 0; i < nx; i++)
#pragma GCC unroll 8
            for (int q = 0; q < np; q += 4) {
                float *out = acc + i * acc_stride + 2 * q;
                __m256 sums = wide_sums8(a[i][q], a[i][q + 1], a[i][q + 2], a[i][q + 3]);
                _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), sums));
            }
        return;
    }
#pragma GCC unroll 8
    for (int i = 0; i < nx; i++)
#pragma GCC unroll 8
        for (int q = 0; q < np; q++) {
            float s0, s1;
            wide_halves_sum((v16f)a[i][q], &s0, &s1);
            for (int64_t t = 8 * nc; t < kb; t++) {   /* fused multiply-adds, as in the AVX2 build */
                s0 = __builtin_fmaf(x[i * x_stride + t], cpu_w1(w, w_stride, bf16, 2 * q, t), s0);
                s1 = __builtin_fmaf(x[i * x_stride + t], cpu_w1(w, w_stride, bf16, 2 * q + 1, t), s1);
            }
            acc[i * acc_stride + 2 * q] += s0;
            acc[i * acc_stride + 2 * q + 1] += s1;
        }
}

/* Weight-row pairs per call for nx x rows: 8 accumulators at least (the multiply-add latency), 24 at most. */
#define WIDE_NP_FOR(nx) ((nx) <= 2 ? 8 / (nx) : 4)

WIDE_INLINE void wide_rows(const float *x, int64_t x_stride, const float *pairs, int64_t nc, const void *w,
                           int64_t w_stride, const bool bf16, int64_t kb, const int nx, int64_t tn, float *acc,
                           int64_t acc_stride) {
    const int np = WIDE_NP_FOR(nx);
    const size_t row_bytes = (size_t)w_stride * (bf16 ? 2 : 4);
    int64_t q = 0, n_pairs = tn / 2;
    for (; q + np <= n_pairs; q += np)
        wide_tile(x, x_stride, pairs + q * nc * 16, nc, (const char *)w + 2 * q * row_bytes, w_stride, bf16, kb, nx,
                  np, acc + 2 * q, acc_stride);
    for (; q < n_pairs; q++)
        wide_tile(x, x_stride, pairs + q * nc * 16, nc, (const char *)w + 2 * q * row_bytes, w_stride, bf16, kb, nx,
                  1, acc + 2 * q, acc_stride);
    if (tn % 2)   /* an odd last row: the 8-lane kernel, the same arithmetic */
        cpu_dot_tile(x, x_stride, (const char *)w + (tn - 1) * row_bytes, w_stride, bf16, kb, nx, 1,
                     acc + tn - 1, acc_stride, false, true);
}

/* cpu_dot_block's contract (accumulating into acc, rows MATMUL_TILE_N apart), on the AVX-512 micro-kernel. Not
 * inlined into the other builds' tile loops (a plain call there, never taken). */
WIDE_TARGET static void wide_block(const float *x, int64_t x_stride, int64_t m, const void *w, int64_t w_stride,
                                   const bool bf16, int64_t kb, int64_t tn, float *acc) {
    if (m == 1) {
        cpu_dot_block(x, x_stride, m, w, w_stride, bf16, kb, tn, acc, MATMUL_TILE_N, false, true);
        return;
    }
    float pairs[MATMUL_TILE_N / 2 * MATMUL_BLOCK_K * 2] __attribute__((aligned(64)));
    const int64_t nc = kb / 8;
    wide_pack(w, w_stride, bf16, tn, kb, pairs);
    int64_t i = 0;
    for (; i + WIDE_MAX_NX <= m; i += WIDE_MAX_NX)
        wide_rows(x + i * x_stride, x_stride, pairs, nc, w, w_stride, bf16, kb, WIDE_MAX_NX, tn,
                  acc + i * MATMUL_TILE_N, MATMUL_TILE_N);
    const float *xr = x + i * x_stride;
    float *ar = acc + i * MATMUL_TILE_N;
    switch (m - i) {
    case 5: wide_rows(xr, x_stride, pairs, nc, w, w_stride, bf16, kb, 5, tn, ar, MATMUL_TILE_N); break;
    case 4: wide_rows(xr, x_stride, pairs, nc, w, w_stride, bf16, kb, 4, tn, ar, MATMUL_TILE_N); break;
    case 3: wide_rows(xr, x_stride, pairs, nc, w, w_stride, bf16, kb, 3, tn, ar, MATMUL_TILE_N); break;
    case 2: wide_rows(xr, x_stride, pairs, nc, w, w_stride, bf16, kb, 2, tn, ar, MATMUL_TILE_N); break;
    case 1: wide_rows(xr, x_stride, pairs, nc, w, w_stride, bf16, kb, 1, tn, ar, MATMUL_TILE_N); break;
    default: break;
    }
}
#else
static void wide_block(const float *x, int64_t x_stride, int64_t m, const void *w, int64_t w_stride,
                       const bool bf16, int64_t kb, int64_t tn, float *acc) {
    cpu_dot_block(x, x_stride, m, w, w_stride, bf16, kb, tn, acc, MATMUL_TILE_N, false, true);
}
#endif

/* One K block of a tile through the build's micro-kernel (fused: the build has FMA). */
CPU_INLINE void matmul_block(const float *x, int64_t x_stride, int64_t m, const void *w, int64_t w_stride,
                             const bool bf16, int64_t kb, int64_t tn, float *acc, const bool wide, const bool fused) {
    if (wide) wide_block(x, x_stride, m, w, w_stride, bf16, kb, tn, acc);
    else cpu_dot_block(x, x_stride, m, w, w_stride, bf16, kb, tn, acc, MATMUL_TILE_N, false, fused);
}

CPU_INLINE void matmul_tiles(void *ctx, int64_t tile_begin, int64_t tile_end, const bool wide, const bool fused) {
    const matmul_job *job = ctx;
    const glm53_tensor *w = job->w;
    const int64_t K = job->k, N = job->n;
    const bool bf16 = w->dtype == GLM53_BF16;
    float w_block[MATMUL_TILE_N * MATMUL_BLOCK_K] __attribute__((aligned(64)));   /* [TILE_N, BLOCK_K] */
    float acc[MATMUL_TILE_M * MATMUL_TILE_N];                                       /* [TILE_M, TILE_N] */

    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        int64_t m0 = tile / job->n_tiles_n * MATMUL_TILE_M, n0 = tile % job->n_tiles_n * MATMUL_TILE_N;
        int64_t tm = job->m - m0 < MATMUL_TILE_M ? job->m - m0 : MATMUL_TILE_M;
        int64_t tn = N - n0 < MATMUL_TILE_N ? N - n0 : MATMUL_TILE_N;
        /* Read where they lie: F32 weights, and BF16 ones that one group of x rows reads. A BF16 block that several
         * groups read is widened to F32 once (exact) rather than in every group's micro-kernel (16 rows: six
         * widenings of each weight); the products and their order are unchanged. */
        const bool in_place = w->dtype == GLM53_F32 || (bf16 && (wide || tm <= CPU_DOT_GROUP_NX));
        memset(acc, 0, sizeof acc);

        for (int64_t k0 = 0; k0 < K; k0 += MATMUL_BLOCK_K) {
            int64_t kb = K - k0 < MATMUL_BLOCK_K ? K - k0 : MATMUL_BLOCK_K;
            const float *x_block = job->x + m0 * K + k0;
            if (in_place) {
                int64_t offset = n0 * w->stride[0] + k0;
                if (bf16)
                    matmul_block(x_block, K, tm, (const uint16_t *)w->data + offset, w->stride[0], true, kb, tn, acc,
                                 wide, fused);
                else
                    matmul_block(x_block, K, tm, (const float *)w->data + offset, w->stride[0], false, kb, tn, acc,
                                 wide, fused);
            } else {
                for (int64_t r = 0; r < tn; r++)
                    cpu_weight_row_to_f32(w, job->fp8_table, n0 + r, k0, kb, w_block + r * MATMUL_BLOCK_K);
                matmul_block(x_block, K, tm, w_block, MATMUL_BLOCK_K, false, kb, tn, acc, wide, fused);
            }
        }

        for (int64_t i = 0; i < tm; i++)
            memcpy(job->y + (m0 + i) * N + n0, acc + i * MATMUL_TILE_N, (size_t)tn * sizeof(float));
    }
}

static void matmul_tiles_baseline(void *ctx, int64_t begin, int64_t end) {
    matmul_tiles(ctx, begin, end, false, false);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void matmul_tiles_avx2(void *ctx, int64_t begin, int64_t end) {
    matmul_tiles(ctx, begin, end, false, true);
}
WIDE_TARGET static void matmul_tiles_avx512(void *ctx, int64_t begin, int64_t end) {
    matmul_tiles(ctx, begin, end, true, true);
}
#else
#define matmul_tiles_avx2 matmul_tiles_baseline   /* use_avx2 and use_avx512 are never set off x86 */
#define matmul_tiles_avx512 matmul_tiles_baseline
#endif

/* y[M,N] = x[M,K] * w[N,K]^T on the pool (parallel), or all on the calling thread (from inside a pool task). */
static glm53_status matmul_run(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                               bool parallel) {
    assert(cpu_is_f32(x) && cpu_is_f32(y));
    assert(w->ndim == 2 && glm53_tensor_is_contiguous(w) && w->data);
    int64_t M = glm53_tensor_rows(x), K = cpu_cols(x), N = w->shape[0];
    assert(w->shape[1] == K && glm53_tensor_rows(y) == M && cpu_cols(y) == N);
    assert(y->data != x->data);
    if (!cpu_weight_supported(w))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cpu matmul: weight %s has dtype %s (or a malformed FP8 scale)",
                          w->name ? w->name : "(unnamed)", glm53_dtype_name((glm53_dtype)w->dtype));
    if (M == 0 || N == 0) return GLM53_OK;

    cpu_backend *impl = cpu_impl(be);
    matmul_job job = {
        .y = y->data, .x = x->data, .w = w, .fp8_table = impl->fp8_table,
        .m = M, .n = N, .k = K, .n_tiles_n = (N + MATMUL_TILE_N - 1) / MATMUL_TILE_N,
    };
    int64_t n_tiles = (M + MATMUL_TILE_M - 1) / MATMUL_TILE_M * job.n_tiles_n;
    /* A tile's multiply-adds, and its weight bytes: a small model's weights come from L3 once per step, and with
     * few rows reading them is most of the time (a one-row product runs at a quarter of the multiply-add rate),
     * so splitting even a small one-row product over the threads pays. */
    int64_t tile_cost = 2 * (M < MATMUL_TILE_M ? M : MATMUL_TILE_M) * MATMUL_TILE_N * K +
                        8 * MATMUL_TILE_N * K * (int64_t)glm53_dtype_size((glm53_dtype)w->dtype);
    glm53_pool_fn fn = !impl->use_avx2 ? matmul_tiles_baseline : impl->use_avx512 ? matmul_tiles_avx512 : matmul_tiles_avx2;
    if (parallel) cpu_parallel_for(be, n_tiles, tile_cost, fn, &job);
    else fn(&job, 0, n_tiles);
    return GLM53_OK;
}

/* y[M,N] = x[M,K] * w[N,K]^T; x, y F32; w F32/BF16/F16/F8_E4M3 (+ F32 block scale). */
glm53_status cpu_matmul(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w) {
    return matmul_run(be, y, x, w, true);
}

glm53_status cpu_matmul_serial(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w) {
    return matmul_run(be, y, x, w, false);
}
