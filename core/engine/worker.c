/*
 * worker.c - the async step: one worker thread per model runs submitted steps in order and signals each
 * completion on an eventfd that an event loop (luv's uv_poll) watches, so the loop keeps serving while a long
 * prefill runs.
 *
 *   submit    (caller's thread) checks the request, holds its sequences (a sequence freed meanwhile stays
 *             until the step is over, and the step then fails cleanly: it is no longer live), queues it, and
 *             starts the thread on first use;
 *   worker    takes requests in order and runs them through the same driver as glm53_model_step; the status
 *             and the error text of the worker thread travel with the completion (glm53_last_error is per
 *             thread, so the caller could not read the worker's);
 *   poll/wait (caller's thread) take completions in order; each one read decrements the eventfd's counter.
 */
#include "core/engine/worker.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
    glm53_step_request    request;
    glm53_step_completion completion;
} job;

struct glm53_worker {
    pthread_t       thread;
    pthread_mutex_t mutex;
    pthread_cond_t  wake;       /* a request was queued, or stop was asked */
    pthread_cond_t  done;       /* a completion was queued (for glm53_model_wait) */
    int             fd;         /* eventfd, EFD_SEMAPHORE: one count per completion not yet taken */
    job            *jobs;       /* ring of requests, then of completions: [taken, ran) done, [ran, queued) waiting */
    int64_t         cap, taken, ran, queued;
    bool            stop;
};

static void release_hold(glm53_model *m, const glm53_step_request *rq) {
    glm53_seq_step_end(m, rq->batch->seqs, rq->batch->n_seqs);
}

/* How long the worker polls for the next request before it sleeps. An event loop that steps a batch round after
 * round submits the next step a few tens of microseconds after taking a completion; a thread that went to sleep
 * meanwhile takes far longer to wake (50-100 us on the two-vCPU machines here, measured: an idle vCPU halts).
 * Yields the core at every few polls, to whoever else wants it. */
enum { WORKER_SPIN_US = 500 };

static int64_t worker_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Polls, without the mutex, until a request is queued past `ran`, stop is asked, or the spin time is over. */
static void worker_spin(glm53_worker *w, int64_t ran) {
    int64_t until = worker_now_us() + WORKER_SPIN_US;
    for (int i = 1; __atomic_load_n(&w->queued, __ATOMIC_ACQUIRE) == ran && !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE);
         i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (i % 64 == 0) {
            if (worker_now_us() > until) return;
            sched_yield();
        }
    }
}

static void *worker_main(void *arg) {
    glm53_model *m = arg;
    glm53_worker *w = m->worker;
    pthread_mutex_lock(&w->mutex);
    for (;;) {
        if (!w->stop && w->ran == w->queued) {
            int64_t ran = w->ran;
            pthread_mutex_unlock(&w->mutex);
            worker_spin(w, ran);
            pthread_mutex_lock(&w->mutex);
        }
        while (!w->stop && w->ran == w->queued) pthread_cond_wait(&w->wake, &w->mutex);
        if (w->ran == w->queued) break;   /* stopping, nothing left */
        job *j = &w->jobs[w->ran % w->cap];
        glm53_step_request rq = j->request;
        bool cancelled = w->stop;
        pthread_mutex_unlock(&w->mutex);

        glm53_step_completion c = {.tag = rq.tag};
        if (cancelled) {
            c.status = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_submit: the model was freed before this step ran");
        } else {
            glm53_clear_error();
            c.status = rq.mtp_layer < 0 ? glm53_model_step(m, rq.batch, rq.out)
                                        : glm53_model_mtp_step(m, rq.mtp_layer, rq.batch, rq.hidden_in, rq.out);
            c.n_out = c.status == GLM53_OK ? rq.out->n_out : 0;
        }
        if (c.status != GLM53_OK) snprintf(c.error, sizeof c.error, "%s", glm53_last_error());
        release_hold(m, &rq);

        pthread_mutex_lock(&w->mutex);
        j->completion = c;
        w->ran++;
        uint64_t one = 1;
        while (write(w->fd, &one, sizeof one) < 0 && errno == EINTR) {}
        pthread_cond_broadcast(&w->done);
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

static glm53_status worker_start(glm53_model *m) {
    glm53_worker *w = calloc(1, sizeof *w);
    if (!w) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "model_submit: no memory for the worker");
    w->cap = 16;
    w->jobs = calloc((size_t)w->cap, sizeof *w->jobs);
    w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    if (!w->jobs || w->fd < 0) {
        int err = errno;
        glm53_status st = w->jobs ? GLM53_ERR_IO : GLM53_ERR_OUT_OF_MEMORY;
        if (w->fd >= 0) close(w->fd);
        free(w->jobs);
        free(w);
        return GLM53_FAIL(st, "model_submit: cannot make the worker's eventfd or queue: %s", strerror(err));
    }
    pthread_mutex_init(&w->mutex, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->done, NULL);
    m->worker = w;
    if (pthread_create(&w->thread, NULL, worker_main, m) != 0) {
        m->worker = NULL;
        close(w->fd);
        free(w->jobs);
        free(w);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "model_submit: cannot start the worker thread");
    }
    return GLM53_OK;
}

void glm53_worker_stop(glm53_model *m) {
    glm53_worker *w = m->worker;
    if (!w) return;
    pthread_mutex_lock(&w->mutex);
    __atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->mutex);
    pthread_join(w->thread, NULL);
    close(w->fd);
    pthread_mutex_destroy(&w->mutex);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    free(w->jobs);
    free(w);
    m->worker = NULL;
}

/* ------------------------------------------------------------------------------------------------------------
 * Public API
 */
int32_t glm53_model_completion_fd(glm53_model *m) {
    if (!m) {
        GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_completion_fd: model is NULL");
        return -1;
    }
    if (!m->worker && worker_start(m) != GLM53_OK) return -1;
    return m->worker->fd;
}

glm53_status glm53_model_submit(glm53_model *m, const glm53_step_request *rq) {
    if (!m || !rq || !rq->batch || !rq->out || rq->batch->n_seqs < 1 || !rq->batch->seqs)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_submit: model, request, its batch (n_seqs >= 1) and out are "
                          "required");
    if (!m->worker) GLM53_TRY(worker_start(m));
    /* Hold the sequences (under the model lock, after checking they are live) until the step is over. */
    pthread_mutex_lock(&m->lock);
    glm53_status st = GLM53_OK;
    for (int32_t i = 0; st == GLM53_OK && i < rq->batch->n_seqs; i++)
        if (!rq->batch->seqs[i] || !glm53_seq_is_live(m, rq->batch->seqs[i]))
            st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_submit: sequence %d is not a live sequence of this model", i);
    if (st == GLM53_OK) glm53_seq_step_begin(rq->batch->seqs, rq->batch->n_seqs);
    pthread_mutex_unlock(&m->lock);
    GLM53_TRY(st);

    glm53_worker *w = m->worker;
    pthread_mutex_lock(&w->mutex);
    if (w->queued - w->taken == w->cap) {
        /* Grow the ring, keeping the order of what it holds. */
        job *grown = calloc((size_t)(2 * w->cap), sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&w->mutex);
            release_hold(m, rq);
            return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "model_submit: no memory to queue a step");
        }
        for (int64_t i = w->taken; i < w->queued; i++) grown[i % (2 * w->cap)] = w->jobs[i % w->cap];
        free(w->jobs);
        w->jobs = grown;
        w->cap *= 2;
    }
    w->jobs[w->queued % w->cap] = (job){.request = *rq};
    __atomic_store_n(&w->queued, w->queued + 1, __ATOMIC_RELEASE);   /* a spinning worker reads it unlocked */
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mutex);
    return GLM53_OK;
}

/* Takes the oldest completion, if any, with the worker's mutex held. */
static bool take_completion(glm53_worker *w, glm53_step_completion *out) {
    if (w->taken == w->ran) return false;
    *out = w->jobs[w->taken % w->cap].completion;
    w->taken++;
    uint64_t count;
    while (read(w->fd, &count, sizeof count) < 0 && errno == EINTR) {}
    return true;
}

int32_t glm53_model_poll(glm53_model *m, glm53_step_completion *out) {
    if (!m || !out || !m->worker) return 0;
    glm53_worker *w = m->worker;
    pthread_mutex_lock(&w->mutex);
    bool got = take_completion(w, out);
    pthread_mutex_unlock(&w->mutex);
    return got ? 1 : 0;
}

glm53_status glm53_model_wait(glm53_model *m, glm53_step_completion *out) {
    if (!m || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_wait: model and out are required");
    glm53_worker *w = m->worker;
    if (!w) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_wait: nothing was submitted");
    pthread_mutex_lock(&w->mutex);
    glm53_status st = GLM53_OK;
    while (w->taken == w->ran && w->ran < w->queued) pthread_cond_wait(&w->done, &w->mutex);
    if (!take_completion(w, out))
        st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_wait: no step is queued or running");
    pthread_mutex_unlock(&w->mutex);
    return st;
}
