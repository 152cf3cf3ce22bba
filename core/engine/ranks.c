/*
 * ranks.c - the rank threads of a tensor/expert-parallel model (ranks.h).
 *
 * A run is one generation: the caller publishes (fn, arg), bumps the generation and wakes the threads, runs rank
 * 0 itself, then waits until every other rank has reported. Each rank's status and error text are kept (the
 * error message is per thread), and the first rank to fail, in time, is the one reported: the others usually
 * failed because it aborted the communicator under them.
 */
#include "core/engine/ranks.h"

#include <stdio.h>
#include <stdlib.h>

struct glm53_rank_threads {
    pthread_t      *threads;     /* [n_ranks] (entry 0 unused: rank 0 is the caller) */
    int32_t         n_started;
    pthread_mutex_t mutex;
    pthread_cond_t  wake, done;
    uint64_t        generation;
    bool            stop;
    glm53_rank_fn   fn;
    void           *arg;
    int32_t         pending;     /* ranks > 0 still running this generation */
    int32_t         first_failed;
    glm53_status   *status;      /* [n_ranks] */
    char          (*error)[512]; /* [n_ranks] */
};

typedef struct {
    glm53_model *m;
    int32_t      rank;
} thread_arg;

/* Records a rank's result; the first failure aborts the communicator. */
static void report(glm53_model *m, int32_t r, glm53_status st) {
    glm53_rank_threads *t = m->rank_threads;
    bool first = false;
    pthread_mutex_lock(&t->mutex);
    t->status[r] = st;
    if (st != GLM53_OK) {
        snprintf(t->error[r], sizeof t->error[r], "%s", glm53_last_error());
        if (t->first_failed < 0) {
            t->first_failed = r;
            first = true;
        }
    }
    pthread_mutex_unlock(&t->mutex);
    if (first && m->comms) m->comms[r]->ops->abort(m->comms[r]);
}

static void *rank_main(void *p) {
    thread_arg a = *(thread_arg *)p;
    free(p);
    glm53_rank_threads *t = a.m->rank_threads;
    uint64_t seen = 0;
    pthread_mutex_lock(&t->mutex);
    for (;;) {
        while (!t->stop && t->generation == seen) pthread_cond_wait(&t->wake, &t->mutex);
        if (t->stop) break;
        seen = t->generation;
        glm53_rank_fn fn = t->fn;
        void *arg = t->arg;
        pthread_mutex_unlock(&t->mutex);
        glm53_clear_error();
        report(a.m, a.rank, fn(&a.m->ranks[a.rank], arg));
        pthread_mutex_lock(&t->mutex);
        if (--t->pending == 0) pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

glm53_status glm53_ranks_start(glm53_model *m) {
    if (m->n_ranks < 2) return GLM53_OK;
    glm53_rank_threads *t = calloc(1, sizeof *t);
    if (!t) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the rank threads");
    t->threads = calloc((size_t)m->n_ranks, sizeof *t->threads);
    t->status = calloc((size_t)m->n_ranks, sizeof *t->status);
    t->error = calloc((size_t)m->n_ranks, sizeof *t->error);
    pthread_mutex_init(&t->mutex, NULL);
    pthread_cond_init(&t->wake, NULL);
    pthread_cond_init(&t->done, NULL);
    m->rank_threads = t;
    if (!t->threads || !t->status || !t->error) {
        glm53_ranks_stop(m);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the rank threads");
    }
    for (int32_t r = 1; r < m->n_ranks; r++) {
        thread_arg *a = malloc(sizeof *a);
        if (a) *a = (thread_arg){m, r};
        if (!a || pthread_create(&t->threads[r], NULL, rank_main, a) != 0) {
            free(a);
            glm53_ranks_stop(m);
            return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cannot start the thread of rank %d", r);
        }
        t->n_started = r;
    }
    return GLM53_OK;
}

void glm53_ranks_stop(glm53_model *m) {
    glm53_rank_threads *t = m->rank_threads;
    if (!t) return;
    pthread_mutex_lock(&t->mutex);
    t->stop = true;
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->mutex);
    for (int32_t r = 1; r <= t->n_started; r++) pthread_join(t->threads[r], NULL);
    pthread_mutex_destroy(&t->mutex);
    pthread_cond_destroy(&t->wake);
    pthread_cond_destroy(&t->done);
    free(t->threads);
    free(t->status);
    free(t->error);
    free(t);
    m->rank_threads = NULL;
}

glm53_status glm53_ranks_run(glm53_model *m, glm53_rank_fn fn, void *arg) {
    if (m->n_ranks == 1) return fn(&m->ranks[0], arg);
    glm53_rank_threads *t = m->rank_threads;
    pthread_mutex_lock(&t->mutex);
    t->fn = fn;
    t->arg = arg;
    t->first_failed = -1;
    t->pending = m->n_ranks - 1;
    t->generation++;
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->mutex);

    report(m, 0, fn(&m->ranks[0], arg));

    pthread_mutex_lock(&t->mutex);
    while (t->pending > 0) pthread_cond_wait(&t->done, &t->mutex);
    int32_t r = t->first_failed;
    pthread_mutex_unlock(&t->mutex);
    if (r < 0) return GLM53_OK;
    if (m->comms) m->comms[0]->ops->reset(m->comms[0]);
    if (r == 0) return t->status[0];   /* its message is this thread's already */
    return GLM53_FAIL(t->status[r], "rank %d: %s", r, t->error[r]);
}
