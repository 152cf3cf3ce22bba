/*
 * mhc.c - mHC (manifold-constrained hyper-connections) on the CPU backend: expand, pre, post, mean.
 *
 * A reference implementation the CUDA kernels are tested against: the plain formula of kernels/backend.h
 * (docs/architecture.md has the math), in F32, parallel over the obvious independent axis and nothing cleverer.
 * Weights of any dtype are decoded row by row through cpu_weight_row_to_f32; 1-D parameters through param_get.
 */
#include "kernels/cpu/cpu_ops.h"

#include <stdlib.h>

glm53_status cpu_mhc_expand(glm53_backend *be, glm53_tensor *H, const glm53_tensor *x) {
    int64_t N = x->shape[0], D = x->shape[1], S = H->shape[1];
    assert(cpu_is_f32(H) && cpu_is_f32(x) && H->shape[0] == N && H->shape[2] == D);
    float *h = H->data;
    const float *xv = x->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t s = 0; s < S; s++) memcpy(h + (n * S + s) * D, xv + n * D, (size_t)D * sizeof(float));
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * mhc_pre, MHC_GROUP rows side by side. Per row the arithmetic is the plain formula's, in its order; what is shared
 * across rows is only the instruction stream: the projection reuses each loaded weight for every row of the group
 * (cpu_dot_block), and the Sinkhorn iterations - per row a chain of about 40 * S small divisions - run with one
 * row per vector lane, so a group costs about what one row did. A row's results do not depend on its group.
 */
enum { MHC_GROUP = 8, MHC_MAX_S = 16, MHC_MAX_MIX = (2 + MHC_MAX_S) * MHC_MAX_S };

typedef int32_t v8i __attribute__((vector_size(32)));

typedef struct {
    float *x, *post, *comb;                  /* [N, D], [N, S], [N, S, S] */
    const float *H;                          /* [N, S, D] */
    const void *fn;                          /* [(2 + S) * S, S * D], F32 or BF16 (fn_bf16) */
    bool fn_bf16;
    const float *base, *scale;               /* [(2 + S) * S], [3] */
    int64_t N, S, D;
    float rms_eps, hc_eps;
    int32_t iters;
} mhc_pre_ctx;

/* The 8 lanes of v, each through f (expf does not vectorise bit for bit, so it runs per lane). */
CPU_INLINE v8f lanes_expf(v8f v) {
    v8f out;
    for (int l = 0; l < 8; l++) out[l] = expf(v[l]);
    return out;
}

/* 1 / (1 + exp(-z)) per lane: cpu_sigmoid's operations. */
CPU_INLINE v8f lanes_sigmoid(v8f z) { return v8f_splat(1.0f) / (v8f_splat(1.0f) + lanes_expf(-z)); }

/* sumsq[r] = sum over i in order of (double)h[r][i]^2 for the rows r < rows of a group (rows SD floats apart): the
 * eight sequential chains side by side in registers (rows past `rows` repeat row 0 and are not used). */
CPU_INLINE void mhc_sumsq8(const float *h, int64_t SD, int64_t rows, double *sumsq) {
    const float *p[MHC_GROUP];
    for (int r = 0; r < MHC_GROUP; r++) p[r] = h + (r < rows ? r : 0) * SD;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
    for (int64_t i = 0; i < SD; i++) {
        s0 += (double)p[0][i] * p[0][i];
        s1 += (double)p[1][i] * p[1][i];
        s2 += (double)p[2][i] * p[2][i];
        s3 += (double)p[3][i] * p[3][i];
        s4 += (double)p[4][i] * p[4][i];
        s5 += (double)p[5][i] * p[5][i];
        s6 += (double)p[6][i] * p[6][i];
        s7 += (double)p[7][i] * p[7][i];
    }
    sumsq[0] = s0, sumsq[1] = s1, sumsq[2] = s2, sumsq[3] = s3;
    sumsq[4] = s4, sumsq[5] = s5, sumsq[6] = s6, sumsq[7] = s7;
}

/* Group g of rows: [g * MHC_GROUP, +MHC_GROUP) clipped to N. */
CPU_INLINE void mhc_pre_groups(void *vctx, int64_t g_begin, int64_t g_end) {
    const mhc_pre_ctx *c = vctx;
    const int64_t S = c->S, D = c->D, SD = S * D, n_mix = (2 + S) * S;
    float m[MHC_GROUP * MHC_MAX_MIX];                  /* [rows, n_mix] projections */
    v8f mt[MHC_MAX_MIX], pre[MHC_MAX_S], post[MHC_MAX_S], comb[MHC_MAX_S * MHC_MAX_S];   /* lane = row */
    for (int64_t g = g_begin; g < g_end; g++) {
        int64_t n0 = g * MHC_GROUP, rows = c->N - n0 < MHC_GROUP ? c->N - n0 : MHC_GROUP;
        const float *h0 = c->H + n0 * SD;

        /* m = (h / rms(h)) . fn^T; the unweighted RMS normalisation commutes with the projection. The sum of
         * squares is a sequential double chain per row; the rows' chains interleave. */
        double sumsq[MHC_GROUP];
        mhc_sumsq8(h0, SD, rows, sumsq);
        cpu_dot_block(h0, SD, rows, c->fn, SD, c->fn_bf16, SD, n_mix, m, n_mix, true, false);
        for (int64_t j = 0; j < n_mix; j++) mt[j] = v8f_splat(0.0f);   /* rows past N: zeros, never written */
        for (int64_t r = 0; r < rows; r++) {
            float rr = 1.0f / sqrtf((float)(sumsq[r] / (double)SD) + c->rms_eps);
            for (int64_t j = 0; j < n_mix; j++) mt[j][r] = m[r * n_mix + j] * rr;
        }

        const v8f eps = v8f_splat(c->hc_eps);
        for (int64_t k = 0; k < S; k++) {
            pre[k] = lanes_sigmoid(mt[k] * c->scale[0] + c->base[k]) + eps;
            post[k] = 2.0f * lanes_sigmoid(mt[S + k] * c->scale[1] + c->base[S + k]);
        }
        /* Sinkhorn: row softmax (+eps), column normalisation, then iters-1 x (row, column). */
        for (int64_t j = 0; j < S; j++) {
            v8f *row = comb + j * S, mx = v8f_splat(-INFINITY), sum = v8f_splat(0.0f);
            for (int64_t k = 0; k < S; k++) {
                row[k] = mt[2 * S + j * S + k] * c->scale[2] + c->base[2 * S + j * S + k];
                v8i greater = row[k] > mx;   /* the scalar `if (row[k] > mx) mx = row[k]`, NaN included */
                mx = (v8f)(((v8i)row[k] & greater) | ((v8i)mx & ~greater));
            }
            for (int64_t k = 0; k < S; k++) sum += (row[k] = lanes_expf(row[k] - mx));
            for (int64_t k = 0; k < S; k++) row[k] = row[k] / sum + eps;
        }
        for (int32_t it = 0; it < c->iters; it++) {
            if (it > 0) {
                for (int64_t j = 0; j < S; j++) {
                    v8f sum = v8f_splat(0.0f);
                    for (int64_t k = 0; k < S; k++) sum += comb[j * S + k];
                    for (int64_t k = 0; k < S; k++) comb[j * S + k] /= sum + eps;
                }
            }
            for (int64_t k = 0; k < S; k++) {
                v8f sum = v8f_splat(0.0f);
                for (int64_t j = 0; j < S; j++) sum += comb[j * S + k];
                for (int64_t j = 0; j < S; j++) comb[j * S + k] /= sum + eps;
            }
        }

        for (int64_t r = 0; r < rows; r++) {
            int64_t n = n0 + r;
            const float *h = h0 + r * SD;
            for (int64_t k = 0; k < S; k++) c->post[n * S + k] = post[k][r];
            for (int64_t jk = 0; jk < S * S; jk++) c->comb[n * S * S + jk] = comb[jk][r];
            /* x = sum_k pre[k] * h[k], over k in order, 8 columns at a time */
            float *x = c->x + n * D;
            int64_t d = 0;
            for (; d + 8 <= D; d += 8) {
                v8f acc = v8f_splat(0.0f);
                for (int64_t k = 0; k < S; k++) acc += pre[k][r] * v8f_load(h + k * D + d);
                memcpy(x + d, &acc, sizeof acc);
            }
            for (; d < D; d++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < S; k++) acc += pre[k][r] * h[k * D + d];
                x[d] = acc;
            }
        }
    }
}

CPU_TWO_BUILDS(mhc_pre_run, mhc_pre_groups)

/* A 1-D parameter of at most n values as F32 (F32 as is; BF16 and F16 converted, which is exact). */
static glm53_status small_param(const glm53_tensor *p, float *out, int64_t n) {
    int64_t count = glm53_tensor_numel(p);
    if (count > n) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "mhc: parameter %s has %lld values, at most %lld expected",
                                     p->name ? p->name : "(unnamed)", (long long)count, (long long)n);
    switch (p->dtype) {
    case GLM53_F32: memcpy(out, p->data, (size_t)count * sizeof(float)); return GLM53_OK;
    case GLM53_BF16: cpu_bf16_to_f32_n(p->data, count, out); return GLM53_OK;
    case GLM53_F16:
        for (int64_t i = 0; i < count; i++) out[i] = glm53_f16_to_f32(((const uint16_t *)p->data)[i]);
        return GLM53_OK;
    default:
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cpu: parameter %s has dtype %s, not F32, BF16 or F16",
                          p->name ? p->name : "(unnamed)", glm53_dtype_name((glm53_dtype)p->dtype));
    }
}

glm53_status cpu_mhc_pre(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                         const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                         const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters) {
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(cpu_is_f32(x) && cpu_is_f32(post) && cpu_is_f32(comb) && cpu_is_f32(H));
    assert(S <= MHC_MAX_S && fn->shape[0] == (2 + S) * S && fn->shape[fn->ndim - 1] == S * D);
    assert(sinkhorn_iters >= 1);
    float b[MHC_MAX_MIX], s[3];
    GLM53_TRY(small_param(base, b, (2 + S) * S));
    GLM53_TRY(small_param(scale, s, 3));
    /* F32 and BF16 fn rows are read in place; other dtypes are decoded once per call. */
    bool in_place = (fn->dtype == GLM53_F32 || fn->dtype == GLM53_BF16) && glm53_tensor_is_contiguous(fn);
    float *fn32 = in_place ? NULL : cpu_weight_to_f32(be, fn);
    if (!in_place && !fn32) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "mhc_pre: no memory for fn");
    mhc_pre_ctx c = {x->data, post->data, comb->data, H->data, in_place ? fn->data : fn32,
                     in_place && fn->dtype == GLM53_BF16, b, s, N, S, D, rms_eps, hc_eps, sinkhorn_iters};
    int64_t n_groups = (N + MHC_GROUP - 1) / MHC_GROUP;
    /* per group: the projection, and the Sinkhorn's divisions (a vector of 8 each) and exponentials */
    int64_t group_cost = MHC_GROUP * 2 * (2 + S) * S * S * D + sinkhorn_iters * 2 * S * S * CPU_COST_EXP / 4 +
                         MHC_GROUP * (2 * S + S * S) * CPU_COST_EXP;
    cpu_parallel_for(be, n_groups, group_cost, CPU_BUILD(be, mhc_pre_run), &c);
    free(fn32);
    return GLM53_OK;
}

typedef struct {
    float *out;                               /* H_out [N, S, D] */
    const float *y, *h, *post, *comb;         /* [N, D], H_in [N, S, D], [N, S], [N, S, S] */
    int64_t S, D;
} mhc_post_ctx;

/* Rows [begin, end): out[k] = post[k] * y + sum_j comb[j][k] * h[j], over j in order, 8 columns at a time. */
CPU_INLINE void mhc_post_rows(void *vctx, int64_t begin, int64_t end) {
    const mhc_post_ctx *c = vctx;
    const int64_t S = c->S, D = c->D, D8 = D / 8 * 8;
    for (int64_t n = begin; n < end; n++) {
        const float *y = c->y + n * D;
        for (int64_t k = 0; k < S; k++) {
            float *o = c->out + (n * S + k) * D;
            const float pk = c->post[n * S + k];
            const float *cjk = c->comb + n * S * S + k;   /* comb[j][k] at cjk[j * S] */
            for (int64_t d = 0; d < D8; d += 8) {
                v8f acc = pk * v8f_load(y + d);
                for (int64_t j = 0; j < S; j++) acc += cjk[j * S] * v8f_load(c->h + (n * S + j) * D + d);
                memcpy(o + d, &acc, sizeof acc);
            }
            for (int64_t d = D8; d < D; d++) {
                float acc = pk * y[d];
                for (int64_t j = 0; j < S; j++) acc += cjk[j * S] * c->h[(n * S + j) * D + d];
                o[d] = acc;
            }
        }
    }
}

CPU_TWO_BUILDS(mhc_post_run, mhc_post_rows)

glm53_status cpu_mhc_post(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y, const glm53_tensor *H_in,
                          const glm53_tensor *post, const glm53_tensor *comb) {
    int64_t N = H_in->shape[0], S = H_in->shape[1], D = H_in->shape[2];
    assert(cpu_is_f32(H_out) && cpu_is_f32(y) && cpu_is_f32(H_in) && H_out->data != H_in->data);
    mhc_post_ctx c = {H_out->data, y->data, H_in->data, post->data, comb->data, S, D};
    cpu_parallel_for(be, N, 2 * S * (S + 1) * D, CPU_BUILD(be, mhc_post_run), &c);
    return GLM53_OK;
}

glm53_status cpu_mhc_mean(glm53_backend *be, glm53_tensor *y, const glm53_tensor *H) {
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(cpu_is_f32(y) && cpu_is_f32(H));
    const float *h = H->data;
    float *yv = y->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            float acc = 0.0f;
            for (int64_t s = 0; s < S; s++) acc += h[(n * S + s) * D + d];
            yv[n * D + d] = acc / (float)S;
        }
    return GLM53_OK;
}

