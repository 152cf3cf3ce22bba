/*
 * weights.c - finding, checking, placing (whole or by shard) and owning model weights (weights.h).
 */
#include "core/engine/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * Ownership
 */
/* A new tensor header the rank owns, for a backend allocation (released with the model). */
static glm53_status own_new(glm53_rank *rk, glm53_tensor **out) {
    *out = NULL;
    if (rk->n_owned == rk->cap_owned) {
        int64_t cap = rk->cap_owned ? 2 * rk->cap_owned : 256;
        glm53_tensor **grown = realloc(rk->owned, (size_t)cap * sizeof *grown);
        if (!grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the weight table");
        rk->owned = grown;
        rk->cap_owned = cap;
    }
    glm53_tensor *t = calloc(1, sizeof *t);
    if (!t) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a weight header");
    rk->owned[rk->n_owned++] = t;
    *out = t;
    return GLM53_OK;
}

void glm53_weights_free(glm53_rank *rk) {
    for (int64_t i = 0; i < rk->n_owned; i++) {
        if (rk->owned[i]->data) rk->be->ops->release(rk->be, rk->owned[i]);
        free(rk->owned[i]);
    }
    free(rk->owned);
    rk->owned = NULL;
    rk->n_owned = rk->cap_owned = 0;
}

/* An owned backend tensor shaped like `shape_of` (dtype, ndim, shape), filled from contiguous host bytes. */
static glm53_status upload_owned(glm53_rank *rk, const glm53_tensor *shape_of, const void *host, glm53_tensor **out) {
    glm53_tensor *t;
    GLM53_TRY(own_new(rk, &t));
    *t = (glm53_tensor){.dtype = shape_of->dtype, .device = rk->be->device, .ndim = shape_of->ndim,
                        .block_rows = shape_of->block_rows, .block_cols = shape_of->block_cols,
                        .name = shape_of->name};
    memcpy(t->shape, shape_of->shape, sizeof t->shape);
    GLM53_TRY(rk->be->ops->alloc(rk->be, t));
    GLM53_TRY(rk->be->ops->upload(rk->be, t, host));
    *out = t;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Finding
 */
glm53_status glm53_weight_find(glm53_model *m, const char *name, int ndim, const int64_t *dims, const char *implied_by,
                               const glm53_tensor **out) {
    GLM53_TRY(glm53_checkpoint_find(m->ckpt, name, out));
    const glm53_tensor *t = *out;
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = dims[i] < 0 || t->shape[i] == dims[i];
    if (!ok) {
        char got[96], want[96];
        return GLM53_FAIL(GLM53_ERR_FORMAT, "tensor '%s' has shape %s, %s implies %s", name,
                          glm53_shape_string(t->ndim, t->shape, got, sizeof got), implied_by,
                          glm53_shape_string(ndim, dims, want, sizeof want));
    }
    if (t->dtype != GLM53_F32 && t->dtype != GLM53_BF16 && t->dtype != GLM53_F16 && t->dtype != GLM53_F8_E4M3)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "tensor '%s' has dtype %s, expected a float weight", name,
                          glm53_dtype_name((glm53_dtype)t->dtype));
    return GLM53_OK;
}

glm53_status glm53_weight_load(glm53_rank *rk, const char *prefix, glm53_tensor *out, glm53_shard shard, int ndim,
                               const int64_t *dims, const char *fmt, ...) {
    char name[256];
    int n = snprintf(name, sizeof name, "%s", prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + n, sizeof name - (size_t)n, fmt, ap);
    va_end(ap);
    const glm53_tensor *t;
    GLM53_TRY(glm53_weight_find(rk->model, name, ndim, dims, "the config", &t));
    return glm53_weight_place(rk, t, shard, out);
}

/* ------------------------------------------------------------------------------------------------------------
 * Placing
 */
/* The slice [begin, end) of dimension `dim` (0 or 1) of a 1-D or 2-D host tensor: a view when it is contiguous
 * (dim 0, or the whole), else a malloc'd copy in *copy (the caller frees it). */
static glm53_status host_slice(const glm53_tensor *t, int dim, int64_t begin, int64_t end, glm53_tensor *out,
                               void **copy) {
    *copy = NULL;
    *out = *t;
    if (dim < 0) return GLM53_OK;
    size_t es = glm53_dtype_size((glm53_dtype)t->dtype);
    if (dim == 0) {
        *out = glm53_tensor_rows_view(t, begin, end - begin);
        return GLM53_OK;
    }
    int64_t rows = t->shape[0], cols = t->shape[1], width = end - begin;
    char *buf = malloc((size_t)(rows * width) * es);
    if (!buf) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory to slice columns of %s", t->name ? t->name : "a weight");
    for (int64_t r = 0; r < rows; r++)
        memcpy(buf + (size_t)(r * width) * es, (const char *)t->data + (size_t)(r * cols + begin) * es, (size_t)width * es);
    out->shape[1] = width;
    glm53_tensor_set_contiguous(out);
    out->data = buf;
    *copy = buf;
    return GLM53_OK;
}

/* An FP8 weight decoded to F32 in host memory (the values every backend computes with: e4m3(code) * scale). */
static glm53_status dequantize(const glm53_tensor *src, glm53_tensor *out, float **copy) {
    int64_t n = glm53_tensor_numel(src);
    *copy = malloc((size_t)n * sizeof(float));
    if (!*copy) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory to dequantize %s", src->name ? src->name : "a weight");
    glm53_status st = glm53_tensor_to_f32(src, *copy, n);
    if (st != GLM53_OK) return st;
    *out = (glm53_tensor){.dtype = GLM53_F32, .device = GLM53_DEVICE_CPU, .ndim = src->ndim, .name = src->name,
                          .data = *copy};
    memcpy(out->shape, src->shape, sizeof out->shape);
    glm53_tensor_set_contiguous(out);
    return GLM53_OK;
}

glm53_status glm53_weight_place(glm53_rank *rk, const glm53_tensor *src, glm53_shard shard, glm53_tensor *out) {
    const char *name = src->name ? src->name : "(unnamed)";
    int dim = shard.dim;
    int64_t begin = 0, end = 0;
    if (dim >= 0 && shard.n_ranks == 1) dim = -1;   /* the one slice is the whole */
    if (dim >= 0) {
        if (dim >= src->ndim || dim > 1 || shard.n_ranks < 1 || shard.rank < 0 || shard.rank >= shard.n_ranks)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "weight %s: shard of dim %d, rank %d of %d is not a slice of a "
                              "%d-D weight", name, dim, shard.rank, shard.n_ranks, src->ndim);
        int64_t size = src->shape[dim];
        if (size % shard.n_ranks)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "weight %s: dim %d of size %lld does not split into %d ranks",
                              name, dim, (long long)size, shard.n_ranks);
        begin = size / shard.n_ranks * shard.rank;
        end = begin + size / shard.n_ranks;
    }
    /* A slice starting inside an FP8 scale block: decoded to F32 first (see the top of weights.h). */
    glm53_tensor decoded;
    float *decoded_copy = NULL;
    if (dim >= 0 && src->scale && begin % (dim == 0 ? src->block_rows : src->block_cols)) {
        glm53_status st = dequantize(src, &decoded, &decoded_copy);
        if (st != GLM53_OK) {
            free(decoded_copy);
            return st;
        }
        src = &decoded;
    }
    glm53_tensor data_slice, scale_slice;
    void *data_copy = NULL, *scale_copy = NULL;
    glm53_status st = host_slice(src, dim, begin, end, &data_slice, &data_copy);
    if (st == GLM53_OK && src->scale) {
        int32_t block = dim == 0 ? src->block_rows : src->block_cols;
        st = host_slice(src->scale, dim, dim >= 0 ? begin / block : 0, dim >= 0 ? (end + block - 1) / block : 0,
                        &scale_slice, &scale_copy);
    }
    if (st == GLM53_OK) {
        int64_t bytes = (int64_t)glm53_tensor_nbytes(&data_slice) +
                        (src->scale ? (int64_t)glm53_tensor_nbytes(&scale_slice) : 0);
        rk->weight_bytes += bytes;
        rk->model->weight_bytes += bytes;
        /* On the CPU a whole weight is a view of the checkpoint, scale included; a row slice is a view whose
         * scale rows are copied (a slice needs a header of its own); a column slice or a decoded one is copied. */
        bool view = rk->be->device == GLM53_DEVICE_CPU && !data_copy && !decoded_copy;
        glm53_tensor *placed = NULL, *scale = NULL;
        if (src->scale && (rk->be->device != GLM53_DEVICE_CPU || dim >= 0))
            st = upload_owned(rk, &scale_slice, scale_slice.data, &scale);
        if (st == GLM53_OK && !view) st = upload_owned(rk, &data_slice, data_slice.data, &placed);
        if (st == GLM53_OK) {
            *out = view ? data_slice : *placed;
            out->scale = scale ? scale : src->scale;
        }
    }
    free(data_copy);
    free(scale_copy);
    free(decoded_copy);
    return st;
}

glm53_status glm53_weight_upload(glm53_rank *rk, int32_t dtype, int64_t d0, int64_t d1, const void *host,
                                 const char *name, glm53_tensor *out) {
    glm53_tensor shape = {.dtype = dtype, .ndim = d1 > 0 ? 2 : 1, .shape = {d0, d1 > 0 ? d1 : 0}, .name = name};
    glm53_tensor *t;
    GLM53_TRY(upload_owned(rk, &shape, host, &t));
    rk->weight_bytes += (int64_t)glm53_tensor_nbytes(t);
    rk->model->weight_bytes += (int64_t)glm53_tensor_nbytes(t);
    *out = *t;
    return GLM53_OK;
}
