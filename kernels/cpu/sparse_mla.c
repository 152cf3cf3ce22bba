/*
 * sparse_mla.c - sparse MLA in absorbed form over the selected latent rows, on the CPU backend.
 *
 * A reference implementation the CUDA kernels are tested against: the plain formula of kernels/backend.h
 * (docs/architecture.md has the math), in F32, parallel over the obvious independent axis and nothing cleverer.
 * kv_b is read in place when F32 or BF16, decoded row by row through cpu_weight_row_to_f32 otherwise.
 */
#include "kernels/cpu/cpu_ops.h"

#include <float.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * Sparse MLA (absorbed)
 */
typedef struct {
    glm53_backend *be;
    float *o;
    const float *q, *latent;
    const int32_t *idx;
    const glm53_tensor *kv_b;
    int64_t T, H, dk, dv, R, W, cap;
    float scale;
    bool failed;
} mla_ctx;

/* One head per item: the head's key and value rows of kv_b (read in place when F32 or BF16, decoded once per
 * item otherwise), then every query row. The sums over kv_b run 8 latent columns at a time, each column's terms
 * in the formula's order. */
CPU_INLINE void sparse_mla_heads(void *vctx, int64_t begin, int64_t end) {
    mla_ctx *c = vctx;
    int64_t dk = c->dk, dv = c->dv, R = c->R, W = c->W, R8 = R / 8 * 8;
    const glm53_tensor *kv_b = c->kv_b;
    const bool in_place = kv_b->dtype == GLM53_F32 || kv_b->dtype == GLM53_BF16, bf16 = kv_b->dtype == GLM53_BF16;
    float *buf = malloc((size_t)((in_place ? 0 : (dk + dv) * R) + 2 * R + W) * sizeof(float));
    if (!buf) { c->failed = true; return; }
    float *qh = buf, *acc = qh + R, *s = acc + R, *decoded = s + W;
    for (int64_t h = begin; h < end; h++) {
        const void *wkv;   /* [dk + dv, R]: the head's key rows, then its value rows */
        bool wb = bf16;
        if (in_place) {
            wkv = (const char *)kv_b->data + h * (dk + dv) * kv_b->stride[0] * (bf16 ? 2 : 4);
        } else {
            for (int64_t r = 0; r < dk + dv; r++)
                cpu_weight_row_to_f32(kv_b, cpu_impl(c->be)->fp8_table, h * (dk + dv) + r, 0, R, decoded + r * R);
            wkv = decoded;
            wb = false;
        }
        int64_t ws = in_place ? kv_b->stride[0] : R;
        for (int64_t t = 0; t < c->T; t++) {
            const float *q = c->q + (t * c->H + h) * dk;
            const int32_t *sel = c->idx + t * W;
            /* qh[r] = sum_i q[i] * Wk[i][r] */
            for (int64_t r = 0; r < R; r++) qh[r] = 0.0f;
            for (int64_t i = 0; i < dk; i++) {
                for (int64_t r = 0; r < R8; r += 8) {
                    v8f v = v8f_load(qh + r) + q[i] * cpu_w8(wkv, ws, wb, i, r);
                    memcpy(qh + r, &v, sizeof v);
                }
                for (int64_t r = R8; r < R; r++) qh[r] += q[i] * cpu_w1(wkv, ws, wb, i, r);
            }
            float mx = -INFINITY;
            for (int64_t j = 0; j < W; j++) {
                if (sel[j] < 0) { s[j] = -INFINITY; continue; }
                assert(sel[j] < c->cap);
                s[j] = cpu_dot(qh, c->latent + (int64_t)sel[j] * R, R) * c->scale;
                if (s[j] > mx) mx = s[j];
            }
            float *o = c->o + (t * c->H + h) * dv;
            if (mx == -INFINITY) {   /* no visible position (only possible without the tail) */
                for (int64_t i = 0; i < dv; i++) o[i] = 0.0f;
                continue;
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < W; j++) sum += (s[j] = sel[j] < 0 ? 0.0f : expf(s[j] - mx));
            for (int64_t r = 0; r < R; r++) acc[r] = 0.0f;
            for (int64_t j = 0; j < W; j++) {
                if (sel[j] < 0) continue;
                float p = s[j] / sum;
                const float *cj = c->latent + (int64_t)sel[j] * R;
                for (int64_t r = 0; r < R8; r += 8) {
                    v8f v = v8f_load(acc + r) + p * v8f_load(cj + r);
                    memcpy(acc + r, &v, sizeof v);
                }
                for (int64_t r = R8; r < R; r++) acc[r] += p * cj[r];
            }
            /* o[i] = Wv[i] . acc */
            cpu_dot_block(acc, R, 1, (const char *)wkv + dk * ws * (wb ? 2 : 4), ws, wb, R, dv, o, dv, true, false);
        }
    }
    free(buf);
}

CPU_TWO_BUILDS(sparse_mla_run, sparse_mla_heads)

glm53_status cpu_sparse_mla(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *latent,
                            const glm53_tensor *idx, const glm53_tensor *kv_b, float scale) {
    int64_t T = q->shape[0], H = q->shape[1], dk = q->shape[2], dv = o->shape[2], R = latent->shape[1];
    assert(cpu_is_f32(o) && cpu_is_f32(q) && cpu_is_f32(latent) && idx->dtype == GLM53_I32);
    assert(kv_b->shape[0] == H * (dk + dv) && kv_b->shape[1] == R && idx->shape[0] == T);
    mla_ctx c = {be, o->data, q->data, latent->data, idx->data, kv_b, T, H, dk, dv, R, idx->shape[1],
                 latent->shape[0], scale, false};
    cpu_parallel_for(be, H, T * (idx->shape[1] * (4 * R + CPU_COST_EXP) + 2 * (dk + dv) * R),
                     CPU_BUILD(be, sparse_mla_run), &c);
    if (c.failed) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "sparse_mla: no memory for a head's weights");
    return GLM53_OK;
}

