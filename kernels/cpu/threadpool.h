/*
 * threadpool.h - a small persistent pthread pool for the CPU backend.
 *
 * One parallel-for primitive: glm53_pool_run cuts the items [0, n) into contiguous chunks (a few per thread)
 * which the caller and the awake workers claim until none is left, and returns when every chunk is done. A run
 * never waits for a worker that has not started: the caller takes what nobody claimed. Between runs a worker
 * spins briefly for the next one, then sleeps on a condition variable, so back-to-back small ops do not pay a
 * wake-up each and an idle pool costs nothing. A pool serves one caller at a time; ops run one after another on
 * the thread that drives the model step. Not reentrant: fn must not run the same pool.
 */
#ifndef GLM53_CPU_THREADPOOL_H
#define GLM53_CPU_THREADPOOL_H

#include "core/base/base.h"

typedef struct glm53_pool glm53_pool;

/* Work on items [begin, end); called once per participating thread with disjoint ranges. */
typedef void (*glm53_pool_fn)(void *ctx, int64_t begin, int64_t end);

/* n_threads counts the caller: 1 starts no worker. 0 = glm53_physical_cores() (kernels/backend.h). */
glm53_status glm53_pool_create(int32_t n_threads, glm53_pool **out);
void         glm53_pool_free(glm53_pool *pool);
int32_t      glm53_pool_n_threads(const glm53_pool *pool);
/* Runs fn over [0, n_items) and waits: fn is called with disjoint contiguous ranges that cover [0, n_items), on
 * any of the threads. With one item, or a one-thread pool, fn runs inline on the caller. */
void         glm53_pool_run(glm53_pool *pool, int64_t n_items, glm53_pool_fn fn, void *ctx);

#endif /* GLM53_CPU_THREADPOOL_H */
