/*
 * step.c - the step driver: glm53_model_step and glm53_model_mtp_step over a batch, and the capture/replay
 * hooks of step.h.
 *
 * One step:
 *   1. validate the batch against the model and the caches: every failure here changes nothing;
 *   2. split it into passes of at most step_rows batch rows (a pass is a contiguous range of rows, so a long
 *      prompt's rows go through several passes in order), so that a prompt of any length runs in bounded
 *      scratch;
 *   3. per pass: prepare (plan_begin: scratch and metadata room; the metadata filled on the host: token ids,
 *      output rows, positions, ring slots ...), enqueue (one metadata upload, then the graph of forward.c or
 *      mtp.c), finish (the outputs read back: the one wait for the device; the cache slots written recorded;
 *      the lengths advanced).
 * A backend failure in a later pass leaves each sequence at the length its completed passes reached.
 *
 * Ranks (docs/multi-gpu.md): prepare and enqueue run on every rank at once (ranks.c), each rank filling its own
 * plan with the same metadata and running the same graph on its slices of the weights; finish reads the
 * outputs from rank 0 (every rank computes the same logits) and waits for the others.
 *
 * A steady-state pass allocates nothing (the plan reuses its scratch, staging and headers) and waits for the
 * device only in finish; the enqueue phase is what glm53_step_capture records.
 */
#include "core/engine/step.h"

#include "core/engine/graph.h"
#include "core/engine/ranks.h"

#include <stdlib.h>

/* Rows a sequence already holds in the cache a step writes: the main layers, or MTP layer mtp_layer. */
static int64_t seq_position(const glm53_seq *s, int32_t mtp_layer) {
    return mtp_layer < 0 ? s->length : s->mtp_length[mtp_layer];
}

/* A step as the driver sees it. */
typedef struct {
    int32_t            mtp_layer;   /* -1: the main model */
    const glm53_batch *batch;
    const float       *hidden_in;   /* MTP: [total rows, D] */
    glm53_step_output *out;
    int64_t            total;       /* rows of the batch */
} step_request;

/* ------------------------------------------------------------------------------------------------------------
 * Validation. The batch's sequences are known to be live and held (step_enter) when this runs.
 */
static glm53_status validate(glm53_model *m, const step_request *rq, int64_t *total) {
    const glm53_text_config *c = &m->config.text;
    const glm53_batch *b = rq->batch;
    if (!rq->out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: out is required");
    int64_t rows = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        glm53_seq *s = b->seqs[i];
        for (int32_t j = 0; j < i; j++)
            if (b->seqs[j] == s) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: sequence %d appears twice", i);
        if (b->n_rows[i] < 1) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: sequence %d has %d rows", i,
                                                b->n_rows[i]);
        int64_t held = seq_position(s, rq->mtp_layer);
        if (held + b->n_rows[i] > s->params.max_tokens)
            return GLM53_FAIL(GLM53_ERR_CACHE_FULL, "model_step: sequence %d holds %lld of %lld tokens, %d more do not "
                              "fit", i, (long long)held, (long long)s->params.max_tokens, b->n_rows[i]);
        rows += b->n_rows[i];
    }
    int64_t wanted = 0;
    for (int64_t r = 0; r < rows; r++) {
        bool is_embedding = b->use_embedding && b->use_embedding[r];
        if (is_embedding && !b->embeddings)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: row %lld asks for an embedding but none given",
                              (long long)r);
        if (!is_embedding && (b->tokens[r] < 0 || b->tokens[r] >= c->vocab_size))
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "model_step: token id %d at row %lld is outside [0, %d)",
                              b->tokens[r], (long long)r, c->vocab_size);
        if (b->want_output) wanted += b->want_output[r] != 0;
    }
    if (!b->want_output) wanted = b->n_seqs;
    const glm53_step_output *o = rq->out;
    if (o->top_k < 0 || o->top_k > GLM53_MAX_TOP_K)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "model_step: top_k %d is outside [0, %d]", o->top_k,
                          GLM53_MAX_TOP_K);
    int64_t n_valid = o->top_n_valid <= 0 || o->top_n_valid > c->vocab_size ? c->vocab_size : o->top_n_valid;
    if (o->top_k > n_valid)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "model_step: top_k %d of %lld valid ids", o->top_k,
                          (long long)n_valid);
    if (o->top_k > 0 && !o->top_ids)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: top_k %d asked for without top_ids", o->top_k);
    if (wanted > 0 && (o->logits || o->hidden || o->top_k > 0) && o->capacity < wanted)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: %lld output rows asked for, buffers hold %d",
                          (long long)wanted, rq->out->capacity);
    *total = rows;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Preparing a pass: slices and metadata
 */
/* Where the pass's sequences start: the rows [r0, r1) of the batch, with seq_start[i] the batch row of sequence
 * i's first row. */
typedef struct {
    int64_t r0, r1;
    const int64_t *seq_start;
} pass_range;

static bool row_wanted(const glm53_batch *b, const int64_t *seq_start, int32_t i, int64_t r) {
    return b->want_output ? b->want_output[r] != 0 : r == seq_start[i] + b->n_rows[i] - 1;
}

/* Fills sc for rank rk's part of the pass: its slices, the plan's metadata (host) and the views the graph reads
 * (device). */
static glm53_status prepare_pass(step_ctx *sc, glm53_rank *rk, const step_request *rq, pass_range pr) {
    glm53_model *m = rk->model;
    glm53_step_plan *plan = &rk->plan;
    const glm53_text_config *c = &m->config.text;
    const glm53_batch *b = rq->batch;
    const bool main_step = rq->mtp_layer < 0;
    const bool kda = main_step && m->n_kda_layers > 0, mla = !main_step || m->n_mla_layers > 0;
    const int64_t D = c->hidden_size, N = pr.r1 - pr.r0, K = c->linear_conv_kernel_dim, P = c->index_kpool;

    /* The pass's sequences and their rows. */
    if (b->n_seqs > plan->cap_slices) {
        seq_slice *grown = realloc(plan->slices, (size_t)b->n_seqs * sizeof *grown);
        if (!grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the batch's slices");
        plan->slices = grown;
        glm53_kda_seq *kda_grown = realloc(plan->kda_seqs, (size_t)b->n_seqs * sizeof *kda_grown);
        if (!kda_grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the batch's slices");
        plan->kda_seqs = kda_grown;
        plan->cap_slices = b->n_seqs;
    }
    seq_slice *slices = plan->slices;
    int32_t n = 0;
    int64_t n_out = 0, n_emb = 0, n_meta = N;   /* token ids */
    for (int32_t i = 0; i < b->n_seqs; i++) {
        int64_t begin = pr.seq_start[i], end = begin + b->n_rows[i];
        if (end <= pr.r0 || begin >= pr.r1) continue;
        if (begin < pr.r0) begin = pr.r0;
        if (end > pr.r1) end = pr.r1;
        glm53_seq *s = b->seqs[i];
        seq_slice *sl = &slices[n++];
        *sl = (seq_slice){.seq = s, .row0 = begin - pr.r0, .n_rows = end - begin,
                          .pos0 = seq_position(s, rq->mtp_layer)};
        for (int64_t r = begin; r < end; r++) {
            n_out += row_wanted(b, pr.seq_start, i, r);
            n_emb += b->use_embedding && b->use_embedding[r];
        }
        int64_t T = sl->n_rows;
        if (mla) n_meta += 2 * T;
        if (kda) {
            sl->n_hist = sl->pos0 < K - 1 ? sl->pos0 : K - 1;
            sl->n_write = T < s->conv_width ? T : s->conv_width;
            n_meta += T + 1 + sl->n_hist + sl->n_write;
        }
    }
    n_meta += n_out + n_emb + n_emb * D;
    if (!main_step) n_meta += 2 * N + N * D;
    GLM53_TRY(glm53_plan_begin(plan, (size_t)n_meta * 4));

    *sc = (step_ctx){.m = m, .rank = rk, .be = rk->be, .plan = plan, .slices = slices, .n_seqs = n, .N = N,
                     .act = rk->be->act_dtype, .st = GLM53_OK, .n_out = n_out,
                     .want_logits = rq->out->logits != NULL, .want_hidden = rq->out->hidden != NULL,
                     .top_k = rq->out->top_k, .top_n_valid = rq->out->top_n_valid};
    glm53_status *st = &sc->st;
    size_t at;

    /* Step-wide rows: token ids, output rows, embedding rows and their floats. */
    int32_t *ids = glm53_plan_stage(plan, N, &at);
    for (int64_t r = 0; r < N; r++) {
        int64_t g = pr.r0 + r;
        ids[r] = b->use_embedding && b->use_embedding[g] ? 0 : b->tokens[g];
    }
    sc->token_ids = glm53_plan_meta_view(plan, st, GLM53_I32, at, N, 0);
    if (n_out > 0) {
        int32_t *want = glm53_plan_stage(plan, n_out, &at);
        int64_t k = 0;
        for (int32_t i = 0; i < b->n_seqs; i++)
            for (int64_t r = pr.seq_start[i]; r < pr.seq_start[i] + b->n_rows[i]; r++)
                if (r >= pr.r0 && r < pr.r1 && row_wanted(b, pr.seq_start, i, r)) want[k++] = (int32_t)(r - pr.r0);
        sc->out_rows = glm53_plan_meta_view(plan, st, GLM53_I32, at, n_out, 0);
    }
    if (n_emb > 0) {
        size_t at_f;
        int32_t *emb_rows = glm53_plan_stage(plan, n_emb, &at);
        float *emb = glm53_plan_stage(plan, n_emb * D, &at_f);
        int64_t k = 0;
        for (int64_t r = 0; r < N; r++)
            if (b->use_embedding[pr.r0 + r]) {
                memcpy(emb + k * D, b->embeddings + (pr.r0 + r) * D, (size_t)D * sizeof(float));
                emb_rows[k++] = (int32_t)r;
            }
        sc->emb_rows = glm53_plan_meta_view(plan, st, GLM53_I32, at, n_emb, 0);
        sc->emb = glm53_plan_meta_view(plan, st, GLM53_F32, at_f, n_emb * D, D);
    }
    if (!main_step) {
        int32_t *even = glm53_plan_stage(plan, N, &at), *odd;
        size_t at_odd, at_h;
        odd = glm53_plan_stage(plan, N, &at_odd);
        for (int64_t r = 0; r < N; r++) {
            even[r] = (int32_t)(2 * r);
            odd[r] = (int32_t)(2 * r + 1);
        }
        sc->even_rows = glm53_plan_meta_view(plan, st, GLM53_I32, at, N, 0);
        sc->odd_rows = glm53_plan_meta_view(plan, st, GLM53_I32, at_odd, N, 0);
        float *h = glm53_plan_stage(plan, N * D, &at_h);
        memcpy(h, rq->hidden_in + pr.r0 * D, (size_t)(N * D) * sizeof(float));
        sc->hidden_in = glm53_plan_meta_view(plan, st, GLM53_F32, at_h, N * D, D);
    }

    /* Per sequence: positions and closed pools (sparse MLA layers), ring slots (KDA layers). */
    int64_t n_select = c->index_topk / P, W = n_select * P + (c->index_kpool_always_select_tail ? P - 1 : 0);
    for (int32_t i = 0; i < n; i++) {
        seq_slice *sl = &slices[i];
        glm53_seq *s = sl->seq;
        int64_t T = sl->n_rows, pos0 = sl->pos0;
        if (mla) {
            size_t at_closed;
            int32_t *pos = glm53_plan_stage(plan, T, &at), *closed = glm53_plan_stage(plan, T, &at_closed);
            for (int64_t t = 0; t < T; t++) {
                pos[t] = (int32_t)(pos0 + t);
                closed[t] = (int32_t)((pos0 + t + 1) / P);
            }
            sl->pos = glm53_plan_meta_view(plan, st, GLM53_I32, at, T, 0);
            sl->n_closed = glm53_plan_meta_view(plan, st, GLM53_I32, at_closed, T, 0);
            /* The selection outlives the layer's scratch (a following "shared" layer reuses it): taken before
             * any layer's mark, so it lasts the pass. */
            sl->idx = glm53_plan_tensor(plan, st, GLM53_I32, 2, T, W, 0);
        }
        if (kda) {
            /* State ring: read the slot of the current length; the last `ring` lengths go to their slots, so a
             * rollback over up to max_rollback tokens finds its state without recomputation. */
            int32_t *slots = glm53_plan_stage(plan, T + 1, &at);
            slots[0] = (int32_t)(pos0 % s->ring);
            for (int64_t t = 0; t < T; t++) slots[1 + t] = t >= T - s->ring ? (int32_t)((pos0 + t + 1) % s->ring) : -1;
            sl->kda_slots = glm53_plan_meta_view(plan, st, GLM53_I32, at, T + 1, 0);
            /* Conv ring: the history rows that exist, and the ring slots of the rows kept. */
            if (sl->n_hist > 0) {
                int32_t *hist = glm53_plan_stage(plan, sl->n_hist, &at);
                for (int64_t j = 0; j < sl->n_hist; j++) hist[j] = (int32_t)((pos0 - sl->n_hist + j) % s->conv_width);
                sl->conv_hist = glm53_plan_meta_view(plan, st, GLM53_I32, at, sl->n_hist, 0);
            }
            int32_t *write = glm53_plan_stage(plan, sl->n_write, &at);
            for (int64_t j = 0; j < sl->n_write; j++)
                write[j] = (int32_t)((pos0 + T - sl->n_write + j) % s->conv_width);
            sl->conv_write = glm53_plan_meta_view(plan, st, GLM53_I32, at, sl->n_write, 0);
        }
    }
    return sc->st;
}

/* ------------------------------------------------------------------------------------------------------------
 * Enqueue and finish
 */
static glm53_status enqueue_pass(step_ctx *sc, const step_request *rq) {
    GLM53_TRY(glm53_plan_upload(sc->plan));
    if (rq->mtp_layer < 0) forward_main(sc);
    else mtp_forward(sc, rq->mtp_layer);
    return sc->st;
}

/* Reads the pass's outputs (rank 0's) into the caller's buffers at output row `out_row0`, waits for the other
 * ranks, records what the rings hold and advances the lengths. `st` is the enqueue's status: a failed pass still
 * records that its ring slots are void. ctx[r] is rank r's context of the pass. */
static glm53_status finish_pass(glm53_model *m, step_ctx *ctx, const step_request *rq, glm53_status st,
                                int64_t out_row0) {
    step_ctx *sc = &ctx[0];
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &m->config.text;
    if (st == GLM53_OK && sc->logits_out)
        st = be->ops->download(be, rq->out->logits + out_row0 * c->vocab_size, sc->logits_out);
    if (st == GLM53_OK && sc->hidden_out)
        st = be->ops->download(be, rq->out->hidden + out_row0 * c->hidden_size, sc->hidden_out);
    if (st == GLM53_OK && sc->top_ids_out)
        st = be->ops->download(be, rq->out->top_ids + out_row0 * sc->top_k, sc->top_ids_out);
    if (st == GLM53_OK && sc->top_logits_out && rq->out->top_logits)
        st = be->ops->download(be, rq->out->top_logits + out_row0 * sc->top_k, sc->top_logits_out);
    if (st == GLM53_OK && !sc->logits_out && !sc->hidden_out && !sc->top_ids_out) st = be->ops->sync(be);
    for (int32_t r = 1; r < m->n_ranks; r++) {
        glm53_backend *other = m->ranks[r].be;
        glm53_status synced = other->ops->sync(other);
        if (st == GLM53_OK && synced != GLM53_OK) st = synced;
    }
    for (int32_t i = 0; i < sc->n_seqs; i++) {
        seq_slice *s = &sc->slices[i];
        if (rq->mtp_layer < 0) {
            glm53_seq_note_step(s->seq, s->pos0, s->n_rows, st == GLM53_OK);
            if (st == GLM53_OK) s->seq->length += s->n_rows;
        } else if (st == GLM53_OK) {
            s->seq->mtp_length[rq->mtp_layer] += s->n_rows;
        }
    }
    if (rq->mtp_layer < 0) m->trace_step++;
    return st;
}

/* One pass on one rank (glm53_ranks_run): prepare, then enqueue or capture. */
typedef struct {
    const step_request *rq;
    pass_range          pr;
    step_ctx           *ctx;         /* [n_ranks] */
    glm53_graph       **capture;     /* NULL: run eagerly; else [n_ranks] record each rank's graph */
    glm53_step_graph   *replay;      /* NULL, or launch its graphs instead of enqueueing */
} pass_job;

static glm53_status rank_graph_launch(glm53_rank *rk, const pass_job *job);

static glm53_status rank_pass(glm53_rank *rk, void *arg) {
    pass_job *job = arg;
    step_ctx *sc = &job->ctx[rk->index];
    rk->be->workspace = &rk->plan.ws;
    glm53_status st = prepare_pass(sc, rk, job->rq, job->pr);
    if (st == GLM53_OK && job->replay) {
        st = rank_graph_launch(rk, job);
    } else if (st == GLM53_OK && job->capture) {
        rk->plan.ws.frozen = true;
        st = rk->be->ops->capture_begin(rk->be);
        if (st == GLM53_OK) {
            glm53_status run = enqueue_pass(sc, job->rq);
            st = rk->be->ops->capture_end(rk->be, &job->capture[rk->index]);
            if (run != GLM53_OK) st = run;
        }
        rk->plan.ws.frozen = false;
    } else if (st == GLM53_OK) {
        st = enqueue_pass(sc, job->rq);
    }
    rk->be->workspace = NULL;
    return st;
}

/* The one-step-at-a-time rule: takes the model's step and holds the batch's sequences (a sequence freed
 * meanwhile stays until the step ends), after checking under the lock that each is a live sequence of the model,
 * so no freed sequence is ever read. */
static glm53_status step_enter(glm53_model *m, const glm53_batch *b, const char *what) {
    if (!b || b->n_seqs < 1 || !b->seqs || !b->n_rows || !b->tokens)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "%s: batch needs n_seqs >= 1, seqs, n_rows and tokens", what);
    pthread_mutex_lock(&m->lock);
    glm53_status st = GLM53_OK;
    if (m->stepping) st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "%s: another step of this model is running", what);
    for (int32_t i = 0; st == GLM53_OK && i < b->n_seqs; i++)
        if (!b->seqs[i] || !glm53_seq_is_live(m, b->seqs[i]))
            st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "%s: sequence %d is not a live sequence of this model (freed, or "
                            "made by another model)", what, i);
    if (st == GLM53_OK) {
        m->stepping = true;
        glm53_seq_step_begin(b->seqs, b->n_seqs);
    }
    pthread_mutex_unlock(&m->lock);
    return st;
}

static void step_leave(glm53_model *m, const glm53_batch *b) {
    pthread_mutex_lock(&m->lock);
    m->stepping = false;
    pthread_mutex_unlock(&m->lock);
    glm53_seq_step_end(m, b->seqs, b->n_seqs);
}

/* The first batch row of each sequence, in the plan's buffer (no allocation once it has grown). */
static glm53_status seq_starts(glm53_step_plan *plan, const glm53_batch *b, int64_t **out) {
    if (b->n_seqs > plan->cap_seq_starts) {
        int64_t *grown = realloc(plan->seq_starts, (size_t)b->n_seqs * sizeof *grown);
        if (!grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the batch");
        plan->seq_starts = grown;
        plan->cap_seq_starts = b->n_seqs;
    }
    int64_t row = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        plan->seq_starts[i] = row;
        row += b->n_rows[i];
    }
    *out = plan->seq_starts;
    return GLM53_OK;
}

static glm53_status run_step(glm53_model *m, const step_request *rq) {
    GLM53_TRY(step_enter(m, rq->batch, rq->mtp_layer < 0 ? "model_step" : "mtp_step"));
    int64_t total = 0, *starts = NULL;
    glm53_status st = validate(m, rq, &total);
    if (st == GLM53_OK) st = seq_starts(&m->ranks[0].plan, rq->batch, &starts);
    int64_t out_row = 0, pass_rows = m->params.step_rows;
    step_ctx ctx[GLM53_MAX_RANKS];
    for (int64_t r0 = 0; st == GLM53_OK && r0 < total; r0 += pass_rows) {
        pass_job job = {.rq = rq, .pr = {r0, r0 + pass_rows < total ? r0 + pass_rows : total, starts}, .ctx = ctx};
        memset(ctx, 0, (size_t)m->n_ranks * sizeof ctx[0]);
        st = glm53_ranks_run(m, rank_pass, &job);
        st = finish_pass(m, ctx, rq, st, out_row);
        out_row += ctx[0].n_out;
    }
    if (st == GLM53_OK) rq->out->n_out = (int32_t)out_row;
    step_leave(m, rq->batch);
    return st;
}

glm53_status glm53_model_step(glm53_model *m, const glm53_batch *b, glm53_step_output *out) {
    if (!m) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: model is NULL");
    step_request rq = {.mtp_layer = -1, .batch = b, .out = out};
    return run_step(m, &rq);
}

glm53_status glm53_model_mtp_step(glm53_model *m, int32_t mtp_layer, const glm53_batch *b, const float *hidden_in,
                                  glm53_step_output *out) {
    if (!m) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "mtp_step: model is NULL");
    if (mtp_layer < 0) return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "mtp_step: MTP layer %d < 0", mtp_layer);
    if (mtp_layer >= m->n_mtp)
        return GLM53_FAIL(m->n_mtp ? GLM53_ERR_OUT_OF_RANGE : GLM53_ERR_UNSUPPORTED,
                          "mtp_step: MTP layer %d asked for; the model has %d loaded%s", mtp_layer, m->n_mtp,
                          m->n_mtp ? "" : " (the checkpoint has no MTP layer, or load_mtp was off)");
    if (!hidden_in) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "mtp_step: hidden_in is required");
    step_request rq = {.mtp_layer = mtp_layer, .batch = b, .hidden_in = hidden_in, .out = out};
    return run_step(m, &rq);
}

int32_t glm53_model_n_mtp(const glm53_model *m) { return m ? m->n_mtp : 0; }

/* ------------------------------------------------------------------------------------------------------------
 * Capture and replay (step.h)
 */
struct glm53_step_graph {
    glm53_graph  *graphs[GLM53_MAX_RANKS];       /* each rank's */
    uint64_t      generations[GLM53_MAX_RANKS];  /* each rank plan's, at capture */
    int32_t       n_seqs;
    glm53_seq   **seqs;           /* the batch's sequences and the lengths they held */
    int64_t      *lengths;
    int64_t       n_rows, n_out;
    glm53_tensor  logits, hidden, top_ids, top_logits;   /* rank 0's outputs in its scratch (data NULL: none) */
    int32_t       top_k;          /* and the top-k the capture computes */
    int32_t       top_n_valid;
};

void glm53_step_graph_free(glm53_model *m, glm53_step_graph *g) {
    if (!g) return;
    for (int32_t r = 0; r < m->n_ranks; r++)
        if (g->graphs[r]) m->ranks[r].be->ops->graph_free(m->ranks[r].be, g->graphs[r]);
    free(g->seqs);
    free(g->lengths);
    free(g);
}

static bool same_generations(const glm53_model *m, const glm53_step_graph *g) {
    for (int32_t r = 0; r < m->n_ranks; r++)
        if (glm53_plan_generation(&m->ranks[r].plan) != g->generations[r]) return false;
    return true;
}

/* The batch is the captured one, at the captured lengths, and no plan has moved since. */
static glm53_status check_replay(glm53_model *m, const glm53_step_graph *g, const glm53_batch *b) {
    bool same = b->n_seqs == g->n_seqs && same_generations(m, g);
    for (int32_t i = 0; same && i < b->n_seqs; i++) same = b->seqs[i] == g->seqs[i] && b->seqs[i]->length == g->lengths[i];
    if (!same)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "step_replay: the batch, its sequences' lengths or the step plan "
                          "differ from the captured step's");
    return GLM53_OK;
}

/* Replay on one rank: the metadata was refilled by prepare_pass at the same place; launch the rank's graph. */
static glm53_status rank_graph_launch(glm53_rank *rk, const pass_job *job) {
    if (glm53_plan_generation(&rk->plan) != job->replay->generations[rk->index])
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "step_replay: the step plan moved while preparing the replay");
    return rk->be->ops->graph_launch(rk->be, job->replay->graphs[rk->index]);
}

glm53_status glm53_step_capture(glm53_model *m, const glm53_batch *b, const glm53_step_output *outputs,
                                glm53_step_graph **out) {
    if (!m || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "step_capture: model and out are required");
    *out = NULL;
    glm53_backend *be0 = m->ranks[0].be;
    if (!be0->ops->capture_begin)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "step_capture: the %s backend cannot capture", be0->ops->name);
    if (m->trace_dir) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "step_capture: a traced step waits for the device");
    /* Outputs land in the scratch; the replay downloads them into its own buffers. Only whether each output is
     * asked for matters here (the capture writes no host buffer): the probes stand in for the caller's. */
    float probe_f;
    int32_t probe_i;
    glm53_step_output shape = {.logits = &probe_f, .hidden = &probe_f, .capacity = INT32_MAX};
    if (outputs) {
        shape = (glm53_step_output){.logits = outputs->logits ? &probe_f : NULL,
                                    .hidden = outputs->hidden ? &probe_f : NULL, .capacity = INT32_MAX,
                                    .top_k = outputs->top_k, .top_n_valid = outputs->top_n_valid,
                                    .top_ids = outputs->top_k > 0 ? &probe_i : NULL,
                                    .top_logits = outputs->top_logits ? &probe_f : NULL};
    }
    step_request rq = {.mtp_layer = -1, .batch = b, .out = &shape};
    GLM53_TRY(step_enter(m, b, "step_capture"));
    int64_t total = 0, *starts = NULL;
    glm53_status st = validate(m, &rq, &total);
    if (st == GLM53_OK && total > m->params.step_rows)
        st = GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "step_capture: %lld rows take more than one pass", (long long)total);
    if (st == GLM53_OK) st = seq_starts(&m->ranks[0].plan, b, &starts);
    glm53_step_graph *g = st == GLM53_OK ? calloc(1, sizeof *g) : NULL;
    if (g) {
        g->seqs = malloc((size_t)b->n_seqs * sizeof *g->seqs);
        g->lengths = malloc((size_t)b->n_seqs * sizeof *g->lengths);
    }
    if (st == GLM53_OK && (!g || !g->seqs || !g->lengths))
        st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "step_capture: no memory");
    step_ctx ctx[GLM53_MAX_RANKS];
    memset(ctx, 0, (size_t)m->n_ranks * sizeof ctx[0]);
    if (st == GLM53_OK) {
        pass_job job = {.rq = &rq, .pr = {0, total, starts}, .ctx = ctx, .capture = g->graphs};
        st = glm53_ranks_run(m, rank_pass, &job);
    }
    step_leave(m, b);
    if (st != GLM53_OK) {
        glm53_step_graph_free(m, g);
        return st;
    }
    for (int32_t r = 0; r < m->n_ranks; r++) g->generations[r] = glm53_plan_generation(&m->ranks[r].plan);
    g->n_seqs = b->n_seqs;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        g->seqs[i] = b->seqs[i];
        g->lengths[i] = b->seqs[i]->length;
    }
    g->n_rows = total;
    g->n_out = ctx[0].n_out;
    if (ctx[0].logits_out) g->logits = *ctx[0].logits_out;
    if (ctx[0].hidden_out) g->hidden = *ctx[0].hidden_out;
    if (ctx[0].top_ids_out) g->top_ids = *ctx[0].top_ids_out, g->top_logits = *ctx[0].top_logits_out;
    g->top_k = shape.top_k;
    g->top_n_valid = shape.top_n_valid;
    *out = g;
    return GLM53_OK;
}

glm53_status glm53_step_replay(glm53_model *m, glm53_step_graph *g, const glm53_batch *b, glm53_step_output *out) {
    if (!m || !g || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "step_replay: arguments are required");
    step_request rq = {.mtp_layer = -1, .batch = b, .out = out};
    GLM53_TRY(step_enter(m, b, "step_replay"));
    int64_t total = 0, *starts = NULL;
    glm53_status st = validate(m, &rq, &total);
    if (st == GLM53_OK) st = check_replay(m, g, b);
    if (st == GLM53_OK && (total != g->n_rows || (out->logits && !g->logits.data) || (out->hidden && !g->hidden.data) ||
                           out->top_k != g->top_k || (out->top_k && out->top_n_valid != g->top_n_valid)))
        st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "step_replay: rows or outputs differ from the captured step's");
    if (st == GLM53_OK) st = seq_starts(&m->ranks[0].plan, b, &starts);
    step_ctx ctx[GLM53_MAX_RANKS];
    memset(ctx, 0, (size_t)m->n_ranks * sizeof ctx[0]);
    /* Refill the metadata staging (same batch, same lengths: the same bytes at the same place), then replay. */
    if (st == GLM53_OK) {
        pass_job job = {.rq = &rq, .pr = {0, total, starts}, .ctx = ctx, .replay = g};
        st = glm53_ranks_run(m, rank_pass, &job);
    }
    if (ctx[0].slices) {
        ctx[0].logits_out = out->logits ? &g->logits : NULL;
        ctx[0].hidden_out = out->hidden ? &g->hidden : NULL;
        ctx[0].top_ids_out = out->top_k > 0 ? &g->top_ids : NULL;
        ctx[0].top_logits_out = out->top_k > 0 ? &g->top_logits : NULL;
        st = finish_pass(m, ctx, &rq, st, 0);
    }
    if (st == GLM53_OK) out->n_out = (int32_t)g->n_out;
    step_leave(m, b);
    return st;
}
