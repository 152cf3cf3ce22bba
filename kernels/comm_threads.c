/*
 * comm_threads.c - the in-process communicator (comm.h): N ranks as threads of one process, over backends whose
 * tensors live in host memory (the CPU backend). It exists so that tensor and expert parallelism are tested in CI
 * without GPUs; it is not tuned for speed.
 *
 * all_reduce over a group of G ranks, each with its buffer x_m:
 *   1. every rank publishes its buffer's address and size, then waits at the group's barrier;
 *   2. every rank computes the whole sum into its own scratch, element by element in rank order
 *      (x_0 + x_1 + ... + x_{G-1}, F32), so all ranks hold the same bits;
 *   3. a second barrier (nobody reads a buffer that is about to change), then each copies its scratch back.
 * A group of one rank returns at once, so one rank with this communicator is the one-rank model exactly.
 *
 * Barriers count arrivals under one mutex; a generation number tells a woken waiter that its round completed.
 * abort wakes every waiter with an error, and reset (after all ranks have left their step) clears it.
 */
#include "kernels/comm.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    int32_t        size, arrived;
    uint64_t       generation;
    pthread_cond_t cond;
    float        **data;     /* [size] the members' buffers of this round */
    int64_t       *count;    /* [size] their element counts */
} group_state;

typedef struct {
    pthread_mutex_t lock;
    bool            aborted;
    int32_t         n_ranks, tp;
    group_state    *groups;      /* [n_ranks / tp] TP groups (by ep_rank), then the world */
    glm53_comm     *endpoints;   /* [n_ranks] */
    float         **scratch;     /* [n_ranks] each rank's sum buffer */
    int64_t        *scratch_cap;
} threads_world;

static const glm53_comm_ops threads_ops;

/* Waits until all members of g arrived; fails if the pass was aborted before that. */
static glm53_status barrier(threads_world *w, group_state *g, int32_t rank) {
    pthread_mutex_lock(&w->lock);
    uint64_t gen = g->generation;
    if (!w->aborted && ++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cond);
    }
    while (g->generation == gen && !w->aborted) pthread_cond_wait(&g->cond, &w->lock);
    bool completed = g->generation != gen;
    pthread_mutex_unlock(&w->lock);
    if (!completed)
        return GLM53_FAIL(GLM53_ERR_BACKEND, "all_reduce (threads): rank %d stopped waiting: another rank's step "
                          "failed", rank);
    return GLM53_OK;
}

static glm53_status threads_all_reduce(glm53_comm *c, glm53_backend *be, glm53_tensor *t, glm53_comm_group group) {
    threads_world *w = c->impl;
    (void)be;
    if (t->dtype != GLM53_F32 || t->device != GLM53_DEVICE_CPU || !glm53_tensor_is_contiguous(t))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "all_reduce (threads): needs a contiguous F32 host tensor, got %s "
                          "on device %d", glm53_dtype_name((glm53_dtype)t->dtype), t->device);
    int32_t ep_rank = c->rank / c->tp, member = group == GLM53_COMM_TP ? c->rank % c->tp : c->rank;
    group_state *g = group == GLM53_COMM_TP ? &w->groups[ep_rank] : &w->groups[w->n_ranks / w->tp];
    if (g->size == 1) return GLM53_OK;
    int64_t n = glm53_tensor_numel(t);
    if (n > w->scratch_cap[c->rank]) {
        float *grown = realloc(w->scratch[c->rank], (size_t)n * sizeof(float));
        if (!grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "all_reduce (threads): no memory for %lld floats",
                                      (long long)n);
        w->scratch[c->rank] = grown;
        w->scratch_cap[c->rank] = n;
    }
    g->data[member] = t->data;
    g->count[member] = n;
    GLM53_TRY(barrier(w, g, c->rank));
    glm53_status st = GLM53_OK;
    for (int32_t m = 0; m < g->size; m++)
        if (g->count[m] != n)
            st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "all_reduce (threads): rank %d reduces %lld elements, a peer %lld",
                            c->rank, (long long)n, (long long)g->count[m]);
    float *sum = w->scratch[c->rank];
    if (st == GLM53_OK)
        for (int64_t i = 0; i < n; i++) {
            float s = g->data[0][i];
            for (int32_t m = 1; m < g->size; m++) s += g->data[m][i];
            sum[i] = s;
        }
    glm53_status after = barrier(w, g, c->rank);
    if (st != GLM53_OK) return st;
    GLM53_TRY(after);
    memcpy(t->data, sum, (size_t)n * sizeof(float));
    return GLM53_OK;
}

static void threads_abort(glm53_comm *c) {
    threads_world *w = c->impl;
    pthread_mutex_lock(&w->lock);
    w->aborted = true;
    for (int32_t g = 0; g <= w->n_ranks / w->tp; g++) pthread_cond_broadcast(&w->groups[g].cond);
    pthread_mutex_unlock(&w->lock);
}

static void threads_reset(glm53_comm *c) {
    threads_world *w = c->impl;
    pthread_mutex_lock(&w->lock);
    w->aborted = false;
    for (int32_t g = 0; g <= w->n_ranks / w->tp; g++) w->groups[g].arrived = 0;
    pthread_mutex_unlock(&w->lock);
}

static void world_free(threads_world *w) {
    if (!w) return;
    if (w->groups)
        for (int32_t g = 0; g <= w->n_ranks / w->tp; g++) {
            pthread_cond_destroy(&w->groups[g].cond);
            free(w->groups[g].data);
            free(w->groups[g].count);
        }
    if (w->scratch)
        for (int32_t r = 0; r < w->n_ranks; r++) free(w->scratch[r]);
    free(w->scratch);
    free(w->scratch_cap);
    free(w->groups);
    free(w->endpoints);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

static void threads_destroy(glm53_comm **endpoints, int32_t n) {
    if (n > 0 && endpoints[0]) world_free(endpoints[0]->impl);
    for (int32_t r = 0; r < n; r++) endpoints[r] = NULL;
}

static const glm53_comm_ops threads_ops = {
    .name = "threads",
    .all_reduce = threads_all_reduce,
    .abort = threads_abort,
    .reset = threads_reset,
    .destroy = threads_destroy,
};

glm53_status glm53_comm_threads_create(int32_t n_ranks, int32_t tp, glm53_comm **out) {
    if (n_ranks < 1 || tp < 1 || n_ranks % tp)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "comm (threads): %d ranks do not form groups of tp = %d", n_ranks, tp);
    threads_world *w = calloc(1, sizeof *w);
    if (!w) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "comm (threads): no memory");
    pthread_mutex_init(&w->lock, NULL);
    w->n_ranks = n_ranks;
    w->tp = tp;
    int32_t n_groups = n_ranks / tp + 1;
    w->groups = calloc((size_t)n_groups, sizeof *w->groups);
    w->endpoints = calloc((size_t)n_ranks, sizeof *w->endpoints);
    w->scratch = calloc((size_t)n_ranks, sizeof *w->scratch);
    w->scratch_cap = calloc((size_t)n_ranks, sizeof *w->scratch_cap);
    bool ok = w->groups && w->endpoints && w->scratch && w->scratch_cap;
    for (int32_t g = 0; w->groups && g < n_groups; g++) {
        group_state *gs = &w->groups[g];
        gs->size = g < n_groups - 1 ? tp : n_ranks;
        pthread_cond_init(&gs->cond, NULL);
        gs->data = calloc((size_t)gs->size, sizeof *gs->data);
        gs->count = calloc((size_t)gs->size, sizeof *gs->count);
        ok = ok && gs->data && gs->count;
    }
    if (!ok) {
        if (!w->groups) w->n_ranks = 0;   /* nothing per group to free */
        world_free(w);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "comm (threads): no memory for %d ranks", n_ranks);
    }
    for (int32_t r = 0; r < n_ranks; r++) {
        w->endpoints[r] = (glm53_comm){.ops = &threads_ops, .rank = r, .n_ranks = n_ranks, .tp = tp, .impl = w};
        out[r] = &w->endpoints[r];
    }
    return GLM53_OK;
}
