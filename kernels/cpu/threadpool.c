/*
 * threadpool.c - persistent workers that claim chunks of a run.
 *
 * A run cuts [0, n_items) into chunks (a few per thread) and publishes itself in one 64-bit word: the run's
 * generation in the high half, the next unclaimed chunk in the low half. Every participant - the caller and
 * whichever workers are awake - claims chunks by compare-and-swap on that word until none is left, and counts the
 * chunks it finished; the caller returns when all are finished. So a run never waits for a thread that has not
 * started yet: on a machine with more busy threads than cores (the server's event loop beside a step, two
 * vCPUs), a worker the scheduler has put aside simply claims nothing, and the caller does its share. While the
 * caller writes a run's arguments the word holds the new generation with no chunk claimable (POOL_CLOSED); a
 * worker claims only under the generation whose arguments it read, so it never calls a run's function with
 * another run's arguments, even when it read them while the next run was being written.
 *
 * Between runs a worker spins for POOL_SPIN_US (ops of a step come microseconds apart, and a futex wake-up costs
 * tens of them), yielding the core when someone else wants it, then sleeps on a condition variable; the caller
 * signals only when some worker sleeps. An idle pool costs nothing after the spin.
 */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include "kernels/cpu/threadpool.h"
#include "kernels/backend.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define POOL_CLOSED 0xffffffffu   /* the low half of `claim` while a run's arguments are being written */

enum {
    POOL_SPIN_US = 200,          /* a worker's wait for the next run before it sleeps */
    POOL_CHUNKS_PER_THREAD = 4,  /* enough to even out uneven items and a late thread (test_cpu_ops knows the 4) */
};

typedef struct pool_worker {
    glm53_pool *pool;
    pthread_t   thread;
} pool_worker;

struct glm53_pool {
    int32_t         n_threads;
    pool_worker    *workers;     /* [n_threads - 1] */
    /* The current run. The fields are written by the caller before it publishes the run in `claim`, and read by
     * workers after they saw that generation there; a claim succeeds only while the generation is unchanged. */
    uint64_t        claim;       /* generation << 32 | next chunk */
    int64_t         done;        /* chunks finished in this run */
    glm53_pool_fn   fn;
    void           *ctx;
    int64_t         n_items;
    int64_t         n_chunks;
    /* Sleeping */
    pthread_mutex_t mutex;
    pthread_cond_t  wake;
    int32_t         n_sleeping;
    bool            stop;
};

#define LOAD(p) __atomic_load_n(p, __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_SEQ_CST)
#define LOAD_RELAXED(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define STORE_RELAXED(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Claims and runs chunks of the run of generation gen until none is left (or a newer run replaced it). The
 * caller saw gen open in `claim`, so the arguments read here are that run's, or a later run's while a claim under
 * gen can no longer succeed. */
static void pool_work(glm53_pool *pool, uint32_t gen) {
    glm53_pool_fn fn = LOAD_RELAXED(&pool->fn);
    void *ctx = LOAD_RELAXED(&pool->ctx);
    int64_t n_items = LOAD_RELAXED(&pool->n_items), n_chunks = LOAD_RELAXED(&pool->n_chunks);
    uint64_t word = LOAD(&pool->claim);
    for (;;) {
        if ((uint32_t)(word >> 32) != gen || (uint32_t)word == POOL_CLOSED || (int64_t)(uint32_t)word >= n_chunks)
            return;
        if (!__atomic_compare_exchange_n(&pool->claim, &word, word + 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            continue;   /* word now holds the current value */
        int64_t chunk = (int64_t)(uint32_t)word;
        int64_t begin = n_items * chunk / n_chunks, end = n_items * (chunk + 1) / n_chunks;
        if (begin < end) fn(ctx, begin, end);
        __atomic_add_fetch(&pool->done, 1, __ATOMIC_SEQ_CST);
        word++;
    }
}

static void *pool_worker_main(void *arg) {
    pool_worker *w = arg;
    glm53_pool *pool = w->pool;
    uint32_t seen = 0;
    for (;;) {
        /* Wait for a generation other than the one served, open for claims: spin a while, then sleep. */
        uint64_t word = LOAD(&pool->claim);
        int64_t spin_until = now_us() + POOL_SPIN_US;
        for (int i = 1; ((uint32_t)(word >> 32) == seen || (uint32_t)word == POOL_CLOSED) && !LOAD(&pool->stop); i++) {
            cpu_relax();
            if (i % 64 == 0) {
                if (now_us() > spin_until) {
                    pthread_mutex_lock(&pool->mutex);
                    __atomic_add_fetch(&pool->n_sleeping, 1, __ATOMIC_SEQ_CST);
                    while ((uint32_t)(LOAD(&pool->claim) >> 32) == seen && !LOAD(&pool->stop))
                        pthread_cond_wait(&pool->wake, &pool->mutex);
                    __atomic_sub_fetch(&pool->n_sleeping, 1, __ATOMIC_SEQ_CST);
                    pthread_mutex_unlock(&pool->mutex);
                    spin_until = now_us() + POOL_SPIN_US;
                } else {
                    sched_yield();   /* nobody else wants this core: returns at once */
                }
            }
            word = LOAD(&pool->claim);
        }
        if (LOAD(&pool->stop)) return NULL;
        seen = (uint32_t)(word >> 32);
        pool_work(pool, seen);
    }
}

static void pool_stop_workers(glm53_pool *pool, int32_t n_started) {
    pthread_mutex_lock(&pool->mutex);
    STORE(&pool->stop, true);
    pthread_cond_broadcast(&pool->wake);
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
    pthread_cond_init(&pool->wake, NULL);
    for (int32_t i = 0; i < n_threads - 1; i++) {
        pool->workers[i].pool = pool;
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
    pthread_cond_destroy(&pool->wake);
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
    int64_t n_chunks = (int64_t)pool->n_threads * POOL_CHUNKS_PER_THREAD;
    if (n_chunks > n_items) n_chunks = n_items;

    uint32_t gen = (uint32_t)(LOAD(&pool->claim) >> 32) + 1;
    STORE(&pool->claim, (uint64_t)gen << 32 | POOL_CLOSED);   /* no claim succeeds while the arguments change */
    STORE_RELAXED(&pool->fn, fn);
    STORE_RELAXED(&pool->ctx, ctx);
    STORE_RELAXED(&pool->n_items, n_items);
    STORE_RELAXED(&pool->n_chunks, n_chunks);
    STORE(&pool->done, 0);
    STORE(&pool->claim, (uint64_t)gen << 32);   /* publishes the run: chunk 0 is next */
    if (LOAD(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mutex);
    }

    pool_work(pool, gen);
    /* Chunks claimed by workers and still running: wait for them (yielding, in case one waits for this core). */
    for (int i = 1; LOAD(&pool->done) < n_chunks; i++) {
        cpu_relax();
        if (i % 64 == 0) sched_yield();
    }
}
