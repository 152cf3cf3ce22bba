/*
 * ops_model.c - the GLM-5.3 model ops of the CPU backend: mHC, KDA, the KPool indexer, sparse MLA and MoE.
 *
 * These are the reference implementations the CUDA kernels are tested against, so each is written as the
 * plain formula of backend.h / glm53-architecture.md section 4, in F32, parallel over the obvious independent
 * axis (rows, heads or experts) and nothing cleverer. Weights of any dtype are decoded row by row through
 * cpu_weight_row_to_f32; 1-D parameters through cpu_param_f32.
 */
#include "cpu_model_ops.h"

#include <float.h>
#include <stdlib.h>

/* A host F32 view of a small parameter, freed by param_release. */
typedef struct {
    const float *v;
    bool owned;
} param_f32;

static glm53_status param_get(const glm53_tensor *t, param_f32 *p) {
    glm53_status st;
    p->v = cpu_param_f32(t, &p->owned, &st);
    return st;
}

static void param_release(param_f32 *p) {
    if (p->owned) free((void *)p->v);
    p->v = NULL;
    p->owned = false;
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Whole 2-D weight decoded to F32 [rows, cols]; for the small matrices the model ops use (mHC fn). */
static float *weight_to_f32(glm53_backend *be, const glm53_tensor *w) {
    int64_t rows = w->shape[0], cols = w->shape[w->ndim - 1];
    float *out = malloc((size_t)(rows * cols) * sizeof(float));
    if (!out) return NULL;
    for (int64_t r = 0; r < rows; r++) cpu_weight_row_to_f32(w, cpu_impl(be)->fp8_table, r, 0, cols, out + r * cols);
    return out;
}

/* ------------------------------------------------------------------------------------------------------------
 * mHC
 */
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
            pre[k] = sigmoidf(m[k] * c->scale[0] + c->base[k]) + c->hc_eps;
            post[k] = 2.0f * sigmoidf(m[S + k] * c->scale[1] + c->base[S + k]);
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
    float *fn32 = weight_to_f32(be, fn);
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

/* ------------------------------------------------------------------------------------------------------------
 * KDA
 */
glm53_status cpu_kda_gate(glm53_backend *be, glm53_tensor *g, const glm53_tensor *f, const glm53_tensor *A_log,
                          const glm53_tensor *dt_bias, int32_t has_lower_bound, float lower_bound) {
    int64_t N = f->shape[0], C = f->shape[1], heads = glm53_tensor_numel(A_log), dk = C / heads;
    assert(cpu_is_f32(g) && cpu_is_f32(f) && heads * dk == C && glm53_tensor_numel(dt_bias) == C);
    param_f32 a = {0}, dt = {0};
    glm53_status st = param_get(A_log, &a);
    if (st == GLM53_OK) st = param_get(dt_bias, &dt);
    if (st == GLM53_OK) {
        const float *fv = f->data;
        float *gv = g->data;
        for (int64_t n = 0; n < N; n++)
            for (int64_t ch = 0; ch < C; ch++) {
                float rate = expf(a.v[ch / dk]), u = fv[n * C + ch] + dt.v[ch];
                gv[n * C + ch] = has_lower_bound ? lower_bound * sigmoidf(rate * u)
                                                 : -rate * (u > 20.0f ? u : log1pf(expf(u)));
            }
    }
    param_release(&a);
    param_release(&dt);
    return st;
}

typedef struct {
    float *o;
    const float *q, *k, *v, *g, *beta;
    float *state;
    glm53_tensor *const *snapshots;
    int64_t T, H, dk, dv;
} kda_ctx;

/* One head per item: its state [dk, dv] evolves over the T rows in a private copy. */
static void kda_heads(void *vctx, int64_t begin, int64_t end) {
    const kda_ctx *c = vctx;
    int64_t H = c->H, dk = c->dk, dv = c->dv;
    float *S = malloc((size_t)(dk * dv + dv) * sizeof(float));
    float *u = S + dk * dv;
    if (!S) return;   /* cannot happen in practice; the caller pre-checks a small allocation */
    for (int64_t h = begin; h < end; h++) {
        memcpy(S, c->state + h * dk * dv, (size_t)(dk * dv) * sizeof(float));
        for (int64_t t = 0; t < c->T; t++) {
            const float *q = c->q + (t * H + h) * dk, *k = c->k + (t * H + h) * dk;
            const float *v = c->v + (t * H + h) * dv, *g = c->g + (t * H + h) * dk;
            float b = c->beta[t * H + h];
            for (int64_t i = 0; i < dk; i++) {
                float decay = expf(g[i]);
                for (int64_t j = 0; j < dv; j++) S[i * dv + j] *= decay;
            }
            for (int64_t j = 0; j < dv; j++) u[j] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) u[j] += S[i * dv + j] * k[i];
            for (int64_t j = 0; j < dv; j++) u[j] = b * (v[j] - u[j]);
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) S[i * dv + j] += k[i] * u[j];
            float *o = c->o + (t * H + h) * dv;
            for (int64_t j = 0; j < dv; j++) o[j] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) o[j] += S[i * dv + j] * q[i];
            if (c->snapshots && c->snapshots[t])
                memcpy((float *)c->snapshots[t]->data + h * dk * dv, S, (size_t)(dk * dv) * sizeof(float));
        }
        memcpy(c->state + h * dk * dv, S, (size_t)(dk * dv) * sizeof(float));
    }
    free(S);
}

glm53_status cpu_kda_recurrent(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                               const glm53_tensor *v, const glm53_tensor *g, const glm53_tensor *beta,
                               glm53_tensor *state, glm53_tensor *const *snapshots) {
    int64_t T = q->shape[0], H = q->shape[1], dk = q->shape[2], dv = v->shape[2];
    assert(cpu_is_f32(o) && cpu_is_f32(q) && cpu_is_f32(k) && cpu_is_f32(v) && cpu_is_f32(g) &&
           cpu_is_f32(beta) && cpu_is_f32(state));
    assert(state->shape[0] == H && state->shape[1] == dk && state->shape[2] == dv);
    void *probe = malloc((size_t)(dk * dv + dv) * sizeof(float));
    if (!probe) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "kda_recurrent: no memory for the state");
    free(probe);
    kda_ctx c = {o->data, q->data, k->data, v->data, g->data, beta->data, state->data, snapshots, T, H, dk, dv};
    cpu_parallel_for(be, H, T * dk * dv * 4, kda_heads, &c);
    return GLM53_OK;
}

glm53_status cpu_rmsnorm_gated(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *gate,
                               const glm53_tensor *w, float eps) {
    int64_t M = glm53_tensor_rows(x), d = cpu_cols(x);
    assert(cpu_is_f32(y) && cpu_is_f32(x) && cpu_is_f32(gate) && glm53_tensor_numel(w) == d);
    param_f32 wp = {0};
    GLM53_TRY(param_get(w, &wp));
    const float *xv = x->data, *gv = gate->data;
    float *yv = y->data;
    for (int64_t m = 0; m < M; m++) {
        double sumsq = 0.0;
        for (int64_t i = 0; i < d; i++) sumsq += (double)xv[m * d + i] * xv[m * d + i];
        float r = 1.0f / sqrtf((float)(sumsq / (double)d) + eps);
        for (int64_t i = 0; i < d; i++)
            yv[m * d + i] = wp.v[i] * (xv[m * d + i] * r) * sigmoidf(gv[m * d + i]);
    }
    param_release(&wp);
    return GLM53_OK;
}

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

/* One head per item: decode the head's key and value rows of kv_b once, then run every query row. */
static void sparse_mla_heads(void *vctx, int64_t begin, int64_t end) {
    mla_ctx *c = vctx;
    int64_t dk = c->dk, dv = c->dv, R = c->R, W = c->W;
    float *wkv = malloc((size_t)((dk + dv) * R + 2 * R + W) * sizeof(float));
    if (!wkv) { c->failed = true; return; }
    float *qh = wkv + (dk + dv) * R, *acc = qh + R, *s = acc + R;
    for (int64_t h = begin; h < end; h++) {
        for (int64_t r = 0; r < dk + dv; r++)
            cpu_weight_row_to_f32(c->kv_b, cpu_impl(c->be)->fp8_table, h * (dk + dv) + r, 0, R, wkv + r * R);
        const float *Wk = wkv, *Wv = wkv + dk * R;
        for (int64_t t = 0; t < c->T; t++) {
            const float *q = c->q + (t * c->H + h) * dk;
            const int32_t *sel = c->idx + t * W;
            for (int64_t r = 0; r < R; r++) qh[r] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t r = 0; r < R; r++) qh[r] += q[i] * Wk[i * R + r];
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
                for (int64_t r = 0; r < R; r++) acc[r] += p * cj[r];
            }
            for (int64_t i = 0; i < dv; i++) o[i] = cpu_dot(Wv + i * R, acc, R);
        }
    }
    free(wkv);
}

glm53_status cpu_sparse_mla(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *latent,
                            const glm53_tensor *idx, const glm53_tensor *kv_b, float scale) {
    int64_t T = q->shape[0], H = q->shape[1], dk = q->shape[2], dv = o->shape[2], R = latent->shape[1];
    assert(cpu_is_f32(o) && cpu_is_f32(q) && cpu_is_f32(latent) && idx->dtype == GLM53_I32);
    assert(kv_b->shape[0] == H * (dk + dv) && kv_b->shape[1] == R && idx->shape[0] == T);
    mla_ctx c = {be, o->data, q->data, latent->data, idx->data, kv_b, T, H, dk, dv, R, idx->shape[1],
                 latent->shape[0], scale, false};
    cpu_parallel_for(be, H, T * idx->shape[1] * R * 2 + (dk + dv) * R, sparse_mla_heads, &c);
    if (c.failed) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "sparse_mla: no memory for a head's weights");
    return GLM53_OK;
}

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
            s[e] = sigmoidf(l[e]);
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
                             const glm53_tensor *weights, const glm53_tensor *const *gate,
                             const glm53_tensor *const *up, const glm53_tensor *const *down, int32_t n_experts,
                             float limit) {
    int64_t N = x->shape[0], D = x->shape[1], K = ids->shape[1];
    assert(cpu_is_f32(y) && cpu_is_f32(x) && cpu_is_f32(weights) && ids->dtype == GLM53_I32);
    const int32_t *idv = ids->data;
    const float *wv = weights->data;
    memset(y->data, 0, (size_t)(N * D) * sizeof(float));

    /* Rows routed to each expert, then one batched SwiGLU per expert (experts in ascending id order). */
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
        if (m == 0) continue;
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
