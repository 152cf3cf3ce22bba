/*
 * kpool_indexer.c - the KPool indexer on the CPU backend: pool compression, scores of closed pools and the
 * per-row selection of positions (ties to the lower pool).
 *
 * A reference implementation the CUDA kernels are tested against: the plain formula of kernels/backend.h
 * (docs/architecture.md has the math), in F32, parallel over the obvious independent axis and nothing cleverer.
 * Weights of any dtype are decoded row by row through cpu_weight_row_to_f32; 1-D parameters through param_get.
 */
#include "kernels/cpu/cpu_ops.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * KPool indexer
 */
glm53_status cpu_kpool_compress(glm53_backend *be, glm53_tensor *pooled, const glm53_tensor *kappa,
                                const glm53_tensor *sigma, const glm53_tensor *ape) {
    int64_t G = pooled->shape[0], dI = pooled->shape[1], P = ape->shape[0];
    assert(cpu_is_f32(pooled) && cpu_is_f32(kappa) && cpu_is_f32(sigma) && P <= 64);
    assert(kappa->shape[0] == G * P && sigma->shape[0] == G * P && ape->shape[1] == dI);
    param_f32 a = {0};
    GLM53_TRY(param_get(ape, &a));
    const float *kv = kappa->data, *sv = sigma->data;
    float *out = pooled->data;
    for (int64_t g = 0; g < G; g++)
        for (int64_t c = 0; c < dI; c++) {
            float logit[64], mx = -INFINITY, sum = 0.0f, acc = 0.0f;
            for (int64_t i = 0; i < P; i++) {
                logit[i] = sv[(g * P + i) * dI + c] + a.v[i * dI + c];
                if (logit[i] > mx) mx = logit[i];
            }
            for (int64_t i = 0; i < P; i++) sum += (logit[i] = expf(logit[i] - mx));
            for (int64_t i = 0; i < P; i++) acc += (logit[i] / sum) * kv[(g * P + i) * dI + c];
            out[g * dI + c] = acc;
        }
    param_release(&a);
    return GLM53_OK;
}

typedef struct {
    float *scores;
    const float *Q, *w, *pooled;
    const int32_t *n_closed;
    int64_t G, Hi, dI;
    float scale;
} score_ctx;

static void kpool_score_rows(void *vctx, int64_t begin, int64_t end) {
    const score_ctx *c = vctx;
    for (int64_t t = begin; t < end; t++) {
        float *row = c->scores + t * c->G;
        int64_t closed = c->n_closed[t];
        for (int64_t g = 0; g < c->G; g++) {
            if (g >= closed) { row[g] = -INFINITY; continue; }
            float s = 0.0f;
            for (int64_t h = 0; h < c->Hi; h++) {
                float dot = cpu_dot(c->Q + (t * c->Hi + h) * c->dI, c->pooled + g * c->dI, c->dI) * c->scale;
                s += c->w[t * c->Hi + h] * (dot > 0.0f ? dot : 0.0f);
            }
            row[g] = s;
        }
    }
}

glm53_status cpu_kpool_score(glm53_backend *be, glm53_tensor *scores, const glm53_tensor *Q, const glm53_tensor *w,
                             const glm53_tensor *pooled, const glm53_tensor *n_closed, float scale) {
    int64_t T = Q->shape[0], Hi = Q->shape[1], dI = Q->shape[2], G = scores->shape[1];
    assert(cpu_is_f32(scores) && cpu_is_f32(Q) && cpu_is_f32(w) && cpu_is_f32(pooled));
    assert(n_closed->dtype == GLM53_I32 && scores->shape[0] == T && pooled->shape[0] >= G);
    score_ctx c = {scores->data, Q->data, w->data, pooled->data, n_closed->data, G, Hi, dI, scale};
    cpu_parallel_for(be, T, G * Hi * dI, kpool_score_rows, &c);
    return GLM53_OK;
}

/* Is pool a a better pick than pool b? Higher score wins, the lower index on ties. */
static bool pool_better(const float *score, int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
}

/* The n best pools of row `score` among [0, G), by a bounded min-heap ordered so the worst kept is on top. */
static void select_best_pools(const float *score, int64_t G, int32_t n, int32_t *heap) {
    int32_t size = 0;
    for (int32_t g = 0; g < G; g++) {
        if (size < n) {
            int32_t i = size++;
            heap[i] = g;
            while (i > 0 && pool_better(score, heap[(i - 1) / 2], heap[i])) {   /* sift up the worse one */
                int32_t p = (i - 1) / 2, tmp = heap[p];
                heap[p] = heap[i];
                heap[i] = tmp;
                i = p;
            }
        } else if (pool_better(score, g, heap[0])) {
            heap[0] = g;
            for (int32_t i = 0;;) {
                int32_t l = 2 * i + 1, r = l + 1, worst = i;
                if (l < size && pool_better(score, heap[worst], heap[l])) worst = l;
                if (r < size && pool_better(score, heap[worst], heap[r])) worst = r;
                if (worst == i) break;
                int32_t tmp = heap[i];
                heap[i] = heap[worst];
                heap[worst] = tmp;
                i = worst;
            }
        }
    }
}

static int compare_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

glm53_status cpu_kpool_select(glm53_backend *be, glm53_tensor *idx, const glm53_tensor *scores,
                              const glm53_tensor *pos, int32_t pool_size, int32_t n_select, int32_t with_tail) {
    int64_t T = idx->shape[0], W = idx->shape[1], G = scores->shape[1];
    assert(idx->dtype == GLM53_I32 && pos->dtype == GLM53_I32 && cpu_is_f32(scores));
    assert(W == (int64_t)n_select * pool_size + (with_tail ? pool_size - 1 : 0));
    int32_t *heap = malloc((size_t)n_select * sizeof(int32_t));
    if (!heap) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "kpool_select: no memory");
    const int32_t *pv = pos->data;
    const float *sv = scores->data;
    for (int64_t t = 0; t < T; t++) {
        int32_t *out = (int32_t *)idx->data + t * W;
        int64_t L = (int64_t)pv[t] + 1, closed = L / pool_size, w = 0;
        if (closed <= n_select) {
            for (int64_t g = 0; g < closed; g++)
                for (int32_t i = 0; i < pool_size; i++) out[w++] = (int32_t)(g * pool_size + i);
        } else {
            assert(closed <= G);
            select_best_pools(sv + t * G, closed, n_select, heap);
            qsort(heap, (size_t)n_select, sizeof *heap, compare_i32);
            for (int32_t s = 0; s < n_select; s++)
                for (int32_t i = 0; i < pool_size; i++) out[w++] = heap[s] * pool_size + i;
        }
        if (with_tail)
            for (int64_t p = closed * pool_size; p < L; p++) out[w++] = (int32_t)p;
        while (w < W) out[w++] = -1;
    }
    free(heap);
    return GLM53_OK;
}

