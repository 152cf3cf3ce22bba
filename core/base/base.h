/*
 * internal.h - declarations shared by the core and the kernels, never installed.
 *
 * Error reporting: every failing path calls GLM53_FAIL(status, fmt, ...), which records
 * "file.c:line: message" in the calling thread's error slot and returns the status, so the idiom is
 *     if (bad) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: header length %llu past end of file", path, n);
 * GLM53_TRY(expr) propagates a failing status unchanged (the message stays the innermost one).
 *
 * Number formats: bf16/f16/fp8 <-> f32 conversions used everywhere on the host side.
 */
#ifndef GLM53_INTERNAL_H
#define GLM53_INTERNAL_H

#include "core/glm53.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------------------
 * Errors
 */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
glm53_status glm53_set_error(glm53_status status, const char *file, int line, const char *fmt, ...);
void glm53_clear_error(void);

#define GLM53_FAIL(status, ...) glm53_set_error((status), __FILE__, __LINE__, __VA_ARGS__)
#define GLM53_TRY(expr)                                  \
    do {                                                 \
        glm53_status glm53_try_status_ = (expr);         \
        if (glm53_try_status_ != GLM53_OK)               \
            return glm53_try_status_;                    \
    } while (0)

/* ------------------------------------------------------------------------------------------------------------
 * Number formats
 */
static inline float glm53_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, as torch's .to(bfloat16); NaN stays NaN. */
static inline uint16_t glm53_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float glm53_round_bf16(float f) { return glm53_bf16_to_f32(glm53_f32_to_bf16(f)); }

float   glm53_f16_to_f32(uint16_t h);
/* OCP E4M3 (torch.float8_e4m3fn): bias 7, no infinities, S.1111.111 is NaN. Table-driven. */
float   glm53_fp8_e4m3_to_f32(uint8_t code);
/* Round to nearest even with saturation to +-448 (torch's float8_e4m3fn cast saturates only if asked; we
 * only use this to build test data, where inputs are in range). */
uint8_t glm53_f32_to_fp8_e4m3(float f);

/* Element (row, col) of a 2-D weight of any float dtype, dequantised. Slow path for tests and conversions. */
float   glm53_weight_at(const glm53_tensor *w, int64_t row, int64_t col);

/* Fills contiguous row-major strides for t->shape[0..ndim). */
void    glm53_tensor_set_contiguous(glm53_tensor *t);
bool    glm53_tensor_is_contiguous(const glm53_tensor *t);
size_t  glm53_tensor_nbytes(const glm53_tensor *t);
/* Rows of a contiguous tensor: the product of all dims but the last. */
int64_t glm53_tensor_rows(const glm53_tensor *t);
/* A view of rows [row0, row0 + n) of a contiguous tensor (first dim), sharing its data. */
glm53_tensor glm53_tensor_rows_view(const glm53_tensor *t, int64_t row0, int64_t n);
/* "[d0, d1, ...]" of a shape into buf (truncated to size), for error messages; returns buf. */
const char  *glm53_shape_string(int32_t ndim, const int64_t *shape, char *buf, size_t size);
/* The same data as a contiguous tensor of another shape [d0, d1, d2] (first ndim dims; same element count). */
glm53_tensor glm53_tensor_reshape(const glm53_tensor *t, int ndim, int64_t d0, int64_t d1, int64_t d2);

#ifdef __cplusplus
}
#endif

#endif /* GLM53_INTERNAL_H */
