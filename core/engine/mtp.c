/*
 * mtp.c - the graph of an MTP layer (DeepSeek NextN, docs/architecture.md section 7) over the batch rows, and its
 * loader. hidden_in[N, D] is the target's final hidden at the row's position (or the previous draft step's
 * output hidden):
 *   z = [rmsnorm(embed(tok), enorm) | rmsnorm(h, hnorm)] * eh_proj^T
 *   r = z + sparse MLA(rmsnorm(z, input_ln));  out = r + MoE(rmsnorm(r, post_ln));  h' = rmsnorm(out, head_norm)
 *   logits = h' * lm_head^T, and h' is the hidden the next draft step consumes (post-norm recycling).
 */
#include "core/engine/graph.h"
#include "core/engine/weights.h"

glm53_status mtp_load(glm53_rank *rk, const char *prefix, mtp_weights *w, int layer) {
    const glm53_text_config *c = &rk->model->config.text;
    int64_t D = c->hidden_size;
    LOAD1(&w->enorm, D, "layers.%d.enorm.weight", layer);
    LOAD1(&w->hnorm, D, "layers.%d.hnorm.weight", layer);
    LOAD2(&w->eh_proj, D, 2 * D, "layers.%d.eh_proj.weight", layer);
    LOAD1(&w->head_norm, D, "layers.%d.shared_head.norm.weight", layer);
    layer_weights *L = &w->block;
    L->mixer = GLM53_LAYER_SPARSE_MLA;
    L->mlp_type = GLM53_MLP_MOE;
    LOAD1(&L->input_norm, D, "layers.%d.input_layernorm.weight", layer);
    LOAD1(&L->post_attn_norm, D, "layers.%d.post_attention_layernorm.weight", layer);
    GLM53_TRY(sparse_mla_load(rk, prefix, &L->mla, layer));
    GLM53_TRY(kpool_indexer_load(rk, prefix, &L->indexer, layer));   /* an MTP layer always has a full indexer */
    return moe_load(rk, prefix, &L->moe, layer);
}

void mtp_forward(step_ctx *sc, int32_t mtp_layer) {
    glm53_model *m = sc->m;
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &m->config.text;
    const mtp_weights *w = &sc->rank->mtp[mtp_layer];
    int64_t N = sc->N, D = c->hidden_size;
    float eps = c->rms_norm_eps;

    glm53_tensor *E = embed_rows(sc);
    glm53_tensor *h = NEW(sc->act, 2, N, D, 0);
    OP(be->ops->copy(be, h, sc->hidden_in));
    /* cat[N, 2D] = [enorm(E) | hnorm(h)]: viewed as [2N, D], the normed rows go to the even and odd rows. */
    glm53_tensor *en = NEW(sc->act, 2, N, D, 0), *hn = NEW(sc->act, 2, N, D, 0);
    glm53_tensor *cat = NEW(sc->act, 2, N, 2 * D, 0);
    OP(be->ops->rmsnorm(be, en, E, &w->enorm, eps));
    OP(be->ops->rmsnorm(be, hn, h, &w->hnorm, eps));
    if (sc->st == GLM53_OK) {
        glm53_tensor pairs = glm53_tensor_reshape(cat, 2, 2 * N, D, 0);
        OP(be->ops->scatter_rows(be, &pairs, en, sc->even_rows));
        OP(be->ops->scatter_rows(be, &pairs, hn, sc->odd_rows));
    }
    glm53_tensor *z = NEW(sc->act, 2, N, D, 0), *u = NEW(sc->act, 2, N, D, 0), *y = NEW(sc->act, 2, N, D, 0);
    OP(be->ops->matmul(be, z, cat, &w->eh_proj));
    OP(be->ops->rmsnorm(be, u, z, &w->block.input_norm, eps));
    sc->layer = c->num_hidden_layers + mtp_layer;
    if (sc->st == GLM53_OK) sparse_mla_forward(sc, &w->block, sc->layer, u, y);
    all_reduce(sc, y, GLM53_COMM_TP);
    OP(be->ops->binary(be, z, z, y, GLM53_BINARY_ADD));
    OP(be->ops->rmsnorm(be, u, z, &w->block.post_attn_norm, eps));
    if (sc->st == GLM53_OK) moe_forward(sc, &w->block.moe, u, y);
    all_reduce(sc, y, GLM53_COMM_WORLD);
    OP(be->ops->binary(be, z, z, y, GLM53_BINARY_ADD));
    if (sc->st != GLM53_OK || !wants_outputs(sc)) return;
    glm53_tensor *zo = NEW(sc->act, 2, sc->n_out, D, 0), *ho = NEW(sc->act, 2, sc->n_out, D, 0);
    OP(be->ops->gather_rows(be, zo, z, sc->out_rows));
    OP(be->ops->rmsnorm(be, ho, zo, &w->head_norm, eps));
    head_outputs(sc, ho);
}
