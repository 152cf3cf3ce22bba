/*
 * arena.c - scratch tensors of one step (arena.h).
 */
#include "core/engine/arena.h"

#include <stdlib.h>

glm53_tensor *glm53_arena_new(glm53_arena *a, glm53_status *status, int dtype, int ndim, int64_t d0, int64_t d1,
                              int64_t d2) {
    if (*status != GLM53_OK) return NULL;
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        glm53_tensor **grown = realloc(a->items, (size_t)cap * sizeof *grown);
        if (!grown) {
            *status = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for step scratch");
            return NULL;
        }
        a->items = grown;
        a->cap = cap;
    }
    glm53_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        *status = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for step scratch");
        return NULL;
    }
    *t = (glm53_tensor){.dtype = dtype, .device = a->be->device, .ndim = ndim, .shape = {d0, d1, d2}};
    *status = a->be->alloc(a->be, t);
    if (*status != GLM53_OK) {
        free(t);
        return NULL;
    }
    a->items[a->n++] = t;
    return t;
}

void glm53_arena_reset(glm53_arena *a, int64_t mark) {
    while (a->n > mark) {
        glm53_tensor *t = a->items[--a->n];
        a->be->release(a->be, t);
        free(t);
    }
}

void glm53_arena_free(glm53_arena *a) {
    glm53_arena_reset(a, 0);
    free(a->items);
    a->items = NULL;
    a->cap = 0;
}
