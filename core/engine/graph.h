/*
 * graph.h - what the graph code of every block shares: the step context, the scratch and op macros, and the
 * graph function of each block (one file per block in core/engine, named as in model.h).
 *
 * A graph function only enqueues ops on the backend; it never waits for the device and never allocates
 * outside the plan, so the same code runs eagerly, inside a capture, or split into passes. Failures are kept in
 * sc->st: once it is set every later NEW and OP does nothing, and the step driver (step.c) reports it.
 *
 * Per-row work (projections, norms, mHC, MoE) runs over all N rows of the batch at once; the parts with
 * per-sequence state (the KDA conv and recurrence, the indexer, the sparse attention) loop over the batch's
 * sequences on views of their rows. Sequence state is addressed through the glm53_seq handle, never through
 * its row in the batch.
 */
#ifndef GLM53_ENGINE_GRAPH_H
#define GLM53_ENGINE_GRAPH_H

#include "core/engine/model.h"

/* One sequence's slice of the batch, with its metadata (device views, the same for every layer of the step). */
typedef struct {
    glm53_seq    *seq;
    int64_t       row0, n_rows;   /* rows [row0, row0 + n_rows) of the batch */
    int64_t       pos0;           /* absolute position of its first new row = what the cache held before */
    glm53_tensor *pos;            /* [T] I32: pos0 .. pos0 + T - 1 */
    glm53_tensor *n_closed;       /* [T] I32: closed pools visible to each row, (pos + 1) / P */
    glm53_tensor *kda_slots;      /* [T + 1] I32: state ring slot read, then written after each row (-1: none) */
    glm53_tensor *conv_hist;      /* [n_hist] I32: conv ring slots of the history rows that exist */
    glm53_tensor *conv_write;     /* [n_write] I32: conv ring slots the last n_write new rows go to */
    int64_t       n_hist, n_write;
    glm53_tensor *idx;            /* selected positions of the latest full indexer layer [T, W] I32 */
} seq_slice;

typedef struct {
    glm53_model     *m;
    glm53_rank      *rank;         /* the rank this graph runs on: its weights, backend and plan */
    glm53_backend   *be;           /* rank->be */
    glm53_step_plan *plan;         /* &rank->plan */
    seq_slice       *slices;
    int32_t          n_seqs;
    int64_t          N;            /* rows of the batch (this pass) */
    int              act;          /* activation dtype */
    glm53_status     st;
    int              layer;        /* the layer being run, for trace() */
    /* step metadata (device views) */
    glm53_tensor    *token_ids;    /* [N] I32 (0 on embedding rows) */
    glm53_tensor    *emb_rows;     /* [n_emb] I32 rows that take caller embeddings, or NULL */
    glm53_tensor    *emb;          /* [n_emb, D] F32 those embeddings */
    glm53_tensor    *out_rows;     /* [n_out] I32 rows whose outputs were asked for */
    int64_t          n_out;
    glm53_tensor    *hidden_in;    /* MTP: [N, D] F32 the hidden each row consumes */
    glm53_tensor    *even_rows, *odd_rows;   /* MTP: [N] I32 0, 2, 4, ... and 1, 3, 5, ...: the halves of a row pair */
    bool             want_logits, want_hidden;
    int32_t          top_k;        /* 0, or the rows' top-k outputs (glm53_step_output.top_k) */
    int64_t          top_n_valid;
    bool             have_selection;   /* a full indexer ran in this step: the slices' idx hold its selection */
    /* outputs the graph leaves in the scratch for the step driver to read */
    glm53_tensor    *logits_out;   /* [n_out, V] F32 */
    glm53_tensor    *hidden_out;   /* [n_out, D] F32 */
    glm53_tensor    *top_ids_out;  /* [n_out, top_k] I32 */
    glm53_tensor    *top_logits_out;   /* [n_out, top_k] F32 */
} step_ctx;

/* Whether the pass has outputs to compute (the head is skipped otherwise). */
static inline bool wants_outputs(const step_ctx *sc) {
    return sc->n_out > 0 && (sc->want_logits || sc->want_hidden || sc->top_k > 0);
}

#define NEW(dtype, ndim, d0, d1, d2) glm53_plan_tensor(sc->plan, &sc->st, (dtype), (ndim), (d0), (d1), (d2))
#define OP(call)                                   \
    do {                                           \
        if (sc->st == GLM53_OK) sc->st = (call);   \
    } while (0)

static inline void swap_tensors(glm53_tensor **a, glm53_tensor **b) {
    glm53_tensor *t = *a;
    *a = *b;
    *b = t;
}

static inline glm53_tensor rows(const glm53_tensor *t, int64_t row0, int64_t n) {
    return glm53_tensor_rows_view(t, row0, n);
}

/* trace.c: with $GLM53_TRACE_DIR set, writes t as <dir>/<step>_<layer>_<name>.npy (float32) so two backends, or
 * the engine and transformers, can be compared point by point. Costs nothing when unset; waits for the device
 * when set (a traced step cannot be captured). */
void trace(step_ctx *sc, int layer, const char *name, const glm53_tensor *t);

/* Loaders of each block's weights (checkpoint names after `prefix`: "model.language_model." or "model."). */
/* Each places what rank rk holds of the block (model.h, glm53_rank). */
glm53_status mhc_load(glm53_rank *rk, const char *prefix, mhc_weights *w, int layer, const char *site);
glm53_status kda_load(glm53_rank *rk, const char *prefix, kda_weights *w, int layer);
glm53_status sparse_mla_load(glm53_rank *rk, const char *prefix, sparse_mla_weights *w, int layer);
glm53_status kpool_indexer_load(glm53_rank *rk, const char *prefix, kpool_indexer_weights *w, int layer);
glm53_status mlp_load(glm53_rank *rk, const char *prefix, mlp_weights *w, int64_t width, const char *infix, int layer);
glm53_status moe_load(glm53_rank *rk, const char *prefix, moe_weights *w, int layer);
void         moe_free(glm53_rank *rk, moe_weights *w);
glm53_status mtp_load(glm53_rank *rk, const char *prefix, mtp_weights *w, int layer);

/* mhc.c */
void mhc_site(step_ctx *sc, const mhc_weights *w, const glm53_tensor *norm, const glm53_tensor *y, glm53_tensor **H,
              glm53_tensor **H2, int H_layer, const char *H_label, glm53_tensor *x, glm53_tensor *xn,
              glm53_tensor *post, glm53_tensor *comb);

/* kda.c: y[N,D] = KDA(xn[N,D]) of `layer`, updating each sequence's conv and state rings. */
void kda_forward(step_ctx *sc, const layer_weights *L, int layer, const glm53_tensor *xn, glm53_tensor *y);

/* kpool_indexer.c: the per-row indexer projections of xn (and qa, the MLA query latent) for a layer with a full
 * indexer; then, per sequence, the cache update, pool compression, scores and the selection into s->idx. */
void kpool_indexer_forward(step_ctx *sc, const kpool_indexer_weights *w, int layer, const glm53_tensor *xn,
                           const glm53_tensor *qa);

/* sparse_mla.c: y[N,D] = sparse MLA(xn) of `layer` over the positions the indexer selects. */
void sparse_mla_forward(step_ctx *sc, const layer_weights *L, int layer, const glm53_tensor *xn, glm53_tensor *y);

/* moe.c: y[N,D] = SwiGLU MLP(xn), and y = MoE(xn) (routed experts plus the shared expert). */
void mlp_forward(step_ctx *sc, const mlp_weights *w, const glm53_tensor *xn, glm53_tensor *y);
void moe_forward(step_ctx *sc, const moe_weights *w, const glm53_tensor *xn, glm53_tensor *y);

/* forward.c: the collective points. y[N, D] holds this rank's partial sum (its heads, widths or experts); after
 * it, the sum over the group (TP after a mixer or a dense MLP, WORLD after an MoE). Nothing without a
 * communicator (one rank). */
void all_reduce(step_ctx *sc, glm53_tensor *y, glm53_comm_group group);

/* forward.c: y[i] = x * w[i]^T for n weights that read the same x: one matmul_multi where the backend has it
 * (one launch on the CUDA decode path), else n matmuls; the same results either way. */
void matmuls_of_x(step_ctx *sc, glm53_tensor *const *y, const glm53_tensor *x, const glm53_tensor *const *w, int n);

/* forward.c: the whole main model over the batch rows; and the shared pieces of every forward. */
void forward_main(step_ctx *sc);
glm53_tensor *embed_rows(step_ctx *sc);   /* E[N, D] */
/* Final-normed hidden rows h[n_out, D] -> sc->logits_out / sc->hidden_out (F32), sc->top_ids_out /
 * top_logits_out (the top-k of the logits over the valid ids). */
void head_outputs(step_ctx *sc, const glm53_tensor *h);

/* mtp.c: MTP layer `mtp_layer` over the batch rows, consuming sc->hidden_in. */
void mtp_forward(step_ctx *sc, int32_t mtp_layer);

#endif /* GLM53_ENGINE_GRAPH_H */
