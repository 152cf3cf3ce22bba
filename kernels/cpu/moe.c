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

/* The routed experts of one step: the rows routed to each used expert, gathered ([m, D]), through its SwiGLU, into
 * its own output rows ([m, D]); experts are independent, so they run in parallel. */
typedef struct {
    glm53_backend *be;
    const glm53_expert_set *experts;
    const float *x;                 /* [N, D] */
    const int32_t *used;            /* [n_used] expert ids, ascending */
    const int64_t *first;           /* [n_used + 1]: expert u's routed rows are rows[first[u] .. first[u + 1]) */
    const int32_t *rows;            /* [N * K] batch rows, per expert in (row, slot) order */
    float *buf;                     /* per used expert, at first[u] * (2 D + 3 F) floats: x, gate, up, h, y rows */
    int64_t D, F;
    float limit;
} experts_ctx;

static void prefetch_expert(const glm53_expert_set *ex, int32_t e) {
    const glm53_tensor *ts[3] = {ex->gate[e], ex->up[e], ex->down[e]};
    for (int t = 0; t < 3; t++) {
        const char *p = ts[t]->data;
        size_t n = glm53_tensor_nbytes(ts[t]);
        for (size_t b = 0; b < n; b += 64) __builtin_prefetch(p + b, 0, 2);
    }
}

static void experts_run(void *vctx, int64_t begin, int64_t end) {
    experts_ctx *c = vctx;
    const glm53_expert_set *ex = c->experts;
    const int64_t D = c->D, F = c->F;
    for (int64_t u = begin; u < end; u++) {
        /* A small model's experts are read from L3, once per step: the next expert's weights are on their way
         * while this one computes (each expert's own first loads would wait out the miss latency). */
        if (u + 1 < end) prefetch_expert(ex, c->used[u + 1]);
        int32_t e = c->used[u];
        int64_t m = c->first[u + 1] - c->first[u], Fe = ex->gate[e]->shape[0];
        float *xe = c->buf + c->first[u] * (2 * D + 3 * F), *ge = xe + m * D, *ue = ge + m * Fe, *he = ue + m * Fe;
        float *ye = he + m * Fe;
        for (int64_t i = 0; i < m; i++)
            memcpy(xe + i * D, c->x + (int64_t)c->rows[c->first[u] + i] * D, (size_t)D * sizeof(float));
        glm53_tensor tx = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, D}, .data = xe};
        glm53_tensor tg = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, Fe}, .data = ge};
        glm53_tensor tu = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, Fe}, .data = ue};
        glm53_tensor th = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, Fe}, .data = he};
        glm53_tensor ty = {.dtype = GLM53_F32, .ndim = 2, .shape = {m, D}, .data = ye};
        glm53_tensor_set_contiguous(&tx); glm53_tensor_set_contiguous(&tg); glm53_tensor_set_contiguous(&tu);
        glm53_tensor_set_contiguous(&th); glm53_tensor_set_contiguous(&ty);
        /* cannot fail: the caller checked the weights */
        cpu_matmul_serial(c->be, &tg, &tx, ex->gate[e]);
        cpu_matmul_serial(c->be, &tu, &tx, ex->up[e]);
        cpu_swiglu_n(he, ge, ue, m * Fe, c->limit);
        cpu_matmul_serial(c->be, &ty, &th, ex->down[e]);
    }
}

glm53_status cpu_moe_experts(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids,
                             const glm53_tensor *weights, const glm53_expert_set *experts, float limit) {
    const glm53_tensor *const *gate = experts->gate, *const *up = experts->up, *const *down = experts->down;
    int32_t n_experts = experts->n_experts;
    int64_t N = x->shape[0], D = x->shape[1], K = ids->shape[1];
    assert(cpu_is_f32(y) && cpu_is_f32(x) && cpu_is_f32(weights) && ids->dtype == GLM53_I32);
    const int32_t *idv = ids->data;
    const float *wv = weights->data;

    /* Rows routed to each held expert (slot -1 routes nowhere; another rank adds the slots of experts it holds). */
    int64_t F = 0;
    for (int32_t e = 0; e < n_experts; e++) if (gate[e] && gate[e]->shape[0] > F) F = gate[e]->shape[0];
    size_t n_pairs = (size_t)(N * K);
    int64_t *count = calloc((size_t)n_experts + 1, sizeof *count);
    int32_t *used = malloc((size_t)n_experts * sizeof *used), *rows = malloc(n_pairs * sizeof *rows);
    int64_t *first = malloc(((size_t)n_experts + 1) * sizeof *first);
    float *row_w = malloc(n_pairs * sizeof *row_w);
    float *buf = cpu_scratch(be, n_pairs * (size_t)(2 * D + 3 * F) * sizeof(float));
    glm53_status st = GLM53_OK;
    if (!count || !used || !rows || !first || !row_w || !buf) {
        st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "moe_experts: no memory for %lld routed rows", (long long)(N * K));
        goto out;
    }
    for (size_t p = 0; p < n_pairs; p++)
        if (idv[p] >= 0 && idv[p] < n_experts) count[idv[p]]++;
    int64_t n_used = 0, total = 0;
    for (int32_t e = 0; e < n_experts; e++) {
        if (count[e] == 0 || !glm53_expert_is_held(experts, e)) continue;
        if (!gate[e] || !up[e] || !down[e]) {
            st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "moe_experts: expert %d is routed to but has no weights", e);
            goto out;
        }
        /* checked here, on the caller's thread, so that the parallel part cannot fail (an error message set on a
         * worker thread would not reach glm53_last_error) */
        const glm53_tensor *ws[3] = {gate[e], up[e], down[e]};
        for (int t = 0; t < 3; t++)
            if (!cpu_weight_supported(ws[t])) {
                st = GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "moe_experts: weight %s has dtype %s (or a malformed FP8 "
                                "scale)", ws[t]->name ? ws[t]->name : "(unnamed)",
                                glm53_dtype_name((glm53_dtype)ws[t]->dtype));
                goto out;
            }
        used[n_used] = e;
        first[n_used++] = total;
        total += count[e];
    }
    first[n_used] = total;
    /* The (row, slot) pairs of each used expert in batch order, through a map from expert to its place. */
    int64_t *next = count;   /* reused: next free place of each expert, -1 for the unused */
    for (int32_t e = 0; e < n_experts; e++) next[e] = -1;
    for (int64_t u = 0; u < n_used; u++) next[used[u]] = first[u];
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            int32_t e = idv[n * K + k];
            if (e < 0 || e >= n_experts || next[e] < 0) continue;
            rows[next[e]] = (int32_t)n;
            row_w[next[e]++] = wv[n * K + k];
        }

    experts_ctx c = {be, experts, x->data, used, first, rows, buf, D, F, limit};
    if (n_used > 0) {
        prefetch_expert(experts, used[0]);
        cpu_parallel_for(be, n_used, 6 * (total / n_used + 1) * D * F, experts_run, &c);
    }
    /* y = sum over the row's experts in ascending expert order of weight * expert output (the CUDA backend sums
     * in slot order: the two differ only in F32 rounding). */
    memset(y->data, 0, (size_t)(N * D) * sizeof(float));
    for (int64_t u = 0; u < n_used; u++) {
        const float *ye = buf + first[u] * (2 * D + 3 * F) + (first[u + 1] - first[u]) * (D + 3 * gate[used[u]]->shape[0]);
        for (int64_t i = first[u]; i < first[u + 1]; i++) {
            float *dst = (float *)y->data + (int64_t)rows[i] * D;
            const float *src = ye + (i - first[u]) * D;
            for (int64_t d = 0; d < D; d++) dst[d] += row_w[i] * src[d];
        }
    }
out:
    free(count);
    free(used);
    free(rows);
    free(first);
    free(row_w);
    return st;
}
