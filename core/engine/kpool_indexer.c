/*
 * kpool_indexer.c - the graph of the KPool indexer (docs/architecture.md section 4), which picks the positions
 * each query row of a sparse MLA layer attends to.
 *
 *   per row:       kappa = layernorm(xn * wk^T)   sigma = xn * compress_gate^T   Qi = qa * wq_b^T
 *                  wi = (xn * weights_proj^T) * Hi^-1/2
 *   per sequence:  kappa and sigma rows go to the cache; each pool of P positions that this step closes is
 *                  compressed once into its pooled key (kept in the cache); when the closed pools outnumber the
 *                  budget (index_topk / P), every row scores them and keeps the best (equal scores: the lower
 *                  pool); the selection, with the open pool's positions, lands in the slice's idx.
 * A layer with a "shared" indexer has none of this: its rows reuse the latest full layer's selection.
 */
#include "core/engine/graph.h"
#include "core/engine/weights.h"

glm53_status kpool_indexer_load(glm53_rank *rk, const char *prefix, kpool_indexer_weights *w, int layer) {
    const glm53_text_config *c = &rk->model->config.text;
    int64_t D = c->hidden_size, Dq = c->q_lora_rank, Hi = c->index_n_heads, dI = c->index_head_dim;
    w->present = true;
    LOAD2(&w->wq_b, Hi * dI, Dq, "layers.%d.self_attn.indexer.wq_b.weight", layer);
    LOAD2(&w->wk, dI, D, "layers.%d.self_attn.indexer.wk.weight", layer);
    LOAD1(&w->k_norm_w, dI, "layers.%d.self_attn.indexer.k_norm.weight", layer);
    LOAD1(&w->k_norm_b, dI, "layers.%d.self_attn.indexer.k_norm.bias", layer);
    LOAD2(&w->weights_proj, Hi, D, "layers.%d.self_attn.indexer.weights_proj.weight", layer);
    LOAD2(&w->ape, c->index_kpool, dI, "layers.%d.self_attn.indexer.index_kpool_compress_ape", layer);
    LOAD2(&w->compress_gate, dI, D, "layers.%d.self_attn.indexer.index_kpool_compress_gate", layer);
    return GLM53_OK;
}

void kpool_indexer_forward(step_ctx *sc, const kpool_indexer_weights *w, int layer, const glm53_tensor *xn,
                           const glm53_tensor *qa) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    int64_t N = sc->N, Hi = c->index_n_heads, dI = c->index_head_dim;
    int64_t P = c->index_kpool, n_select = c->index_topk / P;
    int with_tail = c->index_kpool_always_select_tail;

    glm53_tensor *kap = NEW(sc->act, 2, N, dI, 0), *sig = NEW(sc->act, 2, N, dI, 0);
    glm53_tensor *Qi = NEW(sc->act, 3, N, Hi, dI), *wi = NEW(GLM53_F32, 2, N, Hi, 0);
    OP(be->ops->matmul(be, kap, xn, &w->wk));
    OP(be->ops->layernorm(be, kap, kap, &w->k_norm_w, &w->k_norm_b, 1e-6f));
    OP(be->ops->matmul(be, sig, xn, &w->compress_gate));
    if (sc->st == GLM53_OK) {
        glm53_tensor Qi2 = glm53_tensor_reshape(Qi, 2, N, Hi * dI, 0);
        OP(be->ops->matmul(be, &Qi2, qa, &w->wq_b));
    }
    OP(be->ops->matmul(be, wi, xn, &w->weights_proj));
    OP(be->ops->axpby(be, wi, wi, 1.0f / sqrtf((float)Hi), 0.0f));
    trace(sc, layer, "kpool_kappa", kap);
    trace(sc, layer, "kpool_sigma", sig);
    trace(sc, layer, "kpool_Qi", Qi);
    trace(sc, layer, "kpool_wi", wi);

    for (int32_t i = 0; i < sc->n_seqs && sc->st == GLM53_OK; i++) {
        seq_slice *s = &sc->slices[i];
        layer_cache *lc = seq_cache(s->seq, sc->rank, layer);
        int64_t T = s->n_rows, pos0 = s->pos0;
        glm53_plan_mark mark = glm53_plan_mark_get(sc->plan);
        glm53_tensor ks = rows(kap, s->row0, T), ss = rows(sig, s->row0, T);
        OP(be->ops->scatter_rows(be, &lc->kappa, &ks, s->pos));
        OP(be->ops->scatter_rows(be, &lc->sigma, &ss, s->pos));
        /* Pools closed by this step's rows, compressed once and kept in the cache. */
        int64_t G0 = pos0 / P, G1 = (pos0 + T) / P;
        if (G1 > G0) {
            glm53_tensor pooled = rows(&lc->pooled, G0, G1 - G0);
            glm53_tensor kr = rows(&lc->kappa, G0 * P, (G1 - G0) * P), sr = rows(&lc->sigma, G0 * P, (G1 - G0) * P);
            OP(be->ops->kpool_compress(be, &pooled, &kr, &sr, &w->ape));
        }
        /* Scores matter only for rows with more closed pools than the budget; otherwise every pool is taken. */
        glm53_tensor *scores = NEW(GLM53_F32, 2, T, G1 > n_select ? G1 : 1, 0);
        if (G1 > n_select && sc->st == GLM53_OK) {
            glm53_tensor Qr = rows(Qi, s->row0, T), wr = rows(wi, s->row0, T);
            glm53_tensor pooled = rows(&lc->pooled, 0, G1);
            OP(be->ops->kpool_score(be, scores, &Qr, &wr, &pooled, s->n_closed, 1.0f / sqrtf((float)dI)));
        }
        OP(be->ops->kpool_select(be, s->idx, scores, s->pos, (int32_t)P, (int32_t)n_select, with_tail));
        if (lc->cap_positions)   /* research capture: this sequence asked for its selections (a download) */
            OP(be->ops->download(be, lc->cap_positions + pos0 * s->idx->shape[1], s->idx));
        if (G1 > n_select) trace(sc, layer, "kpool_scores", scores);
        glm53_plan_reset(sc->plan, mark);
    }
    sc->have_selection = sc->st == GLM53_OK;
}
