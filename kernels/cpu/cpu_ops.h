/*
 * cpu_ops.h - private to the CPU backend: its state, the parallel-for helper, small float vector helpers,
 * the weight-row decoders shared by matmul and gather_rows, and the op entry points the op table points at.
 *
 * Vectors are GCC vector extensions (v8f = 8 floats): the build targets x86-64-v2 at -O2, where GCC does not
 * auto-vectorise float reductions (that would need -ffast-math reassociation), so the 8 lanes are written out.
 * Each lane is an independent F32 accumulator; lanes are added at the end. No -ffast-math anywhere.
 */
#ifndef GLM53_CPU_OPS_H
#define GLM53_CPU_OPS_H

#include "kernels/backend.h"
#include "kernels/cpu/threadpool.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct cpu_block cpu_block;           /* a block of tensor memory (cpu_backend.c) */
typedef struct cpu_kept_size cpu_kept_size;   /* the released mappings of one size (cpu_backend.c) */

typedef struct cpu_backend {
    glm53_pool *pool;
    void       *scratch;           /* cpu_scratch's buffer, kept between ops (one op runs at a time) */
    size_t      scratch_bytes;
    /* Released mappings kept for the next tensor of the same size (cpu_backend.c says why); tensors are made and
     * released on any thread (a sequence freed during a step goes when the worker finishes it). */
    pthread_mutex_t kept_lock;
    cpu_kept_size  *kept;          /* one entry per size seen, each a stack of released mappings */
    size_t          kept_bytes;
    size_t          live_bytes;    /* mapped blocks in use, and the most of them in use at once */
    size_t          peak_bytes;
    bool        use_avx2;          /* the AVX2 builds run: matmul's with FMA, the others without (set from cpuid;
                                    * tests may clear it) */
    bool        use_avx512;        /* matmul runs its AVX-512 build (same results as its AVX2 one; cpuid, tests) */
    float       fp8_table[256];    /* E4M3 code -> float, from glm53_fp8_e4m3_to_f32 */
} cpu_backend;

static inline cpu_backend *cpu_impl(glm53_backend *be) { return (cpu_backend *)be->impl; }

/* Runs fn over [0, n_items) on the pool, or inline when n_items * cost_per_item (rough flops; an exponential or a
 * division counts CPU_COST_EXP) is too small to pay for handing work to the workers. */
enum { CPU_COST_EXP = 300 };
void cpu_parallel_for(glm53_backend *be, int64_t n_items, int64_t cost_per_item, glm53_pool_fn fn, void *ctx);

/* At least `bytes` of memory for the op running now (64-byte aligned), reused by the next op: a step's large
 * temporaries cost no allocation once the buffer has grown. NULL when out of memory. */
void *cpu_scratch(glm53_backend *be, size_t bytes);

/* A contiguous F32 activation tensor on this backend: what every op asserts about x and y. */
static inline bool cpu_is_f32(const glm53_tensor *t) {
    return t && t->data && t->dtype == GLM53_F32 && glm53_tensor_is_contiguous(t);
}

/* Last dimension (the "columns" of the rows convention). */
static inline int64_t cpu_cols(const glm53_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* ------------------------------------------------------------------------------------------------------------
 * 8-lane float vectors
 */
typedef float    v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));

/* Everything touching v8f is force-inlined: matmul's AVX2 build must get AVX code for it, and v8f never crosses
 * a real call, so GCC's note that baseline and AVX builds pass 32-byte vectors differently (-Wpsabi) does not
 * apply here. */
#define CPU_INLINE __attribute__((always_inline)) static inline
#pragma GCC diagnostic ignored "-Wpsabi"

/* memcpy loads: unaligned and alias-safe; GCC turns them into single vector moves. */
CPU_INLINE v8f v8f_load(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
CPU_INLINE v8f v8f_splat(float f) { return (v8f){f, f, f, f, f, f, f, f}; }
CPU_INLINE float v8f_sum(const v8f *v) {
    return (((*v)[0] + (*v)[4]) + ((*v)[1] + (*v)[5])) + (((*v)[2] + (*v)[6]) + ((*v)[3] + (*v)[7]));
}

/* sum(a[i] * b[i]) with 8 lane accumulators. */
CPU_INLINE float cpu_dot(const float *a, const float *b, int64_t n) {
    v8f acc = v8f_splat(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc += v8f_load(a + i) * v8f_load(b + i);
    float s = v8f_sum(&acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

CPU_INLINE float cpu_sum(const float *a, int64_t n) {
    v8f acc = v8f_splat(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc += v8f_load(a + i);
    float s = v8f_sum(&acc);
    for (; i < n; i++) s += a[i];
    return s;
}

/* ------------------------------------------------------------------------------------------------------------
 * Weight decoding: columns [col0, col0 + n) of row `row` of a 2-D weight, as floats.
 */
CPU_INLINE void cpu_bf16_to_f32_n(const uint16_t *src, int64_t n, float *dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8h h;
        memcpy(&h, src + i, sizeof h);
        v8u u = __builtin_convertvector(h, v8u) << 16;
        memcpy(dst + i, &u, sizeof u);
    }
    for (; i < n; i++) dst[i] = glm53_bf16_to_f32(src[i]);
}

/* FP8: each run of columns inside one scale block is decoded through the table and multiplied by that block's
 * scale (scale[row / block_rows, col / block_cols]); without a scale tensor the codes are the values. */
CPU_INLINE void cpu_fp8_to_f32_n(const glm53_tensor *w, const float *fp8_table, int64_t row, int64_t col0,
                                 int64_t n, float *dst) {
    const uint8_t *src = (const uint8_t *)w->data + row * w->stride[0] + col0;
    if (!w->scale) {
        for (int64_t i = 0; i < n; i++) dst[i] = fp8_table[src[i]];
        return;
    }
    const glm53_tensor *s = w->scale;
    const float *scale_row = (const float *)s->data + (row / w->block_rows) * s->stride[0];
    for (int64_t i = 0; i < n;) {
        int64_t col = col0 + i;
        int64_t run_end = (col / w->block_cols + 1) * w->block_cols - col0;
        if (run_end > n) run_end = n;
        float scale = scale_row[col / w->block_cols];
        for (; i < run_end; i++) dst[i] = fp8_table[src[i]] * scale;
    }
}

CPU_INLINE void cpu_weight_row_to_f32(const glm53_tensor *w, const float *fp8_table, int64_t row, int64_t col0,
                                      int64_t n, float *dst) {
    int64_t offset = row * w->stride[0] + col0;
    switch (w->dtype) {
    case GLM53_F32: memcpy(dst, (const float *)w->data + offset, (size_t)n * sizeof(float)); break;
    case GLM53_BF16: cpu_bf16_to_f32_n((const uint16_t *)w->data + offset, n, dst); break;
    case GLM53_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = glm53_f16_to_f32(((const uint16_t *)w->data)[offset + i]);
        break;
    case GLM53_F8_E4M3: cpu_fp8_to_f32_n(w, fp8_table, row, col0, n, dst); break;
    default: assert(!"weight dtype not decodable");
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Dot products of several rows against several weight rows at once (matmul's micro-kernel, mHC's projection)
 */
/* 8 consecutive weights of row r from column c of a block of weight rows, F32 or BF16 (widened exactly),
 * `stride` elements apart. bf16 is a constant at every call. */
CPU_INLINE v8f cpu_w8(const void *w, int64_t stride, const bool bf16, int64_t r, int64_t c) {
    if (!bf16) return v8f_load((const float *)w + r * stride + c);
    v8h h;
    memcpy(&h, (const uint16_t *)w + r * stride + c, sizeof h);
    v8u u = __builtin_convertvector(h, v8u) << 16;
    v8f f;
    memcpy(&f, &u, sizeof f);
    return f;
}

CPU_INLINE float cpu_w1(const void *w, int64_t stride, const bool bf16, int64_t r, int64_t c) {
    return bf16 ? glm53_bf16_to_f32(((const uint16_t *)w)[r * stride + c]) : ((const float *)w)[r * stride + c];
}

/* cpu_dot_tile takes up to CPU_DOT_MAX_NX x rows against up to CPU_DOT_MAX_NW weight rows; cpu_dot_block feeds it
 * CPU_DOT_GROUP_NX x rows at a time: 3 x rows against 4 weight rows keep 12 accumulators, the 3 x vectors and one
 * weight vector in the 16 AVX2 registers (8 loads per 12 multiply-adds), where 6 against 2 reloaded x for every
 * weight row (14 per 12). With the BF16 block widened once (linear.c), tests/server/bench.lua on the AVX2 build
 * (GLM53_CPU_ISA=avx2): the engine alone's 16-stream rate over its one-stream rate 2.87-2.99x -> 3.05-3.14x. The
 * results are the same: the arithmetic of an element does not depend on the grouping. */
enum { CPU_DOT_MAX_NX = 6, CPU_DOT_MAX_NW = 8, CPU_DOT_GROUP_NX = 3 };

/* acc + a * b rounded once: the FMA builds' multiply-add, written out rather than left to the compiler's
 * contraction of `acc + a * b` (which happens only when optimising: a debug build would otherwise compute the FMA
 * builds' products another way, and differently in their vector and scalar parts). Callers pass fused = true only
 * from code built for FMA, where this inlines; the others never call it. */
#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static inline v8f cpu_fma8(v8f a, v8f b, v8f acc) {
    return (v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
}
#else
static inline v8f cpu_fma8(v8f a, v8f b, v8f acc) { return acc + a * b; }   /* fused is never set off x86 */
#endif

typedef float v4f __attribute__((vector_size(16)));

/* v8f_sum of each of a0..a3, as a vector: the three levels of ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)),
 * each level's additions done for the four at once, pairing the same operands as v8f_sum. */
CPU_INLINE v4f cpu_sum4(v8f a0, v8f a1, v8f a2, v8f a3) {
    /* level 1: u = lanes 0-3 + lanes 4-7, two accumulators per vector */
    v8f p01 = __builtin_shufflevector(a0, a1, 0, 1, 2, 3, 8, 9, 10, 11) +
              __builtin_shufflevector(a0, a1, 4, 5, 6, 7, 12, 13, 14, 15);
    v8f p23 = __builtin_shufflevector(a2, a3, 0, 1, 2, 3, 8, 9, 10, 11) +
              __builtin_shufflevector(a2, a3, 4, 5, 6, 7, 12, 13, 14, 15);
    /* level 2: u0 + u1 and u2 + u3 of each */
    v8f q = __builtin_shufflevector(p01, p23, 0, 2, 4, 6, 8, 10, 12, 14) +
            __builtin_shufflevector(p01, p23, 1, 3, 5, 7, 9, 11, 13, 15);
    /* level 3: their sum */
    v4f lo = __builtin_shufflevector(q, q, 0, 2, 4, 6), hi = __builtin_shufflevector(q, q, 1, 3, 5, 7);
    return lo + hi;
}

/* out[i * out_stride + j] += (x row i) . (w row j) over columns [0, k), for i < nx, j < nw (= instead of += when
 * store is set): per pair, 8 lane accumulators (lane = column mod 8, from 0), v8f_sum, then the last k mod 8
 * columns one by one - cpu_dot's arithmetic, so each pair's result is that of cpu_dot on its two rows, whatever nx
 * and nw. x rows are x_stride floats apart. nx and nw are constants at every call: the loops unroll and the nx * nw accumulators stay in
 * registers (nx * nw <= 12 leaves room for the operands in AVX2's 16). With fused, every multiply-add is one
 * fused operation (cpu_fma8; matmul's FMA builds), else a multiply and an add. */
CPU_INLINE void cpu_dot_tile(const float *x, int64_t x_stride, const void *w, int64_t w_stride, const bool bf16,
                             int64_t k, const int nx, const int nw, float *out, int64_t out_stride, const bool store,
                             const bool fused) {
    v8f a[CPU_DOT_MAX_NX][CPU_DOT_MAX_NW];
#pragma GCC unroll 8
    for (int i = 0; i < nx; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nw; j++) a[i][j] = v8f_splat(0.0f);
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) {
#pragma GCC unroll 8
        for (int j = 0; j < nw; j++) {
            v8f wv = cpu_w8(w, w_stride, bf16, j, c);
#pragma GCC unroll 8
            for (int i = 0; i < nx; i++)
                a[i][j] = fused ? cpu_fma8(v8f_load(x + i * x_stride + c), wv, a[i][j])
                                : a[i][j] + v8f_load(x + i * x_stride + c) * wv;
        }
    }
    if (c == k && nw % 4 == 0) {   /* no tail columns: four sums at a time */
#pragma GCC unroll 8
        for (int i = 0; i < nx; i++)
#pragma GCC unroll 8
            for (int j = 0; j < nw; j += 4) {
                v4f sums = cpu_sum4(a[i][j], a[i][j + 1], a[i][j + 2], a[i][j + 3]), prev;
                float *o = out + i * out_stride + j;
                if (!store) {
                    memcpy(&prev, o, sizeof prev);
                    sums = prev + sums;
                }
                memcpy(o, &sums, sizeof sums);
            }
        return;
    }
#pragma GCC unroll 8
    for (int i = 0; i < nx; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nw; j++) {
            float s = v8f_sum(&a[i][j]);
            for (int64_t t = c; t < k; t++) {
                float xv = x[i * x_stride + t], wt = cpu_w1(w, w_stride, bf16, j, t);
                s = fused ? __builtin_fmaf(xv, wt, s) : s + xv * wt;
            }
            if (store) out[i * out_stride + j] = s;
            else out[i * out_stride + j] += s;
        }
}

/* Weight rows per cpu_dot_tile call for nx x rows: enough independent accumulators to cover the add latency (8
 * for one row), at most 12. */
#define CPU_DOT_NW_FOR(nx) ((nx) == 1 ? 8 : (nx) <= 3 ? 4 : (nx) == 4 ? 3 : 2)

/* cpu_dot_tile over nx x rows and all n weight rows: groups of CPU_DOT_NW_FOR(nx) weight rows, the rest one by
 * one. */
CPU_INLINE void cpu_dot_rows(const float *x, int64_t x_stride, const void *w, int64_t w_stride, const bool bf16,
                             int64_t k, const int nx, int64_t n, float *out, int64_t out_stride, const bool store,
                             const bool fused) {
    const int nw = CPU_DOT_NW_FOR(nx);
    const size_t row_bytes = (size_t)w_stride * (bf16 ? 2 : 4);
    int64_t j = 0;
    for (; j + nw <= n; j += nw)
        cpu_dot_tile(x, x_stride, (const char *)w + j * row_bytes, w_stride, bf16, k, nx, nw, out + j, out_stride,
                     store, fused);
    for (; j < n; j++)
        cpu_dot_tile(x, x_stride, (const char *)w + j * row_bytes, w_stride, bf16, k, nx, 1, out + j, out_stride,
                     store, fused);
}

/* out[i * out_stride + j] += (or =, with store) (x row i) . (w row j) for i < m, j < n: the x rows in groups of up
 * to CPU_DOT_GROUP_NX. */
CPU_INLINE void cpu_dot_block(const float *x, int64_t x_stride, int64_t m, const void *w, int64_t w_stride,
                              const bool bf16, int64_t k, int64_t n, float *out, int64_t out_stride, const bool store,
                              const bool fused) {
    int64_t i = 0;
    for (; i + CPU_DOT_GROUP_NX <= m; i += CPU_DOT_GROUP_NX)
        cpu_dot_rows(x + i * x_stride, x_stride, w, w_stride, bf16, k, CPU_DOT_GROUP_NX, n, out + i * out_stride,
                     out_stride, store, fused);
    const float *xr = x + i * x_stride;
    float *o = out + i * out_stride;
    switch (m - i) {
    case 2: cpu_dot_rows(xr, x_stride, w, w_stride, bf16, k, 2, n, o, out_stride, store, fused); break;
    case 1: cpu_dot_rows(xr, x_stride, w, w_stride, bf16, k, 1, n, o, out_stride, store, fused); break;
    default: break;
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Two builds of a kernel: the baseline target and AVX2. The AVX2 build of the model ops leaves out FMA, so its
 * arithmetic is the baseline's (8-lane vectors become one instruction instead of two; no operation is fused or
 * reordered): results are bit for bit those of the baseline. matmul's AVX2 build adds FMA (linear.c).
 */
#if defined(__x86_64__)
#define CPU_TWO_BUILDS(name, body)                                                                               \
    static void name##_baseline(void *ctx, int64_t begin, int64_t end) { body(ctx, begin, end); }               \
    __attribute__((target("avx2"))) static void name##_avx2(void *ctx, int64_t begin, int64_t end) {            \
        body(ctx, begin, end);                                                                                   \
    }
#else
#define CPU_TWO_BUILDS(name, body)                                                                               \
    static void name##_baseline(void *ctx, int64_t begin, int64_t end) { body(ctx, begin, end); }               \
    static void name##_avx2(void *ctx, int64_t begin, int64_t end) { body(ctx, begin, end); }
#endif
#define CPU_BUILD(be, name) (cpu_impl(be)->use_avx2 ? name##_avx2 : name##_baseline)

/* True for the weight dtypes matmul and gather_rows decode; FP8 scales must be F32 with a block size. */
bool cpu_weight_supported(const glm53_tensor *w);


/* ------------------------------------------------------------------------------------------------------------
 * Parameters: small 1-D weights (norm weights, biases, gate parameters) read as F32
 */
/* F32 values of a parameter stored as F32 (returned as is), BF16 or F16 (converted into a buffer the caller frees
 * when *owned is set). NULL with *status set on another dtype or on allocation failure. */
const float *cpu_param_f32(const glm53_tensor *p, bool *owned, glm53_status *status);

/* A host F32 view of a parameter, freed by param_release. */
typedef struct {
    const float *v;
    bool owned;
} param_f32;

static inline glm53_status param_get(const glm53_tensor *t, param_f32 *p) {
    glm53_status st;
    p->v = cpu_param_f32(t, &p->owned, &st);
    return st;
}

static inline void param_release(param_f32 *p) {
    if (p->owned) free((void *)p->v);
    p->v = NULL;
    p->owned = false;
}

/* A whole 2-D weight decoded to F32 [rows, cols] (malloc'd; NULL when out of memory), for the small matrices the
 * model ops read whole (the mHC fn). */
float *cpu_weight_to_f32(glm53_backend *be, const glm53_tensor *w);

static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ------------------------------------------------------------------------------------------------------------
 * Ops (the op table entries; shapes and semantics as in backend.h)
 */
glm53_status cpu_matmul(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w);
/* The same, all on the calling thread: for ops that run matmuls inside their own pool tasks (the pool is not
 * reentrant). */
glm53_status cpu_matmul_serial(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w);

glm53_status cpu_rmsnorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                         float eps);
glm53_status cpu_layernorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                           const glm53_tensor *b, float eps);
glm53_status cpu_l2norm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float eps, float scale);
glm53_status cpu_softmax(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x);

glm53_status cpu_unary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, glm53_unary_op op);
glm53_status cpu_binary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *a, const glm53_tensor *b,
                        glm53_binary_op op);
glm53_status cpu_axpby(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float alpha, float beta);
glm53_status cpu_swiglu(glm53_backend *be, glm53_tensor *y, const glm53_tensor *gate, const glm53_tensor *up,
                        float limit);
/* swiglu's arithmetic over n elements on the calling thread. */
void cpu_swiglu_n(float *y, const float *gate, const float *up, int64_t n, float limit);

glm53_status cpu_conv1d_causal(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w);

glm53_status cpu_topk(glm53_backend *be, glm53_tensor *vals, glm53_tensor *idx, const glm53_tensor *x, int32_t k,
                      int64_t n_valid);
glm53_status cpu_gather_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *table,
                             const glm53_tensor *ids);
glm53_status cpu_scatter_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids);


/* GLM-5.3 model ops, one file per block: mhc.c, kda.c, kpool_indexer.c, sparse_mla.c, moe.c */
glm53_status cpu_mhc_expand(glm53_backend *be, glm53_tensor *H, const glm53_tensor *x);
glm53_status cpu_mhc_pre(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                         const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                         const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters);
glm53_status cpu_mhc_post(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y, const glm53_tensor *H_in,
                          const glm53_tensor *post, const glm53_tensor *comb);
glm53_status cpu_mhc_mean(glm53_backend *be, glm53_tensor *y, const glm53_tensor *H);

glm53_status cpu_kda_gate(glm53_backend *be, glm53_tensor *g, const glm53_tensor *f, const glm53_tensor *A_log,
                          const glm53_tensor *dt_bias, int32_t has_lower_bound, float lower_bound);
glm53_status cpu_kda_recurrent(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                               const glm53_tensor *v, const glm53_tensor *g, const glm53_tensor *beta,
                               glm53_tensor *states, const glm53_tensor *slots);
glm53_status cpu_kda_sequences(glm53_backend *be, glm53_tensor *o, const glm53_tensor *const raw[3],
                               const glm53_tensor *const w[3], const glm53_tensor *g, const glm53_tensor *beta,
                               const glm53_kda_seq *seqs, int32_t n_seqs, float eps, float q_scale);
glm53_status cpu_rmsnorm_gated(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *gate,
                               const glm53_tensor *w, float eps);

glm53_status cpu_kpool_compress(glm53_backend *be, glm53_tensor *pooled, const glm53_tensor *kappa,
                                const glm53_tensor *sigma, const glm53_tensor *ape);
glm53_status cpu_kpool_score(glm53_backend *be, glm53_tensor *scores, const glm53_tensor *Q, const glm53_tensor *w,
                             const glm53_tensor *pooled, const glm53_tensor *n_closed, float scale);
glm53_status cpu_kpool_select(glm53_backend *be, glm53_tensor *idx, const glm53_tensor *scores,
                              const glm53_tensor *pos, int32_t pool_size, int32_t n_select, int32_t with_tail);
glm53_status cpu_sparse_mla(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *latent,
                            const glm53_tensor *idx, const glm53_tensor *kv_b, float scale);

glm53_status cpu_moe_route(glm53_backend *be, glm53_tensor *ids, glm53_tensor *weights, const glm53_tensor *logits,
                           const glm53_tensor *bias, int32_t n_group, int32_t topk_group, int32_t norm,
                           float scaling);
glm53_status cpu_moe_experts(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids,
                             const glm53_tensor *weights, const glm53_expert_set *experts, float limit);

/* Vision ops (vision.c) */
glm53_status cpu_rope_2d(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *pos,
                         float theta);
glm53_status cpu_attention_segments(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                    const glm53_tensor *v, const glm53_tensor *cu_seqlens, float scale);

#endif /* GLM53_CPU_OPS_H */
