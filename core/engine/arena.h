/*
 * arena.h - scratch tensors of one step (the model step, the vision encoder), released together.
 *
 * Every temporary of a step is allocated through glm53_arena_new and released by glm53_arena_reset: resetting
 * to a mark taken before a layer frees what the layer allocated, so a long prefill holds one layer's scratch at
 * a time. Allocation failure is recorded in *status and later calls become no-ops, so a chain of ops can be
 * written without a check after each line (see the NEW/OP macros where this is used).
 */
#ifndef GLM53_ARENA_H
#define GLM53_ARENA_H

#include "kernels/backend.h"

typedef struct glm53_arena {
    glm53_backend *be;
    glm53_tensor **items;
    int64_t        n, cap;
} glm53_arena;

/* A new contiguous tensor [d0, d1, d2] (first ndim dims) on the arena's backend, or NULL with *status set.
 * Does nothing and returns NULL when *status is already an error. */
glm53_tensor *glm53_arena_new(glm53_arena *a, glm53_status *status, int dtype, int ndim, int64_t d0, int64_t d1,
                              int64_t d2);
static inline int64_t glm53_arena_mark(const glm53_arena *a) { return a->n; }
/* Releases every tensor allocated after `mark`. */
void glm53_arena_reset(glm53_arena *a, int64_t mark);
/* Releases everything and the arena's own bookkeeping. */
void glm53_arena_free(glm53_arena *a);

#endif /* GLM53_ARENA_H */
