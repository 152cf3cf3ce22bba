/*
 * kda.c - the graph of KDA, Kimi delta attention (docs/architecture.md section 3): loading a layer's weights
 * and running it over the batch.
 *
 *   q, k, v   = xn * W^T, each through the depthwise causal conv (kernel K) over the sequence and SiLU
 *   g         = forget gate of f_b(f_a(xn))        beta = sigmoid(xn * b_proj^T)      gz = g_b(g_a(xn))
 *   q, k      = l2norm (q also times dk^-1/2);  o = delta-rule recurrence per head, F32 state
 *   y         = o_proj(rmsnorm_gated(o, gz))
 *
 * Per sequence the conv reads its K-1 history rows from the sequence's conv ring (gathered by ring slot) and
 * writes the raw rows the next steps need back into it (scattered by ring slot); the recurrence reads the state
 * of the sequence's length from the state ring and writes the states a rollback may need. The ring slots are
 * step metadata (step.c fills them), the same for every KDA layer. A backend with the fused kda_sequences op
 * (CPU, CUDA) does that per-sequence part for all the batch's sequences in one op; the op-by-op loop is the
 * definition, and what runs elsewhere, in traced steps and for shapes the fused op does not take.
 */
#include "core/engine/graph.h"
#include "core/engine/weights.h"

#include <stdio.h>

glm53_status kda_load(glm53_rank *rk, const char *prefix, kda_weights *w, int layer) {
    const glm53_text_config *c = &rk->model->config.text;
    int64_t D = c->hidden_size, Hk = c->linear_num_heads, dk = c->linear_head_dim, C = Hk * dk;
    int64_t K = c->linear_conv_kernel_dim;
    /* Heads split across the tp ranks: every [C, ...] weight by rows (head-major), o_proj by columns. */
    LOAD2_TP_ROWS(&w->q_proj, C, D, "layers.%d.self_attn.q_proj.weight", layer);
    LOAD2_TP_ROWS(&w->k_proj, C, D, "layers.%d.self_attn.k_proj.weight", layer);
    LOAD2_TP_ROWS(&w->v_proj, C, D, "layers.%d.self_attn.v_proj.weight", layer);
    const char *conv_names[3] = {"q", "k", "v"};
    glm53_tensor *conv[3] = {&w->q_conv, &w->k_conv, &w->v_conv};
    for (int i = 0; i < 3; i++) {
        /* The checkpoint's depthwise [C, 1, K] is used as [C, K]: viewed before it is placed. */
        char name[256];
        snprintf(name, sizeof name, "%slayers.%d.self_attn.%s_conv1d.weight", prefix, layer, conv_names[i]);
        const glm53_tensor *t;
        GLM53_TRY(glm53_weight_find(rk->model, name, 3, GLM53_DIMS(C, 1, K), "the config", &t));
        glm53_tensor flat = glm53_tensor_reshape(t, 2, C, K, 0);
        GLM53_TRY(glm53_weight_place(rk, &flat, GLM53_SHARD_TP(rk, 0), conv[i]));
    }
    LOAD2_TP_ROWS(&w->b_proj, Hk, D, "layers.%d.self_attn.b_proj.weight", layer);
    LOAD2(&w->f_a, dk, D, "layers.%d.self_attn.f_a_proj.weight", layer);   /* low-rank inputs: whole */
    LOAD2_TP_ROWS(&w->f_b, C, dk, "layers.%d.self_attn.f_b_proj.weight", layer);
    LOAD2(&w->g_a, dk, D, "layers.%d.self_attn.g_a_proj.weight", layer);
    LOAD2_TP_ROWS(&w->g_b, C, dk, "layers.%d.self_attn.g_b_proj.weight", layer);
    LOAD1_TP(&w->A_log, Hk, "layers.%d.self_attn.A_log", layer);
    LOAD1_TP(&w->dt_bias, C, "layers.%d.self_attn.dt_bias", layer);
    LOAD1(&w->o_norm, dk, "layers.%d.self_attn.o_norm.weight", layer);   /* per head, shared by all heads */
    LOAD2_TP_COLS(&w->o_proj, D, C, "layers.%d.self_attn.o_proj.weight", layer);
    return GLM53_OK;
}

/* out[T,C] = silu(conv1d(history rows of the sequence | its raw rows)); then the ring keeps the raw rows the
 * next steps (and a rollback of up to max_rollback tokens) need. raw[N,C] holds the whole batch's rows. */
static void conv_window(step_ctx *sc, const seq_slice *s, glm53_tensor *ring, const glm53_tensor *raw,
                        const glm53_tensor *w, glm53_tensor *out) {
    glm53_backend *be = sc->be;
    int64_t T = s->n_rows, K = w->shape[1], C = raw->shape[1], n_zero = K - 1 - s->n_hist;
    glm53_tensor *xpad = NEW(sc->act, 2, T + K - 1, C, 0);
    if (sc->st != GLM53_OK) return;
    /* K-1 history rows (positions pos0-K+1 .. pos0-1): zeros before the sequence start, then the ring rows. */
    if (n_zero > 0) {
        glm53_tensor zeros = rows(xpad, 0, n_zero);
        OP(be->ops->fill(be, &zeros, 0.0f));
    }
    if (s->n_hist > 0) {
        glm53_tensor hist = rows(xpad, n_zero, s->n_hist);
        OP(be->ops->gather_rows(be, &hist, ring, s->conv_hist));
    }
    glm53_tensor dst_new = rows(xpad, K - 1, T), src_new = rows(raw, s->row0, T);
    OP(be->ops->copy(be, &dst_new, &src_new));
    OP(be->ops->conv1d_causal(be, out, xpad, w));
    OP(be->ops->unary(be, out, out, GLM53_UNARY_SILU));
    glm53_tensor kept = rows(raw, s->row0 + T - s->n_write, s->n_write);
    OP(be->ops->scatter_rows(be, ring, &kept, s->conv_write));
}

void kda_forward(step_ctx *sc, const layer_weights *L, int layer, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    const kda_weights *w = &L->kda;
    int64_t N = sc->N, Hk = sc->rank->kda_heads, dk = c->linear_head_dim, C = Hk * dk;   /* this rank's heads */

    glm53_tensor *qkv[3] = {NEW(sc->act, 2, N, C, 0), NEW(sc->act, 2, N, C, 0), NEW(sc->act, 2, N, C, 0)};
    const glm53_tensor *conv_w[3] = {&w->q_conv, &w->k_conv, &w->v_conv};
    glm53_tensor *fa = NEW(sc->act, 2, N, dk, 0), *f = NEW(sc->act, 2, N, C, 0), *g = NEW(GLM53_F32, 2, N, C, 0);
    glm53_tensor *beta = NEW(GLM53_F32, 2, N, Hk, 0);
    glm53_tensor *ga = NEW(sc->act, 2, N, dk, 0), *gz = NEW(sc->act, 2, N, C, 0);
    /* Every projection of xn at once (one launch on the CUDA decode path). */
    glm53_tensor *of_xn[6] = {qkv[0], qkv[1], qkv[2], fa, beta, ga};
    const glm53_tensor *proj[6] = {&w->q_proj, &w->k_proj, &w->v_proj, &w->f_a, &w->b_proj, &w->g_a};
    matmuls_of_x(sc, of_xn, xn, proj, 6);
    OP(be->ops->matmul(be, f, fa, &w->f_b));
    OP(be->ops->kda_gate(be, g, f, &w->A_log, &w->dt_bias, c->linear_has_lower_bound, c->linear_lower_bound));
    OP(be->ops->unary(be, beta, beta, GLM53_UNARY_SIGMOID));
    OP(be->ops->matmul(be, gz, ga, &w->g_b));
    glm53_tensor *o = NEW(sc->act, 3, N, Hk, dk);
    trace(sc, layer, "kda_q_raw", qkv[0]);
    trace(sc, layer, "kda_g", g);
    trace(sc, layer, "kda_beta", beta);
    trace(sc, layer, "kda_gz", gz);

    bool fused = be->ops->kda_sequences && !sc->m->trace_dir && sc->st == GLM53_OK;
    if (fused) {
        /* The whole per-sequence part in one op (a backend that has it runs the sequences and heads side by
         * side); traced steps take the op-by-op path below, which has the intermediates to show, and so do
         * shapes the fused op refuses (GLM53_ERR_UNSUPPORTED, before it has done anything). */
        glm53_kda_seq *ks = sc->plan->kda_seqs;
        for (int32_t i = 0; i < sc->n_seqs; i++) {
            const seq_slice *s = &sc->slices[i];
            layer_cache *lc = seq_cache(s->seq, sc->rank, layer);
            ks[i] = (glm53_kda_seq){.row0 = s->row0, .n_rows = s->n_rows, .n_hist = s->n_hist,
                                    .conv_hist = s->conv_hist, .n_write = s->n_write, .conv_write = s->conv_write,
                                    .conv = {&lc->conv[0], &lc->conv[1], &lc->conv[2]}, .states = &lc->states,
                                    .slots = s->kda_slots};
        }
        const glm53_tensor *raw[3] = {qkv[0], qkv[1], qkv[2]};
        glm53_status st = be->ops->kda_sequences(be, o, raw, conv_w, g, beta, ks, sc->n_seqs, 1e-6f,
                                                 1.0f / sqrtf((float)dk));
        if (st == GLM53_ERR_UNSUPPORTED) {
            glm53_clear_error();
            fused = false;
        } else {
            sc->st = st;
        }
    }
    for (int32_t i = 0; i < sc->n_seqs && sc->st == GLM53_OK && !fused; i++) {
        const seq_slice *s = &sc->slices[i];
        layer_cache *lc = seq_cache(s->seq, sc->rank, layer);
        int64_t T = s->n_rows;
        glm53_plan_mark mark = glm53_plan_mark_get(sc->plan);
        glm53_tensor *cq[3];
        for (int j = 0; j < 3; j++) {
            cq[j] = NEW(sc->act, 2, T, C, 0);
            if (sc->st == GLM53_OK) conv_window(sc, s, &lc->conv[j], qkv[j], conv_w[j], cq[j]);
        }
        if (sc->st != GLM53_OK) break;
        trace(sc, layer, "kda_q_conv", cq[0]);
        trace(sc, layer, "kda_v_conv", cq[2]);
        glm53_tensor qh = glm53_tensor_reshape(cq[0], 2, T * Hk, dk, 0), kh = glm53_tensor_reshape(cq[1], 2, T * Hk, dk, 0);
        OP(be->ops->l2norm(be, &qh, &qh, 1e-6f, 1.0f / sqrtf((float)dk)));
        OP(be->ops->l2norm(be, &kh, &kh, 1e-6f, 1.0f));
        glm53_tensor q3 = glm53_tensor_reshape(cq[0], 3, T, Hk, dk), k3 = glm53_tensor_reshape(cq[1], 3, T, Hk, dk);
        glm53_tensor v3 = glm53_tensor_reshape(cq[2], 3, T, Hk, dk), o3 = rows(o, s->row0, T);
        glm53_tensor g_rows = rows(g, s->row0, T), b_rows = rows(beta, s->row0, T);
        glm53_tensor g3 = glm53_tensor_reshape(&g_rows, 3, T, Hk, dk);
        OP(be->ops->kda_recurrent(be, &o3, &q3, &k3, &v3, &g3, &b_rows, &lc->states, s->kda_slots));
        glm53_plan_reset(sc->plan, mark);
    }
    trace(sc, layer, "kda_core", o);
    glm53_tensor oh = glm53_tensor_reshape(o, 2, N * Hk, dk, 0), gzh = glm53_tensor_reshape(gz, 2, N * Hk, dk, 0);
    OP(be->ops->rmsnorm_gated(be, &oh, &oh, &gzh, &w->o_norm, c->rms_norm_eps));
    trace(sc, layer, "kda_normed", o);
    glm53_tensor o2 = glm53_tensor_reshape(o, 2, N, C, 0);
    OP(be->ops->matmul(be, y, &o2, &w->o_proj));
}
