/*
 * sparse_mla.c - the graph of sparse MLA, NoPE multi-head latent attention over the positions the KPool
 * indexer selects (docs/architecture.md section 5): loading a layer's weights and running it over the batch.
 *
 *   qa = rmsnorm(xn * q_a^T);  q = qa * q_b^T [N, Hm, dn];  latent = rmsnorm(xn * kv_a^T) [N, R] -> the cache
 *   the indexer (kpool_indexer.c) selects positions per row; o = sparse_mla(q, latent cache, selection) in the
 *   absorbed form (kv_b's key half pulled into latent space, its value half applied after the weighted sum)
 *   y = o * o_proj^T
 */
#include "core/engine/graph.h"
#include "core/engine/weights.h"

glm53_status sparse_mla_load(glm53_rank *rk, const char *prefix, sparse_mla_weights *w, int layer) {
    const glm53_text_config *c = &rk->model->config.text;
    int64_t D = c->hidden_size, Hm = c->num_attention_heads, Dq = c->q_lora_rank, R = c->kv_lora_rank;
    int64_t dn = c->qk_nope_head_dim, dvm = c->v_head_dim;
    LOAD2(&w->q_a, Dq, D, "layers.%d.self_attn.q_a_proj.weight", layer);
    LOAD1(&w->q_a_norm, Dq, "layers.%d.self_attn.q_a_layernorm.weight", layer);
    /* Heads split across the tp ranks (q_b and kv_b are head-major by rows, o_proj by columns); the latent
     * projections are whole, so every rank keeps the whole latent cache. */
    LOAD2_TP_ROWS(&w->q_b, Hm * dn, Dq, "layers.%d.self_attn.q_b_proj.weight", layer);
    LOAD2(&w->kv_a, R, D, "layers.%d.self_attn.kv_a_proj_with_mqa.weight", layer);
    LOAD1(&w->kv_a_norm, R, "layers.%d.self_attn.kv_a_layernorm.weight", layer);
    LOAD2_TP_ROWS(&w->kv_b, Hm * (dn + dvm), R, "layers.%d.self_attn.kv_b_proj.weight", layer);
    LOAD2_TP_COLS(&w->o_proj, D, Hm * dvm, "layers.%d.self_attn.o_proj.weight", layer);
    return GLM53_OK;
}

void sparse_mla_forward(step_ctx *sc, const layer_weights *L, int layer, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    const sparse_mla_weights *w = &L->mla;
    int64_t N = sc->N, Hm = sc->rank->mla_heads, Dq = c->q_lora_rank, R = c->kv_lora_rank;   /* this rank's heads */
    int64_t dn = c->qk_nope_head_dim, dvm = c->v_head_dim;

    glm53_tensor *qa = NEW(sc->act, 2, N, Dq, 0), *q = NEW(sc->act, 3, N, Hm, dn), *lat = NEW(sc->act, 2, N, R, 0);
    glm53_tensor *of_xn[2] = {qa, lat};
    const glm53_tensor *proj[2] = {&w->q_a, &w->kv_a};
    matmuls_of_x(sc, of_xn, xn, proj, 2);
    OP(be->ops->rmsnorm(be, qa, qa, &w->q_a_norm, c->rms_norm_eps));
    glm53_tensor q2 = glm53_tensor_reshape(q, 2, N, Hm * dn, 0);
    OP(be->ops->matmul(be, &q2, qa, &w->q_b));
    OP(be->ops->rmsnorm(be, lat, lat, &w->kv_a_norm, c->rms_norm_eps));
    glm53_tensor *o = NEW(sc->act, 3, N, Hm, dvm);
    trace(sc, layer, "mla_qa", qa);
    trace(sc, layer, "mla_q", q);
    trace(sc, layer, "mla_latent", lat);

    if (L->indexer.present) kpool_indexer_forward(sc, &L->indexer, layer, xn, qa);
    else if (!sc->have_selection && sc->st == GLM53_OK)
        sc->st = GLM53_FAIL(GLM53_ERR_FORMAT, "layer %d shares an indexer but no full indexer ran before it", layer);

    for (int32_t i = 0; i < sc->n_seqs && sc->st == GLM53_OK; i++) {
        seq_slice *s = &sc->slices[i];
        layer_cache *lc = seq_cache(s->seq, sc->rank, layer);
        glm53_tensor src = rows(lat, s->row0, s->n_rows), qr = rows(q, s->row0, s->n_rows);
        glm53_tensor orow = rows(o, s->row0, s->n_rows);
        OP(be->ops->scatter_rows(be, &lc->latent, &src, s->pos));
        OP(be->ops->sparse_mla(be, &orow, &qr, &lc->latent, s->idx, &w->kv_b, 1.0f / sqrtf((float)dn)));
    }
    trace(sc, layer, "mla_o", o);
    glm53_tensor o2 = glm53_tensor_reshape(o, 2, N, Hm * dvm, 0);
    OP(be->ops->matmul(be, y, &o2, &w->o_proj));
}
