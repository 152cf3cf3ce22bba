/*
 * linear.c - matmul y[M,N] = x[M,K] * w[N,K]^T over F32, BF16, F16 and block-scaled FP8 weights.
 *
 * The output is cut into tiles of MATMUL_TILE_M rows of x by MATMUL_TILE_N rows of w; threads take contiguous
 * runs of tiles. With M <= MATMUL_TILE_M (decode, a batch of decode rows: the hot case) there is one tile row, so
 * the split is over output columns N and every weight byte is read once per step, whatever the batch size. With
 * large M, a thread's tiles share one block of x, which stays in cache while the weights stream by.
 *
 * Inside a tile, K is walked in blocks of MATMUL_BLOCK_K columns. F32 and BF16 weights are read where they lie
 * (BF16 widened to F32 in registers, which is exact); F16 and FP8 rows are first decoded into a float scratch for
 * the block. A micro-kernel (cpu_dot_tile, cpu_ops.h) then takes up to 6 rows of x against up to 8 rows of w at
 * once, so one weight load (and its widening) feeds several rows and one x load several weight rows: that reuse is
 * what makes a 16-row decode step cost far less than 16 one-row steps.
 *
 * The arithmetic of every output element is fixed, whatever M, NX, NW, the tile or the thread: per K block, 8
 * lane accumulators over the block's columns (lane = column mod 8, starting from 0), summed by v8f_sum, then the
 * block's last kb mod 8 columns added one by one, and the block sums added into the element in block order. So a
 * row's result does not depend on what else is in the batch (batch invariance, tests/c/test_cpu_ops.c), and it is
 * the result of the one-row-at-a-time kernel this replaced, bit for bit.
 *
 * The tile loop is compiled twice, for the baseline target and for AVX2+FMA, chosen at backend creation. In the
 * FMA build `acc += x * w` contracts to one fused multiply-add (GNU C's default -ffp-contract=fast), in the
 * baseline it is a multiply and an add: the two builds differ in rounding, each is deterministic.
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

CPU_INLINE void matmul_tiles(void *ctx, int64_t tile_begin, int64_t tile_end) {
    const matmul_job *job = ctx;
    const glm53_tensor *w = job->w;
    const int64_t K = job->k, N = job->n;
    const bool in_place = w->dtype == GLM53_F32 || w->dtype == GLM53_BF16, bf16 = w->dtype == GLM53_BF16;
    float w_block[MATMUL_TILE_N * MATMUL_BLOCK_K] __attribute__((aligned(64)));   /* [TILE_N, BLOCK_K] */
    float acc[MATMUL_TILE_M * MATMUL_TILE_N];                                       /* [TILE_M, TILE_N] */

    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        int64_t m0 = tile / job->n_tiles_n * MATMUL_TILE_M, n0 = tile % job->n_tiles_n * MATMUL_TILE_N;
        int64_t tm = job->m - m0 < MATMUL_TILE_M ? job->m - m0 : MATMUL_TILE_M;
        int64_t tn = N - n0 < MATMUL_TILE_N ? N - n0 : MATMUL_TILE_N;
        memset(acc, 0, sizeof acc);

        for (int64_t k0 = 0; k0 < K; k0 += MATMUL_BLOCK_K) {
            int64_t kb = K - k0 < MATMUL_BLOCK_K ? K - k0 : MATMUL_BLOCK_K;
            const float *x_block = job->x + m0 * K + k0;
            if (in_place) {
                int64_t offset = n0 * w->stride[0] + k0;
                if (bf16)
                    cpu_dot_block(x_block, K, tm, (const uint16_t *)w->data + offset, w->stride[0], true, kb, tn, acc,
                                  MATMUL_TILE_N, false);
                else
                    cpu_dot_block(x_block, K, tm, (const float *)w->data + offset, w->stride[0], false, kb, tn, acc,
                                  MATMUL_TILE_N, false);
            } else {
                for (int64_t r = 0; r < tn; r++)
                    cpu_weight_row_to_f32(w, job->fp8_table, n0 + r, k0, kb, w_block + r * MATMUL_BLOCK_K);
                cpu_dot_block(x_block, K, tm, w_block, MATMUL_BLOCK_K, false, kb, tn, acc, MATMUL_TILE_N, false);
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
    int64_t tile_flops = 2 * (M < MATMUL_TILE_M ? M : MATMUL_TILE_M) * MATMUL_TILE_N * K;
    glm53_pool_fn fn = impl->use_avx2 ? matmul_tiles_avx2 : matmul_tiles_baseline;
    if (parallel) cpu_parallel_for(be, n_tiles, tile_flops, fn, &job);
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
