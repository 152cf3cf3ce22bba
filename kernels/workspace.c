/*
 * workspace.c - the step scratch memory of a backend instance (workspace.h), and the counters helper.
 */
#include "kernels/workspace.h"

#include <stdlib.h>

static size_t align_up(size_t n) { return (n + GLM53_WORKSPACE_ALIGN - 1) / GLM53_WORKSPACE_ALIGN * GLM53_WORKSPACE_ALIGN; }

/* A backend allocation of `bytes` (a multiple of 4) as an F32 vector. */
static glm53_status alloc_bytes(glm53_backend *be, glm53_tensor *t, size_t bytes) {
    *t = (glm53_tensor){.dtype = GLM53_F32, .device = be->device, .ndim = 1, .shape = {(int64_t)(bytes / 4)}};
    return be->ops->alloc(be, t);
}

glm53_status glm53_workspace_init(glm53_workspace *ws, glm53_backend *be, size_t bytes) {
    *ws = (glm53_workspace){.be = be};
    if (bytes == 0) return GLM53_OK;
    bytes = align_up(bytes);
    GLM53_TRY(alloc_bytes(be, &ws->block, bytes));
    ws->capacity = bytes;
    ws->generation = 1;
    return GLM53_OK;
}

void glm53_workspace_free(glm53_workspace *ws) {
    if (!ws->be) return;
    glm53_workspace_reset(ws, 0);
    if (ws->block.data) ws->be->ops->release(ws->be, &ws->block);
    free(ws->overflow);
    *ws = (glm53_workspace){0};
}

glm53_status glm53_workspace_begin(glm53_workspace *ws) {
    glm53_workspace_reset(ws, 0);
    if (!ws->grew) return GLM53_OK;
    if (ws->frozen) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "workspace: cannot grow while a step is captured");
    /* A quarter more than the largest step seen, so a slightly longer context does not overflow again. */
    size_t bytes = align_up(ws->high + ws->high / 4);
    if (ws->block.data) ws->be->ops->release(ws->be, &ws->block);
    ws->capacity = 0;
    ws->generation++;
    GLM53_TRY(alloc_bytes(ws->be, &ws->block, bytes));
    ws->capacity = bytes;
    ws->grew = false;
    return GLM53_OK;
}

glm53_status glm53_workspace_take(glm53_workspace *ws, size_t bytes, void **out, const char *what) {
    *out = NULL;
    size_t size = align_up(bytes ? bytes : 1), at = ws->offset;
    if (at + size <= ws->capacity) {
        *out = (char *)ws->block.data + at;
    } else {
        if (ws->frozen)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "workspace: %s needs %zu bytes past the reserved %zu while a "
                              "step is captured (run the step once uncaptured first)", what, size, ws->capacity);
        if (ws->n_overflow == ws->cap_overflow) {
            int32_t cap = ws->cap_overflow ? 2 * ws->cap_overflow : 16;
            glm53_workspace_overflow *grown = realloc(ws->overflow, (size_t)cap * sizeof *grown);
            if (!grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "workspace: no memory to record scratch for %s", what);
            ws->overflow = grown;
            ws->cap_overflow = cap;
        }
        glm53_workspace_overflow *o = &ws->overflow[ws->n_overflow];
        GLM53_TRY(alloc_bytes(ws->be, &o->mem, size));
        o->offset = at;
        ws->n_overflow++;
        ws->grew = true;
        *out = o->mem.data;
    }
    ws->offset = at + size;
    if (ws->offset > ws->high) ws->high = ws->offset;
    return GLM53_OK;
}

void glm53_workspace_reset(glm53_workspace *ws, size_t mark) {
    while (ws->n_overflow > 0 && ws->overflow[ws->n_overflow - 1].offset >= mark) {
        ws->be->ops->release(ws->be, &ws->overflow[ws->n_overflow - 1].mem);
        ws->n_overflow--;
    }
    if (mark < ws->offset) ws->offset = mark;
}

void glm53_backend_counters_get(glm53_backend *be, glm53_backend_counters *out) {
    *out = (glm53_backend_counters){0};
    if (be && be->ops->counters) be->ops->counters(be, out);
}
