/*
 * seq.c - sequence caches: create, fork (prefix reuse), truncate (speculative rollback), free.
 *
 * A sequence reserves its whole cache up front (max_tokens rows), so a step never allocates cache memory and
 * the model's cache budget is checked once, at creation. Per layer it holds (model.h, layer_cache):
 *   KDA: rings of the last conv_width raw q/k/v rows, and a ring of `ring` recurrent states where the state
 *        after length n lives in slot n % ring;
 *   sparse MLA: the normalised MLA latent row of every position; with an indexer also the raw indexer key
 *        and pool gate scores of every position and the pooled key of every closed pool.
 * Rolling back over up to max_rollback tokens therefore needs no recomputation: the KDA slot of the shorter
 * length is still there, the conv ring still holds the K-1 rows before it, and sparse MLA rows past the new length are
 * simply overwritten later (a pool is recompressed when it closes again).
 *
 * With several ranks each rank holds its own caches: the KDA rings of its heads, and the whole sparse MLA and
 * indexer rows (the latent is shared by all heads, the indexer is replicated). The bookkeeping (lengths, which
 * ring slot holds what) is one, in the sequence. The research capture rows live with rank 0's caches.
 *
 * Freeing a sequence that a running (or queued) step includes only marks it: it leaves the model's list of live
 * sequences at once, so no later step accepts it, and its memory goes when the step ends.
 */
#include "core/engine/model.h"

#include <stdlib.h>

static void seq_release(glm53_seq *s) {
    if (!s) return;
    for (int32_t r = 0; s->layers && r < s->model->n_ranks; r++) {
        glm53_rank *rk = &s->model->ranks[r];
        glm53_backend *be = rk->be;
        for (int l = 0; l < s->n_layers; l++) {
            layer_cache *lc = seq_cache(s, rk, l);
            glm53_tensor *all[] = {&lc->conv[0], &lc->conv[1], &lc->conv[2], &lc->states, &lc->latent,
                                   &lc->kappa, &lc->sigma, &lc->pooled};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                if (all[i]->data) be->ops->release(be, all[i]);
            free(lc->cap_ids);
            free(lc->cap_weights);
            free(lc->cap_positions);
        }
    }
    free(s->layers);
    free(s->state_len);
    free(s->conv_pos);
    free(s->mtp_length);
    free(s);
}

static glm53_status cache_tensor(glm53_rank *rk, glm53_tensor *t, int dtype, int ndim, int64_t d0, int64_t d1,
                                 int64_t d2, int64_t d3) {
    glm53_backend *be = rk->be;
    *t = (glm53_tensor){.dtype = dtype, .device = be->device, .ndim = ndim, .shape = {d0, d1, d2, d3}};
    GLM53_TRY(be->ops->alloc(be, t));
    return GLM53_OK;
}

/* Selection width of a sparse MLA layer: index_topk positions, plus the open pool's up to P-1. */
static int64_t selection_width(const glm53_text_config *c) {
    return c->index_topk + (c->index_kpool_always_select_tail ? c->index_kpool - 1 : 0);
}

/* The layers' capture rows, with rank 0's caches (host memory; not part of the cache budget, which is the
 * backend's memory). */
static glm53_status alloc_capture(glm53_seq *s) {
    const glm53_model *m = s->model;
    const glm53_text_config *c = &m->config.text;
    size_t cap = (size_t)s->params.max_tokens, k = (size_t)c->num_experts_per_tok, W = (size_t)selection_width(c);
    for (int l = 0; l < s->n_layers; l++) {
        layer_cache *lc = seq_cache(s, &m->ranks[0], l);
        bool main_layer = l < c->num_hidden_layers;
        bool moe = !main_layer || c->mlp_types[l] == GLM53_MLP_MOE;
        bool indexer = !main_layer || (c->layer_types[l] == GLM53_LAYER_SPARSE_MLA &&
                                       c->indexer_types[l] == GLM53_INDEXER_FULL);
        if (moe && (s->params.capture & GLM53_CAPTURE_EXPERTS)) {
            lc->cap_ids = calloc(cap * k, sizeof *lc->cap_ids);
            lc->cap_weights = calloc(cap * k, sizeof *lc->cap_weights);
            if (!lc->cap_ids || !lc->cap_weights) goto oom;
        }
        if (indexer && (s->params.capture & GLM53_CAPTURE_SELECTION)) {
            lc->cap_positions = calloc(cap * W, sizeof *lc->cap_positions);
            if (!lc->cap_positions) goto oom;
        }
    }
    return GLM53_OK;
oom:
    return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "seq_create: no host memory to capture %lld positions",
                      (long long)cap);
}

/* The bytes a sequence with these parameters reserves on one rank, without allocating (for the budget check);
 * every rank reserves the same. */
static int64_t rank_seq_bytes(const glm53_model *m, int64_t cap, int32_t ring, int32_t conv_width) {
    const glm53_text_config *c = &m->config.text;
    const glm53_rank *rk = &m->ranks[0];
    int64_t act = (int64_t)glm53_dtype_size((glm53_dtype)rk->be->act_dtype), bytes = 0;
    int64_t C = rk->kda_heads * c->linear_head_dim, dk = c->linear_head_dim;
    int64_t pools = cap / c->index_kpool + 1;
    for (int l = 0; l < c->num_hidden_layers + m->n_mtp; l++) {
        bool main_layer = l < c->num_hidden_layers;
        if (main_layer && c->layer_types[l] == GLM53_LAYER_KDA) {
            bytes += 3 * conv_width * C * act + (int64_t)ring * rk->kda_heads * dk * dk * 4;
        } else {
            bytes += cap * c->kv_lora_rank * act;
            if (!main_layer || c->indexer_types[l] == GLM53_INDEXER_FULL)
                bytes += 2 * cap * c->index_head_dim * act + pools * c->index_head_dim * 4;
        }
    }
    return bytes;
}

glm53_status glm53_seq_alloc(glm53_model *m, const glm53_seq_params *params, glm53_seq **out) {
    const glm53_text_config *c = &m->config.text;
    glm53_seq_params p = params ? *params : glm53_seq_default_params();
    if (p.max_tokens < 1 || p.max_rollback < 0)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "seq_create: max_tokens must be >= 1 and max_rollback >= 0 "
                          "(got %lld, %d)", (long long)p.max_tokens, p.max_rollback);
    if (p.capture & ~(GLM53_CAPTURE_EXPERTS | GLM53_CAPTURE_SELECTION))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "seq_create: capture flags 0x%x include unknown bits", p.capture);
    int32_t ring = p.max_rollback + 1, conv_width = c->linear_conv_kernel_dim - 1 + p.max_rollback;
    if (conv_width < 1) conv_width = 1;
    int64_t per_rank = rank_seq_bytes(m, p.max_tokens, ring, conv_width), need = per_rank * m->n_ranks;

    pthread_mutex_lock(&m->lock);
    bool fits = m->params.cache_bytes_max <= 0 || m->cache_bytes + need <= m->params.cache_bytes_max;
    if (fits) {
        m->cache_bytes += need;
        for (int32_t r = 0; r < m->n_ranks; r++) m->ranks[r].cache_bytes += per_rank;
        m->held_seqs++;
    }
    int64_t in_use = m->cache_bytes;
    pthread_mutex_unlock(&m->lock);
    if (!fits)
        return GLM53_FAIL(GLM53_ERR_CACHE_FULL, "seq_create: a %lld-token sequence needs %lld bytes of cache; "
                          "%lld of the model's %lld are in use", (long long)p.max_tokens, (long long)need,
                          (long long)in_use, (long long)m->params.cache_bytes_max);

    glm53_seq *s = calloc(1, sizeof *s);
    glm53_status st = GLM53_OK;
    if (s) {
        s->model = m;
        s->params = p;
        s->ring = ring;
        s->conv_width = conv_width;
        s->n_layers = c->num_hidden_layers + m->n_mtp;
        s->layers = calloc((size_t)m->n_ranks * (size_t)s->n_layers, sizeof *s->layers);
        s->state_len = malloc((size_t)ring * sizeof *s->state_len);
        s->conv_pos = malloc((size_t)conv_width * sizeof *s->conv_pos);
        s->mtp_length = calloc((size_t)m->n_mtp + 1, sizeof *s->mtp_length);
    }
    if (!s || !s->layers || !s->state_len || !s->conv_pos || !s->mtp_length)
        st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a sequence");
    for (int32_t i = 0; st == GLM53_OK && i < ring; i++) s->state_len[i] = i == 0 ? 0 : -1;
    for (int32_t i = 0; st == GLM53_OK && i < conv_width; i++) s->conv_pos[i] = -1;
    int64_t dk = c->linear_head_dim, dI = c->index_head_dim, pools = p.max_tokens / c->index_kpool + 1;
    for (int32_t r = 0; st == GLM53_OK && r < m->n_ranks; r++) {
        glm53_rank *rk = &m->ranks[r];
        int act = rk->be->act_dtype;
        int64_t Hk = rk->kda_heads, C = Hk * dk;
        for (int l = 0; st == GLM53_OK && l < s->n_layers; l++) {
            layer_cache *lc = seq_cache(s, rk, l);
            bool main_layer = l < c->num_hidden_layers;
            if (main_layer && c->layer_types[l] == GLM53_LAYER_KDA) {
                for (int j = 0; j < 3 && st == GLM53_OK; j++)
                    st = cache_tensor(rk, &lc->conv[j], act, 2, conv_width, C, 0, 0);
                if (st == GLM53_OK) st = cache_tensor(rk, &lc->states, GLM53_F32, 4, ring, Hk, dk, dk);
                /* Slot 0 is the state of the empty sequence. */
                if (st == GLM53_OK) st = rk->be->ops->fill(rk->be, &lc->states, 0.0f);
            } else {
                st = cache_tensor(rk, &lc->latent, act, 2, p.max_tokens, c->kv_lora_rank, 0, 0);
                if (st == GLM53_OK && (!main_layer || c->indexer_types[l] == GLM53_INDEXER_FULL)) {
                    st = cache_tensor(rk, &lc->kappa, act, 2, p.max_tokens, dI, 0, 0);
                    if (st == GLM53_OK) st = cache_tensor(rk, &lc->sigma, act, 2, p.max_tokens, dI, 0, 0);
                    if (st == GLM53_OK) st = cache_tensor(rk, &lc->pooled, GLM53_F32, 2, pools, dI, 0, 0);
                }
            }
        }
    }
    if (st == GLM53_OK) {
        s->bytes = need;
        pthread_mutex_lock(&m->lock);
        if (m->n_live == m->cap_live) {
            int64_t cap = m->cap_live ? 2 * m->cap_live : 16;
            glm53_seq **grown = realloc(m->live, (size_t)cap * sizeof *grown);
            if (grown) {
                m->live = grown;
                m->cap_live = cap;
            }
        }
        if (m->n_live < m->cap_live) m->live[m->n_live++] = s;
        else st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the list of sequences");
        pthread_mutex_unlock(&m->lock);
    }
    if (st == GLM53_OK && p.capture) st = alloc_capture(s);
    if (st != GLM53_OK) {
        if (s) seq_release(s);
        pthread_mutex_lock(&m->lock);
        m->cache_bytes -= need;
        for (int32_t r = 0; r < m->n_ranks; r++) m->ranks[r].cache_bytes -= per_rank;
        m->held_seqs--;
        pthread_mutex_unlock(&m->lock);
        return st;
    }
    *out = s;
    return GLM53_OK;
}

glm53_status glm53_seq_create(glm53_model *model, const glm53_seq_params *params, glm53_seq **out) {
    if (!model || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "seq_create: model and out are required");
    *out = NULL;
    return glm53_seq_alloc(model, params, out);
}

static glm53_status check_rollback(const glm53_seq *s, int64_t n_tokens, const char *what) {
    if (n_tokens < 0 || n_tokens > s->length)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "%s: length %lld is outside [0, %lld]", what, (long long)n_tokens,
                          (long long)s->length);
    if (n_tokens == s->length || s->model->n_kda_layers == 0) return GLM53_OK;
    if (n_tokens < s->length - s->params.max_rollback)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "%s: going back from %lld to %lld tokens exceeds max_rollback %d "
                          "(the KDA state of that length is not kept)", what, (long long)s->length,
                          (long long)n_tokens, s->params.max_rollback);
    /* Within the window the slots can still have been overwritten by a longer branch that was rolled back. */
    int64_t K = s->model->config.text.linear_conv_kernel_dim;
    bool kept = s->state_len[n_tokens % s->ring] == n_tokens;
    for (int64_t p = n_tokens - K + 1 > 0 ? n_tokens - K + 1 : 0; kept && p < n_tokens; p++)
        kept = s->conv_pos[p % s->conv_width] == p;
    if (!kept)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "%s: the KDA state at length %lld is no longer kept (a later "
                          "step wrote its ring slot)", what, (long long)n_tokens);
    return GLM53_OK;
}

/* Rows [0, n) of a cache tensor indexed by position or pool (latent, kappa, sigma, pooled) into dst's. */
static glm53_status copy_rows(glm53_backend *be, glm53_tensor *dst, const glm53_tensor *src, int64_t n) {
    if (!src->data || n <= 0) return GLM53_OK;
    glm53_tensor d = glm53_tensor_rows_view(dst, 0, n), s = glm53_tensor_rows_view(src, 0, n);
    return be->ops->copy(be, &d, &s);
}

/* Slot `from` of src's ring (states or a conv ring) into slot `to` of dst's. */
static glm53_status copy_slot(glm53_backend *be, glm53_tensor *dst, int64_t to, const glm53_tensor *src, int64_t from) {
    glm53_tensor d = glm53_tensor_rows_view(dst, to, 1), s = glm53_tensor_rows_view(src, from, 1);
    return be->ops->copy(be, &d, &s);
}

/* The KDA rings of a fork at length n. Rings of the same sizes are copied whole, so the fork can roll back as
 * far as its source; otherwise the state of length n and the conv rows of the K-1 positions before it go to
 * their slots in the new rings, and the fork's bookkeeping says that only those are there. */
static glm53_status fork_rings(const glm53_seq *src, glm53_seq *dst, glm53_backend *be, const layer_cache *a,
                               layer_cache *b, int64_t n) {
    bool same = src->ring == dst->ring && src->conv_width == dst->conv_width;
    for (int j = 0; j < 3; j++) {
        if (same) {
            GLM53_TRY(be->ops->copy(be, &b->conv[j], &a->conv[j]));
            continue;
        }
        int64_t K = src->model->config.text.linear_conv_kernel_dim;
        for (int64_t pos = n - K + 1 > 0 ? n - K + 1 : 0; pos < n; pos++)
            GLM53_TRY(copy_slot(be, &b->conv[j], pos % dst->conv_width, &a->conv[j], pos % src->conv_width));
    }
    if (same) return be->ops->copy(be, &b->states, &a->states);
    return copy_slot(be, &b->states, n % dst->ring, &a->states, n % src->ring);
}

glm53_status glm53_seq_fork(const glm53_seq *src, int64_t n_tokens, const glm53_seq_params *params, glm53_seq **out) {
    if (!src || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "seq_fork: src and out are required");
    *out = NULL;
    GLM53_TRY(check_rollback(src, n_tokens, "seq_fork"));
    glm53_seq_params p = params ? *params : src->params;
    if (p.max_tokens < n_tokens)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "seq_fork: the fork keeps %lld tokens, more than its max_tokens %lld",
                          (long long)n_tokens, (long long)p.max_tokens);
    glm53_seq *dst;
    GLM53_TRY(glm53_seq_alloc(src->model, &p, &dst));
    const glm53_model *m = src->model;
    const glm53_text_config *c = &m->config.text;
    int n = src->n_layers;
    /* The MTP caches follow the main one: positions up to n_tokens - 1 pair with a known next token. */
    for (int32_t i = 0; i < m->n_mtp; i++)
        dst->mtp_length[i] = src->mtp_length[i] < n_tokens ? src->mtp_length[i] : n_tokens;
    glm53_status st = GLM53_OK;
    for (int64_t i = 0; i < (int64_t)m->n_ranks * n && st == GLM53_OK; i++) {
        glm53_backend *be = m->ranks[i / n].be;
        int layer = (int)(i % n);
        const layer_cache *a = &src->layers[i];
        layer_cache *b = &dst->layers[i];
        if (a->states.data) {
            st = fork_rings(src, dst, be, a, b, n_tokens);
            continue;
        }
        /* Sparse MLA rows by position, pooled keys by closed pool: only the ones the fork keeps. */
        int64_t rows = layer < c->num_hidden_layers ? n_tokens : dst->mtp_length[layer - c->num_hidden_layers];
        st = copy_rows(be, &b->latent, &a->latent, rows);
        if (st == GLM53_OK) st = copy_rows(be, &b->kappa, &a->kappa, rows);
        if (st == GLM53_OK) st = copy_rows(be, &b->sigma, &a->sigma, rows);
        if (st == GLM53_OK) st = copy_rows(be, &b->pooled, &a->pooled, rows / c->index_kpool);
    }
    if (st != GLM53_OK) {
        glm53_seq_free(dst);
        return st;
    }
    /* The capture of the positions the fork keeps (host rows, like the caches they describe), if both capture. */
    size_t k = (size_t)c->num_experts_per_tok, W = (size_t)selection_width(c), rows = (size_t)n_tokens;
    for (int l = 0; l < n; l++) {   /* rank 0's layers */
        const layer_cache *a = &src->layers[l];
        layer_cache *b = &dst->layers[l];
        if (a->cap_ids && b->cap_ids) memcpy(b->cap_ids, a->cap_ids, rows * k * sizeof *a->cap_ids);
        if (a->cap_weights && b->cap_weights) memcpy(b->cap_weights, a->cap_weights, rows * k * sizeof *a->cap_weights);
        if (a->cap_positions && b->cap_positions)
            memcpy(b->cap_positions, a->cap_positions, rows * W * sizeof *a->cap_positions);
    }
    if (src->ring == dst->ring && src->conv_width == dst->conv_width) {
        memcpy(dst->state_len, src->state_len, (size_t)src->ring * sizeof *src->state_len);
        memcpy(dst->conv_pos, src->conv_pos, (size_t)src->conv_width * sizeof *src->conv_pos);
    } else {
        /* Slot 0 keeps the empty sequence's (zero) state unless length n_tokens took it. */
        dst->state_len[n_tokens % dst->ring] = n_tokens;
        int64_t K = c->linear_conv_kernel_dim;
        for (int64_t pos = n_tokens - K + 1 > 0 ? n_tokens - K + 1 : 0; pos < n_tokens; pos++)
            dst->conv_pos[pos % dst->conv_width] = pos;
    }
    dst->length = n_tokens;
    *out = dst;
    return GLM53_OK;
}

glm53_status glm53_seq_truncate(glm53_seq *seq, int64_t n_tokens) {
    if (!seq) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "seq_truncate: seq is NULL");
    GLM53_TRY(check_rollback(seq, n_tokens, "seq_truncate"));
    seq->length = n_tokens;
    /* MTP positions pair with the token after them; those past the new end paired with dropped tokens. */
    for (int32_t i = 0; i < seq->model->n_mtp; i++)
        if (seq->mtp_length[i] > n_tokens) seq->mtp_length[i] = n_tokens;
    return GLM53_OK;
}

void glm53_seq_note_step(glm53_seq *s, int64_t pos0, int64_t n_rows, bool valid) {
    for (int64_t t = n_rows > s->ring ? n_rows - s->ring : 0; t < n_rows; t++)
        s->state_len[(pos0 + t + 1) % s->ring] = valid ? pos0 + t + 1 : -1;
    for (int64_t t = n_rows > s->conv_width ? n_rows - s->conv_width : 0; t < n_rows; t++)
        s->conv_pos[(pos0 + t) % s->conv_width] = valid ? pos0 + t : -1;
}

int64_t glm53_seq_mtp_length(const glm53_seq *seq, int32_t mtp_layer) {
    if (!seq || mtp_layer < 0 || mtp_layer >= seq->model->n_mtp) return -1;
    return seq->mtp_length[mtp_layer];
}

glm53_status glm53_seq_mtp_truncate(glm53_seq *seq, int32_t mtp_layer, int64_t n_tokens) {
    if (!seq) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "seq_mtp_truncate: seq is NULL");
    if (mtp_layer < 0 || mtp_layer >= seq->model->n_mtp)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "seq_mtp_truncate: MTP layer %d of %d", mtp_layer,
                          seq->model->n_mtp);
    if (n_tokens < 0 || n_tokens > seq->mtp_length[mtp_layer])
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "seq_mtp_truncate: length %lld is outside [0, %lld]",
                          (long long)n_tokens, (long long)seq->mtp_length[mtp_layer]);
    /* The MTP layer's cache is sparse MLA only: rows past the new length are rewritten later, nothing to restore. */
    seq->mtp_length[mtp_layer] = n_tokens;
    return GLM53_OK;
}

int64_t glm53_seq_length(const glm53_seq *seq) { return seq ? seq->length : 0; }
int64_t glm53_seq_capacity(const glm53_seq *seq) { return seq ? seq->params.max_tokens : 0; }
glm53_seq_params glm53_seq_params_get(const glm53_seq *seq) { return seq ? seq->params : glm53_seq_default_params(); }
int64_t glm53_seq_cache_bytes(const glm53_seq *seq) { return seq ? seq->bytes : 0; }

bool glm53_seq_is_live(const glm53_model *m, const glm53_seq *seq) {
    for (int64_t i = 0; i < m->n_live; i++)
        if (m->live[i] == seq) return true;
    return false;
}

void glm53_seq_step_begin(glm53_seq *const *seqs, int32_t n) {
    for (int32_t i = 0; i < n; i++) seqs[i]->in_step++;
}

/* Frees a sequence's memory and its share of the model's accounting; the model goes too if it was freed and
 * this was the last sequence it held. Called without the model lock. */
static void seq_destroy(glm53_seq *seq) {
    glm53_model *m = seq->model;
    int64_t bytes = seq->bytes;
    seq_release(seq);
    pthread_mutex_lock(&m->lock);
    m->cache_bytes -= bytes;
    for (int32_t r = 0; r < m->n_ranks; r++) m->ranks[r].cache_bytes -= bytes / m->n_ranks;
    bool last = --m->held_seqs == 0 && m->free_requested;
    pthread_mutex_unlock(&m->lock);
    if (last) glm53_model_destroy(m);
}

void glm53_seq_step_end(glm53_model *m, glm53_seq *const *seqs, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        pthread_mutex_lock(&m->lock);
        bool release = --seqs[i]->in_step == 0 && seqs[i]->free_requested;
        pthread_mutex_unlock(&m->lock);
        if (release) seq_destroy(seqs[i]);
    }
}

void glm53_seq_free(glm53_seq *seq) {
    if (!seq) return;
    glm53_model *m = seq->model;
    pthread_mutex_lock(&m->lock);
    for (int64_t i = 0; i < m->n_live; i++)
        if (m->live[i] == seq) {
            m->live[i] = m->live[--m->n_live];
            break;
        }
    /* Freed while a step uses it (the server cancelling a request): it goes when that step ends. */
    bool defer = seq->in_step > 0;
    seq->free_requested = true;
    pthread_mutex_unlock(&m->lock);
    if (!defer) seq_destroy(seq);
}

/* ------------------------------------------------------------------------------------------------------------
 * Research capture (glm53.h: glm53_seq_capture_*)
 */
static glm53_status capture_layer(const glm53_seq *seq, int32_t layer, const char *what, const layer_cache **lc,
                                  int64_t *n_positions) {
    if (!seq) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "%s: seq is NULL", what);
    const glm53_model *m = seq->model;
    int32_t L = m->config.text.num_hidden_layers;
    if (layer < 0 || layer >= L + m->n_mtp)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "%s: layer %d is outside [0, %d)", what, layer, L + m->n_mtp);
    *lc = seq_cache(seq, &m->ranks[0], layer);
    *n_positions = layer < L ? seq->length : seq->mtp_length[layer - L];
    return GLM53_OK;
}

glm53_status glm53_seq_capture_experts(const glm53_seq *seq, int32_t layer, const int32_t **ids,
                                       const float **weights, int32_t *k, int64_t *n_positions) {
    const layer_cache *lc;
    int64_t n;
    GLM53_TRY(capture_layer(seq, layer, "seq_capture_experts", &lc, &n));
    if (!lc->cap_ids)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "seq_capture_experts: layer %d has no capture of routed experts "
                          "(not an MoE layer, or the sequence was made without GLM53_CAPTURE_EXPERTS)", layer);
    if (ids) *ids = lc->cap_ids;
    if (weights) *weights = lc->cap_weights;
    if (k) *k = seq->model->config.text.num_experts_per_tok;
    if (n_positions) *n_positions = n;
    return GLM53_OK;
}

glm53_status glm53_seq_capture_selection(const glm53_seq *seq, int32_t layer, const int32_t **positions,
                                         int32_t *width, int64_t *n_positions) {
    const layer_cache *lc;
    int64_t n;
    GLM53_TRY(capture_layer(seq, layer, "seq_capture_selection", &lc, &n));
    if (!lc->cap_positions)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "seq_capture_selection: layer %d has no capture of selections "
                          "(not a sparse MLA layer with a full indexer, or the sequence was made without "
                          "GLM53_CAPTURE_SELECTION)", layer);
    if (positions) *positions = lc->cap_positions;
    if (width) *width = (int32_t)selection_width(&seq->model->config.text);
    if (n_positions) *n_positions = n;
    return GLM53_OK;
}
