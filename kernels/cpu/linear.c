/*
 * ops_linear.c - matmul y[M,N] = x[M,K] * w[N,K]^T over F32, BF16, F16 and block-scaled FP8 weights.
 *
 * The output is cut into tiles of MATMUL_TILE_M rows of x by MATMUL_TILE_N rows of w; threads take contiguous
 * runs of tiles. With M <= MATMUL_TILE_M (decode, M = 1, the hot case) there is one tile row, so the split is
 * over output columns N and every weight byte is read once. With large M, a thread's tiles share one block of
 * x, which stays in cache while the weights stream by.
 *
 * Inside a tile, K is walked in blocks of MATMUL_BLOCK_K columns: the tile's weight rows are decoded once into
 * a float scratch on the stack, then every x row of the tile is dotted with them, four weight rows at a time so
 * each x load feeds four independent 8-lane accumulators. Partial sums per K block are added in F32.
 *
 * The tile loop is compiled twice, for the baseline target and for AVX2+FMA, chosen at backend creation.
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

/* sums[j] = x[0..k) . w_j[0..k) for the four rows w_j = w + j * w_stride. */
CPU_INLINE void dot4(const float *x, const float *w, int64_t w_stride, int64_t k, float sums[4]) {
    const float *w0 = w, *w1 = w + w_stride, *w2 = w + 2 * w_stride, *w3 = w + 3 * w_stride;
    v8f a0 = v8f_splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        v8f xv = v8f_load(x + i);
        a0 += xv * v8f_load(w0 + i);
        a1 += xv * v8f_load(w1 + i);
        a2 += xv * v8f_load(w2 + i);
        a3 += xv * v8f_load(w3 + i);
    }
    float s0 = v8f_sum(&a0), s1 = v8f_sum(&a1), s2 = v8f_sum(&a2), s3 = v8f_sum(&a3);
    for (; i < k; i++) {
        s0 += x[i] * w0[i];
        s1 += x[i] * w1[i];
        s2 += x[i] * w2[i];
        s3 += x[i] * w3[i];
    }
    sums[0] = s0, sums[1] = s1, sums[2] = s2, sums[3] = s3;
}

CPU_INLINE void matmul_tiles(void *ctx, int64_t tile_begin, int64_t tile_end) {
    const matmul_job *job = ctx;
    const int64_t K = job->k, N = job->n;
    float w_block[MATMUL_TILE_N * MATMUL_BLOCK_K] __attribute__((aligned(64)));   /* [TILE_N, BLOCK_K] */
    float acc[MATMUL_TILE_M * MATMUL_TILE_N];                                       /* [TILE_M, TILE_N] */

    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        int64_t m0 = tile / job->n_tiles_n * MATMUL_TILE_M, n0 = tile % job->n_tiles_n * MATMUL_TILE_N;
        int64_t tm = job->m - m0 < MATMUL_TILE_M ? job->m - m0 : MATMUL_TILE_M;
        int64_t tn = N - n0 < MATMUL_TILE_N ? N - n0 : MATMUL_TILE_N;
        memset(acc, 0, sizeof acc);

        for (int64_t k0 = 0; k0 < K; k0 += MATMUL_BLOCK_K) {
            int64_t kb = K - k0 < MATMUL_BLOCK_K ? K - k0 : MATMUL_BLOCK_K;
            for (int64_t r = 0; r < tn; r++)
                cpu_weight_row_to_f32(job->w, job->fp8_table, n0 + r, k0, kb, w_block + r * MATMUL_BLOCK_K);

            for (int64_t i = 0; i < tm; i++) {
                const float *x_row = job->x + (m0 + i) * K + k0;
                float *acc_row = acc + i * MATMUL_TILE_N;
                int64_t r = 0;
                for (; r + 4 <= tn; r += 4) {
                    float sums[4];
                    dot4(x_row, w_block + r * MATMUL_BLOCK_K, MATMUL_BLOCK_K, kb, sums);
                    for (int j = 0; j < 4; j++) acc_row[r + j] += sums[j];
                }
                for (; r < tn; r++) acc_row[r] += cpu_dot(x_row, w_block + r * MATMUL_BLOCK_K, kb);
            }
        }

        for (int64_t i = 0; i < tm; i++)
            memcpy(job->y + (m0 + i) * N + n0, acc + i * MATMUL_TILE_N, (size_t)tn * sizeof(float));
    }
}

static void matmul_tiles_baseline(void *ctx, int64_t begin, int64_t end) { matmul_tiles(ctx, begin, end); }

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void matmul_tiles_avx2(void *ctx, int64_t begin, int64_t end) {
    matmul_tiles(ctx, begin, end);
}
#else
#define matmul_tiles_avx2 matmul_tiles_baseline   /* use_avx2 is never set off x86 */
#endif

/* y[M,N] = x[M,K] * w[N,K]^T; x, y F32; w F32/BF16/F16/F8_E4M3 (+ F32 block scale). */
glm53_status cpu_matmul(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w) {
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
    int64_t tile_flops = 2 * (M < MATMUL_TILE_M ? M : MATMUL_TILE_M) * MATMUL_TILE_N * K;
    cpu_parallel_for(be, n_tiles, tile_flops, impl->use_avx2 ? matmul_tiles_avx2 : matmul_tiles_baseline, &job);
    return GLM53_OK;
}
