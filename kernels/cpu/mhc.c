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

typedef struct {
    float *x, *post, *comb;
    const float *H, *fn, *base, *scale;
    int64_t S, D;
    float rms_eps, hc_eps;
    int32_t iters;
} mhc_pre_ctx;

static void mhc_pre_rows(void *vctx, int64_t begin, int64_t end) {
    const mhc_pre_ctx *c = vctx;
    int64_t S = c->S, D = c->D, SD = S * D, n_mix = (2 + S) * S;
    float m[(2 + 16) * 16], pre[16];   /* S <= 16, checked by the caller */
    for (int64_t n = begin; n < end; n++) {
        const float *h = c->H + n * SD;
        /* m = (h / rms(h)) . fn^T; the unweighted RMS normalisation commutes with the projection. */
        double sumsq = 0.0;
        for (int64_t i = 0; i < SD; i++) sumsq += (double)h[i] * h[i];
        float r = 1.0f / sqrtf((float)(sumsq / (double)SD) + c->rms_eps);
        for (int64_t j = 0; j < n_mix; j++) m[j] = cpu_dot(h, c->fn + j * SD, SD) * r;

        float *post = c->post + n * S, *comb = c->comb + n * S * S;
        for (int64_t k = 0; k < S; k++) {
            pre[k] = cpu_sigmoid(m[k] * c->scale[0] + c->base[k]) + c->hc_eps;
            post[k] = 2.0f * cpu_sigmoid(m[S + k] * c->scale[1] + c->base[S + k]);
        }
        /* Sinkhorn: row softmax (+eps), column normalisation, then iters-1 x (row, column). */
        for (int64_t j = 0; j < S; j++) {
            float *row = comb + j * S, mx = -INFINITY, sum = 0.0f;
            for (int64_t k = 0; k < S; k++) {
                row[k] = m[2 * S + j * S + k] * c->scale[2] + c->base[2 * S + j * S + k];
                if (row[k] > mx) mx = row[k];
            }
            for (int64_t k = 0; k < S; k++) sum += (row[k] = expf(row[k] - mx));
            for (int64_t k = 0; k < S; k++) row[k] = row[k] / sum + c->hc_eps;
        }
        for (int32_t it = 0; it < c->iters; it++) {
            if (it > 0) {
                for (int64_t j = 0; j < S; j++) {
                    float sum = 0.0f;
                    for (int64_t k = 0; k < S; k++) sum += comb[j * S + k];
                    for (int64_t k = 0; k < S; k++) comb[j * S + k] /= sum + c->hc_eps;
                }
            }
            for (int64_t k = 0; k < S; k++) {
                float sum = 0.0f;
                for (int64_t j = 0; j < S; j++) sum += comb[j * S + k];
                for (int64_t j = 0; j < S; j++) comb[j * S + k] /= sum + c->hc_eps;
            }
        }
        float *x = c->x + n * D;
        for (int64_t d = 0; d < D; d++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < S; k++) acc += pre[k] * h[k * D + d];
            x[d] = acc;
        }
    }
}

glm53_status cpu_mhc_pre(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                         const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                         const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters) {
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(cpu_is_f32(x) && cpu_is_f32(post) && cpu_is_f32(comb) && cpu_is_f32(H));
    assert(S <= 16 && fn->shape[0] == (2 + S) * S && fn->shape[fn->ndim - 1] == S * D);
    assert(sinkhorn_iters >= 1);
    float *fn32 = cpu_weight_to_f32(be, fn);
    if (!fn32) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "mhc_pre: no memory for fn");
    param_f32 b = {0}, s = {0};
    glm53_status st = param_get(base, &b);
    if (st == GLM53_OK) st = param_get(scale, &s);
    if (st == GLM53_OK) {
        mhc_pre_ctx c = {x->data, post->data, comb->data, H->data, fn32, b.v, s.v, S, D, rms_eps, hc_eps,
                         sinkhorn_iters};
        cpu_parallel_for(be, N, (2 + S) * S * S * D, mhc_pre_rows, &c);
    }
    param_release(&b);
    param_release(&s);
    free(fn32);
    return st;
}

glm53_status cpu_mhc_post(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y, const glm53_tensor *H_in,
                          const glm53_tensor *post, const glm53_tensor *comb) {
    int64_t N = H_in->shape[0], S = H_in->shape[1], D = H_in->shape[2];
    assert(cpu_is_f32(H_out) && cpu_is_f32(y) && cpu_is_f32(H_in) && H_out->data != H_in->data);
    const float *yv = y->data, *h = H_in->data, *pv = post->data, *cv = comb->data;
    float *out = H_out->data;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < S; k++) {
            float *o = out + (n * S + k) * D;
            float pk = pv[n * S + k];
            for (int64_t d = 0; d < D; d++) o[d] = pk * yv[n * D + d];
            for (int64_t j = 0; j < S; j++) {
                float cjk = cv[(n * S + j) * S + k];
                const float *hj = h + (n * S + j) * D;
                for (int64_t d = 0; d < D; d++) o[d] += cjk * hj[d];
            }
        }
    }
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

