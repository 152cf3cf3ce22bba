/*
 * moe.c - the graph of the feed-forward blocks (docs/architecture.md section 6): the dense SwiGLU MLP of the
 * first layers, and the MoE of the others (sigmoid router in F32 with a bias for the choice only, top-k routed
 * experts, plus the shared expert with weight 1). Loading their weights too.
 *
 *   mlp:  y = down(swiglu(xn * gate^T, xn * up^T, limit))      (one fused op where the backend has it)
 *   moe:  logits = xn * router^T (F32);  ids, weights = route(logits, bias);  y = experts(xn, ids, weights)
 *         + mlp_shared(xn)
 * The expert ids and weights stay on the device: the routed experts are one op, which on CUDA needs no host
 * round trip for decode-sized batches (kernels/cuda/moe.cu).
 */
#include "core/engine/graph.h"
#include "core/engine/weights.h"

#include <stdlib.h>

/* Width split across the tp ranks: gate and up by rows, down by columns (SwiGLU is elementwise, so each rank's
 * down projection is a partial sum of the whole one). */
glm53_status mlp_load(glm53_rank *rk, const char *prefix, mlp_weights *w, int64_t width, const char *infix, int layer) {
    int64_t D = rk->model->config.text.hidden_size;
    LOAD2_TP_ROWS(&w->gate, width, D, "layers.%d.mlp.%sgate_proj.weight", layer, infix);
    LOAD2_TP_ROWS(&w->up, width, D, "layers.%d.mlp.%sup_proj.weight", layer, infix);
    LOAD2_TP_COLS(&w->down, D, width, "layers.%d.mlp.%sdown_proj.weight", layer, infix);
    return GLM53_OK;
}

/* The router whole on every rank (every rank routes every row the same way); the experts rk holds, each split
 * like a dense MLP; the shared expert on the ranks of ep_rank 0. */
glm53_status moe_load(glm53_rank *rk, const char *prefix, moe_weights *w, int layer) {
    const glm53_text_config *c = &rk->model->config.text;
    int64_t D = c->hidden_size, E = c->n_routed_experts, Fe = c->moe_intermediate_size;
    LOAD2(&w->router, E, D, "layers.%d.mlp.gate.weight", layer);
    LOAD1(&w->bias, E, "layers.%d.mlp.gate.e_score_correction_bias", layer);
    w->gate = calloc((size_t)E, sizeof *w->gate);
    w->up = calloc((size_t)E, sizeof *w->up);
    w->down = calloc((size_t)E, sizeof *w->down);
    w->gate_ptr = calloc((size_t)E, sizeof *w->gate_ptr);
    w->up_ptr = calloc((size_t)E, sizeof *w->up_ptr);
    w->down_ptr = calloc((size_t)E, sizeof *w->down_ptr);
    if (!w->gate || !w->up || !w->down || !w->gate_ptr || !w->up_ptr || !w->down_ptr)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for %lld expert descriptors", (long long)E);
    for (int64_t e = rk->first_expert; e < rk->first_expert + rk->n_experts_held; e++) {
        LOAD2_TP_ROWS(&w->gate[e], Fe, D, "layers.%d.mlp.experts.%lld.gate_proj.weight", layer, (long long)e);
        LOAD2_TP_ROWS(&w->up[e], Fe, D, "layers.%d.mlp.experts.%lld.up_proj.weight", layer, (long long)e);
        LOAD2_TP_COLS(&w->down[e], D, Fe, "layers.%d.mlp.experts.%lld.down_proj.weight", layer, (long long)e);
        w->gate_ptr[e] = &w->gate[e];
        w->up_ptr[e] = &w->up[e];
        w->down_ptr[e] = &w->down[e];
    }
    w->experts = (glm53_expert_set){.n_experts = (int32_t)E, .gate = w->gate_ptr, .up = w->up_ptr,
                                    .down = w->down_ptr, .first_held = rk->first_expert,
                                    .n_held = rk->n_experts_held < E ? rk->n_experts_held : 0};
    if (rk->be->ops->prepare_experts) GLM53_TRY(rk->be->ops->prepare_experts(rk->be, &w->experts));
    if (c->n_shared_experts > 0 && rk->holds_shared_expert)
        GLM53_TRY(mlp_load(rk, prefix, &w->shared, Fe * c->n_shared_experts, "shared_experts.", layer));
    return GLM53_OK;
}

void moe_free(glm53_rank *rk, moe_weights *w) {
    if (w->experts.device && rk->be->ops->release_experts) rk->be->ops->release_experts(rk->be, &w->experts);
    free(w->gate); free(w->up); free(w->down);
    free(w->gate_ptr); free(w->up_ptr); free(w->down_ptr);
}

void mlp_forward(step_ctx *sc, const mlp_weights *w, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    int64_t F = w->gate.shape[0];
    float limit = sc->m->config.text.swiglu_limit;
    glm53_tensor *h = NEW(sc->act, 2, sc->N, F, 0);
    if (be->ops->swiglu_gate_up) {
        OP(be->ops->swiglu_gate_up(be, h, xn, &w->gate, &w->up, limit));
    } else {
        glm53_tensor *gate = NEW(sc->act, 2, sc->N, F, 0), *up = NEW(sc->act, 2, sc->N, F, 0);
        OP(be->ops->matmul(be, gate, xn, &w->gate));
        OP(be->ops->matmul(be, up, xn, &w->up));
        OP(be->ops->swiglu(be, h, gate, up, limit));
    }
    OP(be->ops->matmul(be, y, h, &w->down));
}

/* Research capture: the routed ids and weights of the rows of every sequence that asked for them, into its rows
 * by position. A download per sequence (a wait for the device): only sequences made with the flag pay. */
static void capture_routing(step_ctx *sc, const glm53_tensor *ids, const glm53_tensor *wts) {
    int64_t K = ids->shape[1];
    for (int32_t i = 0; i < sc->n_seqs && sc->st == GLM53_OK; i++) {
        const seq_slice *s = &sc->slices[i];
        layer_cache *lc = seq_cache(s->seq, sc->rank, sc->layer);
        if (!lc->cap_ids) continue;   /* not asked for, or not rank 0 (every rank routes alike) */
        glm53_tensor id_rows = rows(ids, s->row0, s->n_rows), wt_rows = rows(wts, s->row0, s->n_rows);
        OP(sc->be->ops->download(sc->be, lc->cap_ids + s->pos0 * K, &id_rows));
        OP(sc->be->ops->download(sc->be, lc->cap_weights + s->pos0 * K, &wt_rows));
    }
}

void moe_forward(step_ctx *sc, const moe_weights *w, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    int64_t N = sc->N, E = c->n_routed_experts, K = c->num_experts_per_tok;
    glm53_tensor *logits = NEW(GLM53_F32, 2, N, E, 0);
    glm53_tensor *ids = NEW(GLM53_I32, 2, N, K, 0), *wts = NEW(GLM53_F32, 2, N, K, 0);
    OP(be->ops->matmul(be, logits, xn, &w->router));
    OP(be->ops->moe_route(be, ids, wts, logits, &w->bias, c->n_group, c->topk_group, c->norm_topk_prob,
                          c->routed_scaling_factor));
    capture_routing(sc, ids, wts);
    OP(be->ops->moe_experts(be, y, xn, ids, wts, &w->experts, c->swiglu_limit));
    trace(sc, sc->layer, "moe_logits", logits);
    trace(sc, sc->layer, "moe_weights", wts);
    trace(sc, sc->layer, "moe_routed", y);
    if (w->shared.gate.data) {   /* this rank holds (its slice of) the shared expert */
        glm53_tensor *shared = NEW(sc->act, 2, N, c->hidden_size, 0);
        mlp_forward(sc, &w->shared, xn, shared);
        OP(be->ops->binary(be, y, y, shared, GLM53_BINARY_ADD));
    }
}
