/*
 * weights.h - the one loader of model weights, for the text model and the vision tower alike: finding a
 * checkpoint tensor with its shape checked against the config, placing it (or a rank's slice of it) on a rank's
 * backend, and owning whatever device memory that took.
 *
 * Placement by shard spec. A weight is placed whole, or as the slice of rows (dim 0) or of columns (dim 1)
 * that rank r of n gets: [size * r / n, size * (r + 1) / n), the size a multiple of n. FP8 weights carry their
 * 128x128 scale blocks along when the slice starts on a block boundary: each rank's scale is the matching slice
 * of the scale tensor and element (i, j) of the slice is still e4m3(code) * scale[i / 128, j / 128] in its own
 * coordinates. A slice that starts inside a block (small models, or a split finer than the blocks) is
 * dequantized to F32 first: the same values (e4m3(code) * scale, one F32 product, as every backend decodes
 * them), in a layout any backend reads. On the CPU backend a whole weight or a row slice is a view into the
 * mmapped checkpoint (nothing is copied); a column slice is copied. On a device every placement is a copy of
 * exactly the bytes placed, so each rank holds only its slices (docs/multi-gpu.md).
 */
#ifndef GLM53_ENGINE_WEIGHTS_H
#define GLM53_ENGINE_WEIGHTS_H

#include "core/engine/model.h"

typedef struct glm53_shard {
    int32_t dim;        /* -1: the whole tensor; 0: a slice of rows; 1: a slice of columns */
    int32_t rank, n_ranks;
} glm53_shard;

#define GLM53_SHARD_WHOLE ((glm53_shard){-1, 0, 1})
/* Rank rk's slice along `dim` among the tp ranks of its ep_rank (whole with tp = 1). */
#define GLM53_SHARD_TP(rk, dim) ((glm53_shard){(dim), (rk)->tp_rank, (rk)->model->tp})

/* The checkpoint tensor `name`: its shape must be dims[0..ndim) (-1: any) and its dtype a float one; `implied_by`
 * names what sets the expected shape in the error ("the config", "the vision config"). */
glm53_status glm53_weight_find(glm53_model *m, const char *name, int ndim, const int64_t *dims, const char *implied_by,
                               const glm53_tensor **out);
/* `src` (a checkpoint tensor in host memory, any shape) or its shard, made usable by rank rk's backend. */
glm53_status glm53_weight_place(glm53_rank *rk, const glm53_tensor *src, glm53_shard shard, glm53_tensor *out);
/* find + place, the name printf-formatted after `prefix`. */
glm53_status glm53_weight_load(glm53_rank *rk, const char *prefix, glm53_tensor *out, glm53_shard shard, int ndim,
                               const int64_t *dims, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;
/* A new backend tensor of `dtype` and shape [d0] (d1 = 0) or [d0, d1], filled from host memory and owned by the
 * rank: weights the loader rearranges or converts first. */
glm53_status glm53_weight_upload(glm53_rank *rk, int32_t dtype, int64_t d0, int64_t d1, const void *host,
                                 const char *name, glm53_tensor *out);
/* Releases every tensor the loader allocated for the rank. */
void         glm53_weights_free(glm53_rank *rk);

/* Shorthands for the block loaders, names after the loader's prefix (a local `const char *prefix`) and the rank
 * `rk` in scope: LOAD2(&dst, rows, cols, "layers.%d.x.weight", layer) places the whole weight; the _TP forms
 * place rk's slice of rows (LOAD1_TP, LOAD2_TP_ROWS) or columns (LOAD2_TP_COLS) among the tp ranks. */
#define GLM53_DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define LOAD1(dst, a, ...) \
    GLM53_TRY(glm53_weight_load(rk, prefix, (dst), GLM53_SHARD_WHOLE, 1, GLM53_DIMS(a), __VA_ARGS__))
#define LOAD2(dst, a, b, ...) \
    GLM53_TRY(glm53_weight_load(rk, prefix, (dst), GLM53_SHARD_WHOLE, 2, GLM53_DIMS(a, b), __VA_ARGS__))
#define LOAD1_TP(dst, a, ...) \
    GLM53_TRY(glm53_weight_load(rk, prefix, (dst), GLM53_SHARD_TP(rk, 0), 1, GLM53_DIMS(a), __VA_ARGS__))
#define LOAD2_TP_ROWS(dst, a, b, ...) \
    GLM53_TRY(glm53_weight_load(rk, prefix, (dst), GLM53_SHARD_TP(rk, 0), 2, GLM53_DIMS(a, b), __VA_ARGS__))
#define LOAD2_TP_COLS(dst, a, b, ...) \
    GLM53_TRY(glm53_weight_load(rk, prefix, (dst), GLM53_SHARD_TP(rk, 1), 2, GLM53_DIMS(a, b), __VA_ARGS__))

#endif /* GLM53_ENGINE_WEIGHTS_H */
