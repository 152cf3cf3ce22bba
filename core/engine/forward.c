/*
 * forward.c - the main model over the batch rows (docs/architecture.md section 1):
 *
 *   E[N,D]   = embed(tokens)  (caller embeddings for image/video rows)
 *   H[N,S,D] = E copied into S streams
 *   per layer:  x,post,comb = mhc_pre(H, attn site);  y = KDA or sparse MLA(rmsnorm(x));  H = mhc_post(y, H, ...)
 *               x,post,comb = mhc_pre(H, ffn site);   y = MLP or MoE(rmsnorm(x));          H = mhc_post(y, H, ...)
 *   (each mhc_post, the mhc_pre after it and that rmsnorm are one site: mhc_site, one op where the backend fuses
 *   them)
 *   for the rows asked for: h = rmsnorm(mean_s H);  logits = h * lm_head^T
 *
 * Each block's graph is its own file (kda.c, sparse_mla.c, kpool_indexer.c, moe.c, mhc.c); this is the layer
 * loop and the pieces the MTP layer shares (embedding rows, the head, the collective points).
 *
 * With several ranks (docs/multi-gpu.md) every rank runs this same loop on the whole batch: a mixer or an MLP
 * computes the rank's heads or width and leaves a partial sum, all_reduce makes it whole, and everything between
 * two collective points (mHC, norms, the indexer, routing) is replicated, bit for bit, on every rank.
 */
#include "core/engine/graph.h"

void all_reduce(step_ctx *sc, glm53_tensor *y, glm53_comm_group group) {
    glm53_comm *comm = sc->rank->comm;
    if (comm) OP(comm->ops->all_reduce(comm, sc->be, y, group));
}

void matmuls_of_x(step_ctx *sc, glm53_tensor *const *y, const glm53_tensor *x, const glm53_tensor *const *w, int n) {
    glm53_backend *be = sc->be;
    if (be->ops->matmul_multi) {
        OP(be->ops->matmul_multi(be, y, x, w, n));
        return;
    }
    for (int i = 0; i < n; i++) OP(be->ops->matmul(be, y[i], x, w[i]));
}

glm53_tensor *embed_rows(step_ctx *sc) {
    glm53_backend *be = sc->be;
    int64_t N = sc->N, D = sc->m->config.text.hidden_size;
    glm53_tensor *E = NEW(sc->act, 2, N, D, 0);
    OP(be->ops->gather_rows(be, E, &sc->rank->embed, sc->token_ids));
    if (sc->emb_rows && sc->st == GLM53_OK) {
        int64_t n_emb = sc->emb_rows->shape[0];
        glm53_tensor *emb_act = NEW(sc->act, 2, n_emb, D, 0);
        OP(be->ops->copy(be, emb_act, sc->emb));
        OP(be->ops->scatter_rows(be, E, emb_act, sc->emb_rows));
    }
    return E;
}

void head_outputs(step_ctx *sc, const glm53_tensor *h) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    if (sc->want_hidden) {
        sc->hidden_out = NEW(GLM53_F32, 2, sc->n_out, c->hidden_size, 0);
        OP(be->ops->copy(be, sc->hidden_out, h));
    }
    if (sc->want_logits || sc->top_k > 0) {
        glm53_tensor *logits = NEW(GLM53_F32, 2, sc->n_out, c->vocab_size, 0);
        OP(be->ops->matmul(be, logits, h, &sc->rank->lm_head));
        if (sc->want_logits) sc->logits_out = logits;
        if (sc->top_k > 0) {   /* chosen next to the logits: only top_k ids (and values) a row travel */
            sc->top_ids_out = NEW(GLM53_I32, 2, sc->n_out, sc->top_k, 0);
            sc->top_logits_out = NEW(GLM53_F32, 2, sc->n_out, sc->top_k, 0);
            OP(be->ops->topk(be, sc->top_logits_out, sc->top_ids_out, logits, sc->top_k, sc->top_n_valid));
        }
    }
}

void forward_main(step_ctx *sc) {
    glm53_model *m = sc->m;
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &m->config.text;
    int64_t N = sc->N, D = c->hidden_size, S = c->hc_mult;
    const float eps = c->rms_norm_eps;

    glm53_tensor *E = embed_rows(sc);
    glm53_tensor *H = NEW(sc->act, 3, N, S, D), *H2 = NEW(sc->act, 3, N, S, D);
    glm53_tensor *x = NEW(sc->act, 2, N, D, 0), *xn = NEW(sc->act, 2, N, D, 0), *y = NEW(sc->act, 2, N, D, 0);
    glm53_tensor *post = NEW(GLM53_F32, 2, N, S, 0), *comb = NEW(GLM53_F32, 3, N, S, S);
    OP(be->ops->mhc_expand(be, H, E));
    trace(sc, 99, "embed", E);

    for (int l = 0; l < c->num_hidden_layers && sc->st == GLM53_OK; l++) {
        const layer_weights *L = &sc->rank->layers[l];
        glm53_plan_mark mark = glm53_plan_mark_get(sc->plan);
        sc->layer = l;

        /* the site before the mixer: the previous layer's feed-forward output goes into the streams first */
        mhc_site(sc, &L->mhc_attn, &L->input_norm, l > 0 ? y : NULL, &H, &H2, l - 1, "ffn_H", x, xn, post, comb);
        trace(sc, l, "attn_x", x);
        trace(sc, l, "attn_post", post);
        trace(sc, l, "attn_comb", comb);
        trace(sc, l, "attn_xn", xn);
        if (L->mixer == GLM53_LAYER_KDA) kda_forward(sc, L, l, xn, y);
        else sparse_mla_forward(sc, L, l, xn, y);
        all_reduce(sc, y, GLM53_COMM_TP);
        trace(sc, l, "attn_y", y);
        glm53_plan_reset(sc->plan, mark);

        mhc_site(sc, &L->mhc_ffn, &L->post_attn_norm, y, &H, &H2, l, "attn_H", x, xn, post, comb);
        trace(sc, l, "ffn_xn", xn);
        if (L->mlp_type == GLM53_MLP_DENSE) {
            mlp_forward(sc, &L->mlp, xn, y);
            all_reduce(sc, y, GLM53_COMM_TP);
        } else {
            moe_forward(sc, &L->moe, xn, y);
            all_reduce(sc, y, GLM53_COMM_WORLD);
        }
        trace(sc, l, "ffn_y", y);
        glm53_plan_reset(sc->plan, mark);
    }
    /* the last feed-forward output into the streams */
    if (c->num_hidden_layers > 0) {
        OP(be->ops->mhc_post(be, H2, y, H, post, comb));
        swap_tensors(&H, &H2);
        trace(sc, c->num_hidden_layers - 1, "ffn_H", H);
    }
    if (sc->st != GLM53_OK || !wants_outputs(sc)) return;

    /* Outputs: the final collapse, norm and head for the requested rows only. */
    glm53_tensor Hflat = glm53_tensor_reshape(H, 2, N, S * D, 0);
    glm53_tensor *Ho = NEW(sc->act, 2, sc->n_out, S * D, 0), *hm = NEW(sc->act, 2, sc->n_out, D, 0);
    glm53_tensor *h = NEW(sc->act, 2, sc->n_out, D, 0);
    OP(be->ops->gather_rows(be, Ho, &Hflat, sc->out_rows));
    if (sc->st == GLM53_OK) {
        glm53_tensor Ho3 = glm53_tensor_reshape(Ho, 3, sc->n_out, S, D);
        OP(be->ops->mhc_mean(be, hm, &Ho3));
    }
    OP(be->ops->rmsnorm(be, h, hm, &sc->rank->final_norm, eps));
    head_outputs(sc, h);
}
