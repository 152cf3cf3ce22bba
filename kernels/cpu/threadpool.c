/*
 * threadpool.c - persistent workers driven by a generation counter.
 *
 * A run publishes (fn, ctx, n_items, n_active) under the mutex, bumps `generation` and wakes every worker.
 * Each worker remembers the last generation it served, so a spurious wake-up or a late one can never run a job
 * twice or miss one. Worker i (1..n-1) takes range i of n_active ranges; workers with i >= n_active only
 * report back. The caller takes range 0, then waits until `pending` (workers not yet done) drops to zero.
 *
 * No spinning: on a machine whose cores are oversubscribed (CI's and this project's 2-vCPU machines, where two
 * busy threads get about one core's time between them, measured), a worker polling for work steals the time the
 * caller needs and made an empty run cost 400 us instead of 10. Sleeping workers cost a wake-up per run, so the
 * backend hands the pool only ops big enough to pay for it (cpu_backend.c, CPU_PARALLEL_MIN_COST).
 */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include "kernels/cpu/threadpool.h"
#include "kernels/backend.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct pool_worker {
    glm53_pool *pool;
    int32_t     index;      /* 1..n_threads-1; range 0 belongs to the caller */
    pthread_t   thread;
} pool_worker;

struct glm53_pool {
    int32_t         n_threads;
    pool_worker    *workers;     /* [n_threads - 1] */
    pthread_mutex_t mutex;
    pthread_cond_t  work_ready;  /* generation changed (or stop) */
    pthread_cond_t  work_done;   /* pending reached zero */
    uint64_t        generation;
    int32_t         pending;
    bool            stop;
    /* the current job, valid while pending > 0 */
    glm53_pool_fn   fn;
    void           *ctx;
    int64_t         n_items;
    int32_t         n_active;
};

/* Range `part` of `n_parts` near-equal contiguous ranges of [0, n). */
static void pool_range(int64_t n, int32_t n_parts, int32_t part, int64_t *begin, int64_t *end) {
    *begin = n * part / n_parts;
    *end = n * (part + 1) / n_parts;
}

static void *pool_worker_main(void *arg) {
    pool_worker *w = arg;
    glm53_pool *pool = w->pool;
    uint64_t served = 0;
    for (;;) {
        pthread_mutex_lock(&pool->mutex);
        while (pool->generation == served && !pool->stop) pthread_cond_wait(&pool->work_ready, &pool->mutex);
        if (pool->stop) {
            pthread_mutex_unlock(&pool->mutex);
            return NULL;
        }
        served = pool->generation;
        glm53_pool_fn fn = pool->fn;
        void *ctx = pool->ctx;
        int64_t n_items = pool->n_items;
        int32_t n_active = pool->n_active;
        pthread_mutex_unlock(&pool->mutex);

        if (w->index < n_active) {
            int64_t begin, end;
            pool_range(n_items, n_active, w->index, &begin, &end);
            if (begin < end) fn(ctx, begin, end);
        }

        pthread_mutex_lock(&pool->mutex);
        if (--pool->pending == 0) pthread_cond_signal(&pool->work_done);
        pthread_mutex_unlock(&pool->mutex);
    }
}

static void pool_stop_workers(glm53_pool *pool, int32_t n_started) {
    pthread_mutex_lock(&pool->mutex);
    pool->stop = true;
    pthread_cond_broadcast(&pool->work_ready);
    pthread_mutex_unlock(&pool->mutex);
    for (int32_t i = 0; i < n_started; i++) pthread_join(pool->workers[i].thread, NULL);
}

int32_t glm53_physical_cores(void) {
    /* Cores this process may run on, counted once per (package, core) pair: hyperthread siblings share the
     * core's execution units, and the matmuls here are bound by them. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        return online > 0 ? (int32_t)online : 1;
    }
    int32_t n = 0, logical = CPU_COUNT(&set);
    long seen[CPU_SETSIZE];
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        long package = -1, core = -1;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld", &package) != 1) package = -1;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld", &core) != 1) core = -1;
            fclose(f);
        }
        if (package < 0 || core < 0) return logical > 0 ? logical : 1;   /* no topology: count logical CPUs */
        long key = package * 1000000 + core;
        bool dup = false;
        for (int32_t i = 0; i < n && !dup; i++) dup = seen[i] == key;
        if (!dup) seen[n++] = key;
    }
    return n > 0 ? n : 1;
}

glm53_status glm53_pool_create(int32_t n_threads, glm53_pool **out) {
    *out = NULL;
    if (n_threads < 0) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "thread pool: n_threads %d < 0", n_threads);
    if (n_threads == 0) n_threads = glm53_physical_cores();
    glm53_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "thread pool: out of memory");
    pool->n_threads = n_threads;
    if (n_threads > 1) {
        pool->workers = calloc((size_t)(n_threads - 1), sizeof *pool->workers);
        if (!pool->workers) {
            free(pool);
            return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "thread pool: out of memory for %d workers", n_threads);
        }
    }
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->work_ready, NULL);
    pthread_cond_init(&pool->work_done, NULL);
    for (int32_t i = 0; i < n_threads - 1; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].index = i + 1;
        int rc = pthread_create(&pool->workers[i].thread, NULL, pool_worker_main, &pool->workers[i]);
        if (rc != 0) {
            pool_stop_workers(pool, i);
            pool->n_threads = 1;   /* nothing left to join in glm53_pool_free */
            glm53_pool_free(pool);
            return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "thread pool: pthread_create failed for worker %d of %d "
                              "(error %d)", i + 1, n_threads, rc);
        }
    }
    *out = pool;
    return GLM53_OK;
}

void glm53_pool_free(glm53_pool *pool) {
    if (!pool) return;
    if (pool->n_threads > 1) pool_stop_workers(pool, pool->n_threads - 1);
    pthread_cond_destroy(&pool->work_done);
    pthread_cond_destroy(&pool->work_ready);
    pthread_mutex_destroy(&pool->mutex);
    free(pool->workers);
    free(pool);
}

int32_t glm53_pool_n_threads(const glm53_pool *pool) { return pool->n_threads; }

void glm53_pool_run(glm53_pool *pool, int64_t n_items, glm53_pool_fn fn, void *ctx) {
    if (n_items <= 0) return;
    if (pool->n_threads == 1 || n_items == 1) {
        fn(ctx, 0, n_items);
        return;
    }
    int32_t n_active = n_items < pool->n_threads ? (int32_t)n_items : pool->n_threads;

    pthread_mutex_lock(&pool->mutex);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_items = n_items;
    pool->n_active = n_active;
    pool->pending = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->work_ready);
    pthread_mutex_unlock(&pool->mutex);

    int64_t begin, end;
    pool_range(n_items, n_active, 0, &begin, &end);
    fn(ctx, begin, end);

    pthread_mutex_lock(&pool->mutex);
    while (pool->pending > 0) pthread_cond_wait(&pool->work_done, &pool->mutex);
    pthread_mutex_unlock(&pool->mutex);
}
