/*
 * plan.c - the step plan: scratch tensors, metadata staging and upload (plan.h).
 */
#include "core/engine/plan.h"

#include <assert.h>
#include <stdlib.h>

glm53_status glm53_plan_init(glm53_step_plan *p, glm53_backend *be) {
    *p = (glm53_step_plan){.be = be};
    return glm53_workspace_init(&p->ws, be, 0);
}

static void host_free(glm53_backend *be, void *ptr) {
    if (!ptr) return;
    if (be->ops->host_free) be->ops->host_free(be, ptr);
    else free(ptr);
}

void glm53_plan_free(glm53_step_plan *p) {
    if (!p->be) return;
    glm53_workspace_free(&p->ws);
    for (int64_t i = 0; i < p->n_chunks; i++) free(p->chunks[i]);
    free(p->chunks);
    host_free(p->be, p->staging);
    free(p->slices);
    free(p->kda_seqs);
    free(p->seq_starts);
    *p = (glm53_step_plan){0};
}

uint64_t glm53_plan_generation(const glm53_step_plan *p) { return p->ws.generation * 1000003u + p->staging_generation; }

glm53_status glm53_plan_begin(glm53_step_plan *p, size_t meta_bytes) {
    p->n_headers = 0;
    GLM53_TRY(glm53_workspace_begin(&p->ws));
    p->meta = NULL;
    p->staging_used = 0;
    if (meta_bytes > p->staging_cap) {
        /* Moving the staging buffer waits for the device (cudaFreeHost): only ever between steps. */
        size_t cap = meta_bytes + meta_bytes / 4 + 256;
        host_free(p->be, p->staging);
        p->staging = NULL;
        p->staging_cap = 0;
        void *mem = NULL;
        if (p->be->ops->host_alloc) GLM53_TRY(p->be->ops->host_alloc(p->be, cap, &mem));
        else if (!(mem = malloc(cap))) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "plan: no memory for %zu bytes of step metadata", cap);
        p->staging = mem;
        p->staging_cap = cap;
        p->staging_generation++;
    }
    glm53_status st = GLM53_OK;
    int64_t words = (int64_t)(meta_bytes / 4);
    p->meta = glm53_plan_tensor(p, &st, GLM53_I32, 1, words > 0 ? words : 1, 0, 0);
    return st;
}

void *glm53_plan_stage(glm53_step_plan *p, int64_t n, size_t *offset) {
    size_t bytes = (size_t)n * 4;
    assert(p->staging_used + bytes <= p->staging_cap && "plan: metadata larger than glm53_plan_begin was told");
    *offset = p->staging_used;
    p->staging_used += bytes;
    return p->staging + *offset;
}

glm53_status glm53_plan_upload(glm53_step_plan *p) {
    if (p->staging_used == 0) return GLM53_OK;
    glm53_tensor used = glm53_tensor_rows_view(p->meta, 0, (int64_t)(p->staging_used / 4));
    if (p->be->ops->upload_async) return p->be->ops->upload_async(p->be, &used, p->staging);
    return p->be->ops->upload(p->be, &used, p->staging);
}

/* A header from the chunks (never moves once handed out). */
static glm53_tensor *new_header(glm53_step_plan *p, glm53_status *st) {
    int64_t chunk = p->n_headers / GLM53_PLAN_CHUNK;
    if (chunk == p->n_chunks) {
        if (p->n_chunks == p->cap_chunks) {
            int64_t cap = p->cap_chunks ? 2 * p->cap_chunks : 8;
            glm53_tensor **grown = realloc(p->chunks, (size_t)cap * sizeof *grown);
            if (!grown) {
                *st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "plan: no memory for tensor headers");
                return NULL;
            }
            p->chunks = grown;
            p->cap_chunks = cap;
        }
        p->chunks[p->n_chunks] = malloc(GLM53_PLAN_CHUNK * sizeof(glm53_tensor));
        if (!p->chunks[p->n_chunks]) {
            *st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "plan: no memory for tensor headers");
            return NULL;
        }
        p->n_chunks++;
    }
    return &p->chunks[chunk][p->n_headers++ % GLM53_PLAN_CHUNK];
}

glm53_tensor *glm53_plan_meta_view(glm53_step_plan *p, glm53_status *st, int32_t dtype, size_t offset, int64_t d0,
                                   int64_t d1) {
    if (*st != GLM53_OK) return NULL;
    glm53_tensor *t = new_header(p, st);
    if (!t) return NULL;
    *t = (glm53_tensor){.dtype = dtype, .device = p->be->device, .ndim = d1 > 0 ? 2 : 1,
                        .shape = {d1 > 0 ? d0 / d1 : d0, d1}, .data = (char *)p->meta->data + offset};
    glm53_tensor_set_contiguous(t);
    return t;
}

glm53_tensor *glm53_plan_tensor(glm53_step_plan *p, glm53_status *st, int32_t dtype, int ndim, int64_t d0, int64_t d1,
                                int64_t d2) {
    if (*st != GLM53_OK) return NULL;
    glm53_tensor *t = new_header(p, st);
    if (!t) return NULL;
    *t = (glm53_tensor){.dtype = dtype, .device = p->be->device, .ndim = ndim, .shape = {d0, d1, d2}};
    glm53_tensor_set_contiguous(t);
    void *data = NULL;
    *st = glm53_workspace_take(&p->ws, glm53_tensor_nbytes(t), &data, "a step tensor");
    if (*st != GLM53_OK) {
        p->n_headers--;
        return NULL;
    }
    t->data = data;
    return t;
}

glm53_plan_mark glm53_plan_mark_get(const glm53_step_plan *p) {
    return (glm53_plan_mark){p->n_headers, glm53_workspace_mark(&p->ws)};
}

void glm53_plan_reset(glm53_step_plan *p, glm53_plan_mark mark) {
    p->n_headers = mark.n_headers;
    glm53_workspace_reset(&p->ws, mark.offset);
}
