/*
 * moe.c - MoE on the CPU backend: sigmoid routing with groups and biased choice, and the routed experts
 * (clamped SwiGLU per expert, weighted sum per row).
 *
 * A reference implementation the CUDA kernels are tested against: the plain formula of kernels/backend.h
 * (docs/architecture.md has the math), in F32, parallel over the obvious independent axis and nothing cleverer.
 * Weights of any dtype are decoded row by row through cpu_weight_row_to_f32; 1-D parameters through param_get.
 */
#include "kernels/cpu/cpu_ops.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * MoE
 */
glm53_status cpu_moe_route(glm53_backend *be, glm53_tensor *ids, glm53_tensor *weights, const glm53_tensor *logits,
                           const glm53_tensor *bias, int32_t n_group, int32_t topk_group, int32_t norm,
                           float scaling) {
    int64_t N = logits->shape[0], E = logits->shape[1], K = ids->shape[1];
    assert(cpu_is_f32(logits) && cpu_is_f32(weights) && ids->dtype == GLM53_I32 && n_group >= 1);
    assert(E % n_group == 0 && topk_group >= 1 && topk_group <= n_group && K <= E);
    param_f32 b = {0};
    GLM53_TRY(param_get(bias, &b));
    float *s = malloc((size_t)(2 * E + n_group) * sizeof(float));
    bool *keep = malloc((size_t)E * sizeof(bool));
    if (!s || !keep) {
        free(s);
        free(keep);
        param_release(&b);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "moe_route: no memory");
    }
    float *choice = s + E, *group_score = choice + E;
    int64_t per_group = E / n_group;
    for (int64_t n = 0; n < N; n++) {
        const float *l = (const float *)logits->data + n * E;
        for (int64_t e = 0; e < E; e++) {
            s[e] = cpu_sigmoid(l[e]);
            choice[e] = s[e] + b.v[e];
        }
        /* Group stage: a group's score is the sum of its two best choice scores (one if it has one expert). */
        for (int64_t grp = 0; grp < n_group; grp++) {
            float best = -INFINITY, second = -INFINITY;
            for (int64_t e = grp * per_group; e < (grp + 1) * per_group; e++) {
                if (choice[e] > best) { second = best; best = choice[e]; }
                else if (choice[e] > second) second = choice[e];
            }
            group_score[grp] = per_group >= 2 ? best + second : best;
        }
        for (int64_t e = 0; e < E; e++) keep[e] = n_group == 1;
        for (int32_t picked = 0; n_group > 1 && picked < topk_group; picked++) {
            int64_t best = -1;
            for (int64_t grp = 0; grp < n_group; grp++)
                if (group_score[grp] != -INFINITY && (best < 0 || group_score[grp] > group_score[best])) best = grp;
            for (int64_t e = best * per_group; e < (best + 1) * per_group; e++) keep[e] = true;
            group_score[best] = -INFINITY;
        }
        int32_t *out_ids = (int32_t *)ids->data + n * K;
        float *out_w = (float *)weights->data + n * K, sum = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (keep[e] && (best < 0 || choice[e] > choice[best])) best = e;
            /* Fewer experts survive the group stage than k: the missing slots route nowhere (id -1, weight 0). */
            out_ids[k] = (int32_t)best;
            out_w[k] = best < 0 ? 0.0f : s[best];
            if (best < 0) continue;
            sum += s[best];
            keep[best] = false;
        }
        for (int64_t k = 0; k < K; k++) out_w[k] = (norm ? out_w[k] / (sum + 1e-20f) : out_w[k]) * scaling;
    }
    free(s);
    free(keep);
    param_release(&b);
    return GLM53_OK;
}

glm53_status cpu_moe_experts(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids,
                             const glm53_tensor *weights, const glm53_expert_set *experts, float limit) {
    const glm53_tensor *const *gate = experts->gate, *const *up = experts->up, *const *down = experts->down;
    int32_t n_experts = experts->n_experts;
    int64_t N = x->shape[0], D = x->shape[1], K = ids->shape[1];
    assert(cpu_is_f32(y) && cpu_is_f32(x) && cpu_is_f32(weights) && ids->dtype == GLM53_I32);
    const int32_t *idv = ids->data;
    const float *wv = weights->data;
    memset(y->data, 0, (size_t)(N * D) * sizeof(float));

    /* Rows routed to each expert, then one batched SwiGLU per expert; the outputs are added into y in ascending
     * expert order (the CUDA backend sums in slot order: the two differ only in F32 rounding). */
    int64_t F = gate[0] ? gate[0]->shape[0] : 0;
    for (int32_t e = 0; e < n_experts; e++) if (gate[e] && gate[e]->shape[0] > F) F = gate[e]->shape[0];
    int32_t *rows = malloc((size_t)(N * K) * sizeof(int32_t));
    float *row_w = malloc((size_t)(N * K) * sizeof(float));
    float *buf = malloc((size_t)(N * K) * (size_t)(D + 3 * F + D) * sizeof(float));
    if (!rows || !row_w || !buf) {
        free(rows); free(row_w); free(buf);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "moe_experts: no memory for %lld routed rows", (long long)(N * K));
    }
    glm53_status st = GLM53_OK;
    for (int32_t e = 0; e < n_experts && st == GLM53_OK; e++) {
        int64_t m = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                if (idv[n * K + k] == e) { rows[m] = (int32_t)n; row_w[m] = wv[n * K + k]; m++; }   /* -1: none */
        if (m == 0 || !glm53_expert_is_held(experts, e)) continue;   /* another rank adds those slots */
        if (!gate[e] || !up[e] || !down[e]) {
            st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "moe_experts: expert %d is routed to but has no weights", e);
            break;
        }
        int64_t Fe = gate[e]->shape[0];
        float *xe = buf, *ge = xe + m * D, *ue = ge + m * Fe, *he = ue + m * Fe, *ye = he + m * Fe;
        for (int64_t i = 0; i < m; i++) memcpy(xe + i * D, (const float *)x->data + rows[i] * D, (size_t)D * 4);
        glm53_tensor tx = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, D}, .data = xe};
        glm53_tensor tg = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, Fe}, .data = ge};
        glm53_tensor tu = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, Fe}, .data = ue};
        glm53_tensor th = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, Fe}, .data = he};
        glm53_tensor ty = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, D}, .data = ye};
        glm53_tensor_set_contiguous(&tx); glm53_tensor_set_contiguous(&tg); glm53_tensor_set_contiguous(&tu);
        glm53_tensor_set_contiguous(&th); glm53_tensor_set_contiguous(&ty);
        st = cpu_matmul(be, &tg, &tx, gate[e]);
        if (st == GLM53_OK) st = cpu_matmul(be, &tu, &tx, up[e]);
        if (st == GLM53_OK) st = cpu_swiglu(be, &th, &tg, &tu, limit);
        if (st == GLM53_OK) st = cpu_matmul(be, &ty, &th, down[e]);
        if (st != GLM53_OK) break;
        for (int64_t i = 0; i < m; i++) {
            float *dst = (float *)y->data + rows[i] * D;
            for (int64_t d = 0; d < D; d++) dst[d] += row_w[i] * ye[i * D + d];
        }
    }
    free(rows);
    free(row_w);
    free(buf);
    return st;
}

