/*
 * kda.c - KDA (Kimi delta attention) on the CPU backend: the depthwise causal conv1d over q, k, v, the
 * forget gate and the token-by-token delta-rule recurrence with an F32 state.
 *
 * A reference implementation the CUDA kernels are tested against: the plain formula of kernels/backend.h
 * (docs/architecture.md has the math), in F32, parallel over the obvious independent axis and nothing cleverer.
 * Weights of any dtype are decoded row by row through cpu_weight_row_to_f32; 1-D parameters through param_get.
 */
#include "kernels/cpu/cpu_ops.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * Depthwise causal conv1d. The caller keeps the last K-1 input rows of a sequence as history and stacks the T new
 * rows under them, so output row t sees input rows t .. t+K-1 and the op itself needs no padding or state. Work
 * items are output elements (t, c), so a decode step (T = 1) still spreads its channels over the threads.
 */
typedef struct conv_job {
    float       *y;   /* [T, C] */
    const float *x;   /* [T+K-1, C] */
    const void  *w;   /* [C, K], F32 or BF16 (read in place) or F16 (decoded into w32) */
    glm53_dtype  w_dtype;
    int64_t      c, k;
} conv_job;

static void conv_range(void *ctx, int64_t begin, int64_t end) {
    const conv_job *job = ctx;
    const int64_t C = job->c, K = job->k;
    const bool bf16 = job->w_dtype == GLM53_BF16;
    for (int64_t item = begin; item < end; item++) {
        int64_t t = item / C, c = item % C;
        const float *x = job->x + t * C + c;
        float acc = 0.0f;
        for (int64_t i = 0; i < K; i++) acc += cpu_w1(job->w, K, bf16, c, i) * x[i * C];
        job->y[item] = acc;
    }
}

/* y[T,C][t][c] = sum_i w[c][i] * x[t+i][c]; x[T+K-1, C] F32, w[C,K] (or [C,1,K]) F32, BF16 or F16. */
glm53_status cpu_conv1d_causal(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w) {
    assert(cpu_is_f32(x) && cpu_is_f32(y));
    assert(w->data && glm53_tensor_is_contiguous(w));
    int64_t T = glm53_tensor_rows(y), C = cpu_cols(y), K = cpu_cols(w);
    assert(K >= 1 && glm53_tensor_rows(w) == C);
    assert(cpu_cols(x) == C && glm53_tensor_rows(x) == T + K - 1);

    conv_job job = {.y = y->data, .x = x->data, .w = w->data, .w_dtype = (glm53_dtype)w->dtype, .c = C, .k = K};
    float *w32 = NULL;
    if (w->dtype != GLM53_F32 && w->dtype != GLM53_BF16) {   /* F16 (or an unsupported dtype: the error) */
        glm53_status st;
        bool owned;
        const float *p = cpu_param_f32(w, &owned, &st);
        if (st != GLM53_OK) return st;
        w32 = (float *)p;
        job.w = p, job.w_dtype = GLM53_F32;
    }
    cpu_parallel_for(be, T * C, 2 * K, conv_range, &job);
    free(w32);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * KDA
 */
typedef struct {
    float *g;
    const float *f, *a_log, *dt_bias;
    int64_t C, dk;
    int32_t has_lower_bound;
    float lower_bound;
} gate_job;

static void gate_rows(void *ctx, int64_t begin, int64_t end) {
    const gate_job *job = ctx;
    const int64_t C = job->C;
    for (int64_t n = begin; n < end; n++)
        for (int64_t ch = 0; ch < C; ch++) {
            float rate = expf(job->a_log[ch / job->dk]), u = job->f[n * C + ch] + job->dt_bias[ch];
            job->g[n * C + ch] = job->has_lower_bound ? job->lower_bound * cpu_sigmoid(rate * u)
                                                      : -rate * (u > 20.0f ? u : log1pf(expf(u)));
        }
}

glm53_status cpu_kda_gate(glm53_backend *be, glm53_tensor *g, const glm53_tensor *f, const glm53_tensor *A_log,
                          const glm53_tensor *dt_bias, int32_t has_lower_bound, float lower_bound) {
    int64_t N = f->shape[0], C = f->shape[1], heads = glm53_tensor_numel(A_log), dk = C / heads;
    assert(cpu_is_f32(g) && cpu_is_f32(f) && heads * dk == C && glm53_tensor_numel(dt_bias) == C);
    param_f32 a = {0}, dt = {0};
    glm53_status st = param_get(A_log, &a);
    if (st == GLM53_OK) st = param_get(dt_bias, &dt);
    if (st == GLM53_OK) {
        gate_job job = {g->data, f->data, a.v, dt.v, C, dk, has_lower_bound, lower_bound};
        cpu_parallel_for(be, N, 3 * CPU_COST_EXP * C, gate_rows, &job);   /* two exponentials and a logarithm */
    }
    param_release(&a);
    param_release(&dt);
    return st;
}

typedef struct {
    float *o;
    const float *q, *k, *v, *g, *beta;
    float *states;          /* [ring, H, dk, dv] */
    const int32_t *slots;   /* [T + 1]: the slot read, then the slot written after each row (-1: none) */
    int64_t T, H, dk, dv;
    float *scratch;         /* [H, dk, dv]: the state after a row whose slot is -1 (prefill only), or NULL */
} kda_ctx;

/* One row of the recurrence for one head: S_out = the state after the row, from S_in (they may be the same
 * memory: each element is read before it is written). The plain formula's five passes over the state fused into
 * two, with every element's operations in the formula's order:
 *   pass 1, per state row i in order:  S[i] = S_in[i] * exp(g[i]);  u += S[i] * k[i]
 *   then                                u = beta * (v - u)
 *   pass 2, per state row i in order:  S[i] += k[i] * u;  o += S[i] * q[i]
 * Vectorised over the dv columns (8 at a time), which keeps each column's arithmetic. */
CPU_INLINE void kda_row(float *S_out, const float *S_in, const float *q, const float *k, const float *v,
                        const float *g, float b, float *o, int64_t dk, int64_t dv) {
    enum { MAX_DV = 256 };
    float u[MAX_DV];
    int64_t j8 = dv / 8 * 8;
    for (int64_t j = 0; j < dv; j++) u[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        const float decay = expf(g[i]), ki = k[i];
        const float *src = S_in + i * dv;
        float *dst = S_out + i * dv;
        for (int64_t j = 0; j < j8; j += 8) {
            v8f sv = v8f_load(src + j) * decay, uv = v8f_load(u + j) + sv * ki;
            memcpy(dst + j, &sv, sizeof sv);
            memcpy(u + j, &uv, sizeof uv);
        }
        for (int64_t j = j8; j < dv; j++) u[j] += (dst[j] = src[j] * decay) * ki;
    }
    for (int64_t j = 0; j < dv; j++) u[j] = b * (v[j] - u[j]);
    for (int64_t j = 0; j < dv; j++) o[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        const float ki = k[i], qi = q[i];
        float *row = S_out + i * dv;
        for (int64_t j = 0; j < j8; j += 8) {
            v8f sv = v8f_load(row + j) + ki * v8f_load(u + j), ov = v8f_load(o + j) + sv * qi;
            memcpy(row + j, &sv, sizeof sv);
            memcpy(o + j, &ov, sizeof ov);
        }
        for (int64_t j = j8; j < dv; j++) o[j] += (row[j] += ki * u[j]) * qi;
    }
}

/* One head per item: its state evolves over the T rows, read from the slot the sequence's length is in and
 * written to the slots of the lengths the ring keeps (in place when a step writes every row's state, as decode
 * does; through the scratch otherwise). */
CPU_INLINE void kda_heads(void *vctx, int64_t begin, int64_t end) {
    const kda_ctx *c = vctx;
    int64_t H = c->H, dk = c->dk, dv = c->dv, slot_size = H * dk * dv;
    for (int64_t h = begin; h < end; h++) {
        const float *cur = c->states + c->slots[0] * slot_size + h * dk * dv;
        for (int64_t t = 0; t < c->T; t++) {
            float *next = c->slots[1 + t] >= 0 ? c->states + c->slots[1 + t] * slot_size + h * dk * dv
                                               : c->scratch + h * dk * dv;
            kda_row(next, cur, c->q + (t * H + h) * dk, c->k + (t * H + h) * dk, c->v + (t * H + h) * dv,
                    c->g + (t * H + h) * dk, c->beta[t * H + h], c->o + (t * H + h) * dv, dk, dv);
            cur = next;
        }
    }
}

CPU_TWO_BUILDS(kda_run, kda_heads)

glm53_status cpu_kda_recurrent(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                               const glm53_tensor *v, const glm53_tensor *g, const glm53_tensor *beta,
                               glm53_tensor *states, const glm53_tensor *slots) {
    int64_t T = q->shape[0], H = q->shape[1], dk = q->shape[2], dv = v->shape[2];
    assert(cpu_is_f32(o) && cpu_is_f32(q) && cpu_is_f32(k) && cpu_is_f32(v) && cpu_is_f32(g) &&
           cpu_is_f32(beta) && cpu_is_f32(states));
    assert(states->ndim == 4 && states->shape[1] == H && states->shape[2] == dk && states->shape[3] == dv);
    assert(slots->dtype == GLM53_I32 && glm53_tensor_numel(slots) == T + 1);
    if (dv > 256) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "kda_recurrent: head value width %lld > 256", (long long)dv);
    const int32_t *sl = slots->data;
    bool all_kept = true;
    for (int64_t t = 0; t <= T; t++) {
        assert(sl[t] < states->shape[0] && (t == 0 || t < T || sl[t] >= 0));
        if (t > 0 && sl[t] < 0) all_kept = false;
    }
    float *scratch = NULL;
    if (!all_kept) {
        scratch = malloc((size_t)(H * dk * dv) * sizeof(float));
        if (!scratch) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "kda_recurrent: no memory for the state");
    }
    kda_ctx c = {o->data, q->data, k->data, v->data, g->data, beta->data, states->data, sl, T, H, dk, dv, scratch};
    cpu_parallel_for(be, H, T * (dk * dv * 8 + CPU_COST_EXP * dk), CPU_BUILD(be, kda_run), &c);
    free(scratch);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * kda_sequences: the per-sequence part of a KDA layer for the whole batch, one (sequence, head) per item. An item
 * computes its head's channels of q, k and v row by row (conv over the history and new rows, SiLU, the per-head
 * L2 norms), runs the recurrence for the row at once, and at the end writes its channels of the kept raw rows
 * into the conv rings (after every read of them: the new rows may take the slots of the history just read). The
 * arithmetic of each element is that of conv1d_causal, unary SiLU, l2norm and kda_recurrent, in their order.
 */
typedef struct {
    float *o;                           /* [N, H, dv] */
    const float *raw[3];                /* [N, H * width[j]] */
    const float *wt[3];                 /* the conv weights transposed, [K, H * width[j]] F32 */
    const float *g, *beta;              /* [N, H * dk], [N, H] */
    const glm53_kda_seq *seqs;
    int64_t H, dk, dv, K;
    float eps, q_scale;
    float *scratch;                     /* [n_seqs, H, dk, dv] states of unkept rows, or NULL */
    const float *zeros;                 /* [max width] the rows before a sequence's start */
} kda_seqs_ctx;

/* SiLU of the conv of one head's channels [c0, c0 + width) at one row: y[i] = silu(sum over taps in order of
 * wt[tap][c0 + i] * src[tap][i]), 8 channels at a time; conv1d_causal's and SiLU's operations per element. */
CPU_INLINE void conv_silu(float *y, const float *const *src, const float *wt, int64_t C, int64_t c0, int64_t K,
                          int64_t width) {
    int64_t i = 0;
    for (; i + 8 <= width; i += 8) {
        v8f acc = v8f_splat(0.0f);
        for (int64_t tap = 0; tap < K; tap++) acc += v8f_load(wt + tap * C + c0 + i) * v8f_load(src[tap] + i);
        v8f e;
        for (int l = 0; l < 8; l++) e[l] = expf(-acc[l]);
        v8f out = acc / (v8f_splat(1.0f) + e);
        memcpy(y + i, &out, sizeof out);
    }
    for (; i < width; i++) {
        float acc = 0.0f;
        for (int64_t tap = 0; tap < K; tap++) acc += wt[tap * C + c0 + i] * src[tap][i];
        y[i] = acc / (1.0f + expf(-acc));
    }
}

CPU_INLINE void kda_seq_heads(void *vctx, int64_t begin, int64_t end) {
    const kda_seqs_ctx *c = vctx;
    const int64_t H = c->H, dk = c->dk, dv = c->dv, K = c->K, width[3] = {dk, dk, dv};
    enum { MAX_WIDTH = 256, MAX_K = 16 };
    float qkv[3][MAX_WIDTH];
    const float *src[MAX_K];
    for (int64_t item = begin; item < end; item++) {
        const int64_t si = item / H, h = item % H;
        const glm53_kda_seq *sq = &c->seqs[si];
        const int64_t T = sq->n_rows, n_zero = K - 1 - sq->n_hist, slot_size = H * dk * dv;
        const int32_t *hist = sq->n_hist > 0 ? sq->conv_hist->data : NULL, *slots = sq->slots->data;
        float *states = sq->states->data;
        const float *cur = states + slots[0] * slot_size + h * dk * dv;
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = sq->row0 + t;
            for (int j = 0; j < 3; j++) {
                /* the K rows of [zeros | history | new rows] row t sees, at this head's channels */
                const int64_t Cj = H * width[j], c0 = h * width[j];
                const float *ring = sq->conv[j]->data;
                for (int64_t tap = 0; tap < K; tap++) {
                    int64_t r = t + tap;
                    src[tap] = r < n_zero ? c->zeros
                               : r < K - 1 ? ring + (int64_t)hist[r - n_zero] * Cj + c0
                                           : c->raw[j] + (sq->row0 + r - (K - 1)) * Cj + c0;
                }
                conv_silu(qkv[j], src, c->wt[j], Cj, c0, K, width[j]);
            }
            float inv_q = 1.0f / sqrtf(cpu_dot(qkv[0], qkv[0], dk) + c->eps);
            for (int64_t i = 0; i < dk; i++) qkv[0][i] = qkv[0][i] * inv_q * c->q_scale;
            float inv_k = 1.0f / sqrtf(cpu_dot(qkv[1], qkv[1], dk) + c->eps);
            for (int64_t i = 0; i < dk; i++) qkv[1][i] = qkv[1][i] * inv_k * 1.0f;
            float *next = slots[1 + t] >= 0 ? states + slots[1 + t] * slot_size + h * dk * dv
                                            : c->scratch + (si * H + h) * dk * dv;
            kda_row(next, cur, qkv[0], qkv[1], qkv[2], c->g + row * H * dk + h * dk, c->beta[row * H + h],
                    c->o + (row * H + h) * dv, dk, dv);
            cur = next;
        }
        const int32_t *write = sq->conv_write->data;
        for (int j = 0; j < 3; j++) {
            const int64_t Cj = H * width[j];
            float *ring = sq->conv[j]->data;
            for (int64_t r = 0; r < sq->n_write; r++)
                memcpy(ring + (int64_t)write[r] * Cj + h * width[j],
                       c->raw[j] + (sq->row0 + T - sq->n_write + r) * Cj + h * width[j],
                       (size_t)width[j] * sizeof(float));
        }
    }
}

CPU_TWO_BUILDS(kda_seqs_run, kda_seq_heads)

glm53_status cpu_kda_sequences(glm53_backend *be, glm53_tensor *o, const glm53_tensor *const raw[3],
                               const glm53_tensor *const w[3], const glm53_tensor *g, const glm53_tensor *beta,
                               const glm53_kda_seq *seqs, int32_t n_seqs, float eps, float q_scale) {
    int64_t H = o->shape[1], dv = o->shape[2], N = o->shape[0], K = cpu_cols(w[0]);
    int64_t dk = cpu_cols(raw[0]) / H;
    assert(cpu_is_f32(o) && cpu_is_f32(g) && cpu_is_f32(beta) && o->ndim == 3);
    for (int j = 0; j < 3; j++)
        assert(cpu_is_f32(raw[j]) && glm53_tensor_rows(raw[j]) == N && cpu_cols(w[j]) == K &&
               glm53_tensor_rows(w[j]) == cpu_cols(raw[j]));
    assert(cpu_cols(raw[2]) == H * dv && cpu_cols(g) == H * dk);
    if (dk > 256 || dv > 256)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "kda_sequences: head widths %lld, %lld > 256", (long long)dk,
                          (long long)dv);
    if (K > 16) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "kda_sequences: conv kernel %lld > 16", (long long)K);
    kda_seqs_ctx c = {.o = o->data, .g = g->data, .beta = beta->data, .seqs = seqs, .H = H, .dk = dk, .dv = dv,
                      .K = K, .eps = eps, .q_scale = q_scale};
    glm53_status st = GLM53_OK;
    bool all_kept = true;
    for (int32_t i = 0; i < n_seqs; i++) {
        const int32_t *sl = seqs[i].slots->data;
        assert(seqs[i].states->shape[1] == H && seqs[i].states->shape[2] == dk && seqs[i].states->shape[3] == dv);
        for (int64_t t = 1; t <= seqs[i].n_rows; t++) all_kept = all_kept && sl[t] >= 0;
    }
    /* The conv weights transposed to [K, C] floats (exact for F32, BF16 and F16), so that 8 channels' taps are
     * one load; then a row of zeros for the history before a sequence's start. */
    int64_t C3[3] = {cpu_cols(raw[0]), cpu_cols(raw[1]), cpu_cols(raw[2])}, w_floats = 0, max_width = dk > dv ? dk : dv;
    for (int j = 0; j < 3; j++) w_floats += K * C3[j];
    float *wt = cpu_scratch(be, (size_t)(w_floats + max_width) * sizeof(float));
    if (!wt) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "kda_sequences: no memory for the conv weights");
    for (int j = 0; j < 3 && st == GLM53_OK; j++) {
        c.raw[j] = raw[j]->data;
        float *dst = wt;
        for (int jj = 0; jj < j; jj++) dst += K * C3[jj];
        bool owned;
        const float *w32 = cpu_param_f32(w[j], &owned, &st);   /* F32 as is, BF16 and F16 converted */
        if (st != GLM53_OK) break;
        for (int64_t ch = 0; ch < C3[j]; ch++)
            for (int64_t tap = 0; tap < K; tap++) dst[tap * C3[j] + ch] = w32[ch * K + tap];
        if (owned) free((void *)w32);
        c.wt[j] = dst;
    }
    float *zeros = wt + w_floats;
    for (int64_t i = 0; i < max_width; i++) zeros[i] = 0.0f;
    c.zeros = zeros;
    if (st == GLM53_OK && !all_kept) {
        c.scratch = malloc((size_t)(n_seqs * H * dk * dv) * sizeof(float));
        if (!c.scratch) st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "kda_sequences: no memory for the states");
    }
    if (st == GLM53_OK) {
        int64_t rows = 0;
        for (int32_t i = 0; i < n_seqs; i++) rows += seqs[i].n_rows;
        int64_t per_item = (rows / (n_seqs > 0 ? n_seqs : 1) + 1) *
                           (2 * 3 * dk * K + 8 * dk * dv + CPU_COST_EXP * (3 * dk + dk));   /* SiLU, decay */
        cpu_parallel_for(be, (int64_t)n_seqs * H, per_item, CPU_BUILD(be, kda_seqs_run), &c);
    }
    free(c.scratch);
    return st;
}
