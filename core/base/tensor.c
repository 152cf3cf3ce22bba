/*
 * tensor.c - dtype facts, number-format conversions and small tensor helpers on the host.
 *
 * FP8 here is OCP E4M3 as torch.float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits, subnormals,
 * no infinities, 0x7f and 0xff are NaN, largest finite 448. Decoding goes through a 256-entry table built once.
 */
#include "core/base/base.h"

#include <stdio.h>

#include <pthread.h>
#include <stdlib.h>

size_t glm53_dtype_size(glm53_dtype dtype) {
    switch (dtype) {
    case GLM53_F32: return 4;
    case GLM53_BF16: return 2;
    case GLM53_F16: return 2;
    case GLM53_F8_E4M3: return 1;
    case GLM53_I32: return 4;
    case GLM53_I64: return 8;
    case GLM53_F64: return 8;
    default: return 0;
    }
}

const char *glm53_dtype_name(glm53_dtype dtype) {
    switch (dtype) {
    case GLM53_F32: return "F32";
    case GLM53_BF16: return "BF16";
    case GLM53_F16: return "F16";
    case GLM53_F8_E4M3: return "F8_E4M3";
    case GLM53_I32: return "I32";
    case GLM53_I64: return "I64";
    case GLM53_F64: return "F64";
    default: return "?";
    }
}

int64_t glm53_tensor_numel(const glm53_tensor *t) {
    if (!t) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t glm53_tensor_nbytes(const glm53_tensor *t) {
    return (size_t)glm53_tensor_numel(t) * glm53_dtype_size((glm53_dtype)t->dtype);
}

int64_t glm53_tensor_rows(const glm53_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i + 1 < t->ndim; i++) n *= t->shape[i];
    return n;
}

void glm53_tensor_set_contiguous(glm53_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

bool glm53_tensor_is_contiguous(const glm53_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

glm53_tensor glm53_tensor_rows_view(const glm53_tensor *t, int64_t row0, int64_t n) {
    glm53_tensor v = *t;
    size_t row_bytes = glm53_tensor_nbytes(t) / (size_t)(t->shape[0] ? t->shape[0] : 1);
    v.shape[0] = n;
    v.data = (char *)t->data + (size_t)row0 * row_bytes;
    return v;
}

glm53_tensor glm53_tensor_reshape(const glm53_tensor *t, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    glm53_tensor v = *t;
    v.ndim = ndim;
    for (int i = 0; i < GLM53_MAX_DIMS; i++) v.shape[i] = 0;
    v.shape[0] = d0;
    v.shape[1] = d1;
    v.shape[2] = d2;
    glm53_tensor_set_contiguous(&v);
    return v;
}

/* ------------------------------------------------------------------------------------------------------------
 * Number formats
 */
float glm53_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {                       /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float fp8_table[256];
static pthread_once_t fp8_once = PTHREAD_ONCE_INIT;

static void fp8_table_build(void) {
    for (int c = 0; c < 256; c++) {
        int sign = c >> 7, exp = (c >> 3) & 0xf, man = c & 7;
        float v;
        if (exp == 0xf && man == 7) v = NAN;
        else if (exp == 0) v = ldexpf((float)man / 8.0f, -6);          /* subnormal: 2^-6 * m/8 */
        else v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
        fp8_table[c] = sign ? -v : v;
    }
}

float glm53_fp8_e4m3_to_f32(uint8_t code) {
    pthread_once(&fp8_once, fp8_table_build);
    return fp8_table[code];
}

uint8_t glm53_f32_to_fp8_e4m3(float f) {
    pthread_once(&fp8_once, fp8_table_build);
    if (isnan(f)) return 0x7f;
    uint8_t sign = f < 0 ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return sign | 0x7e;
    /* Nearest of the 127 non-negative finite codes; ties to the even code (even mantissa). */
    int best = 0;
    float best_err = a;
    for (int c = 1; c < 0x7f; c++) {
        float err = fabsf(fp8_table[c] - a);
        if (err < best_err || (err == best_err && (c & 1) == 0)) { best = c; best_err = err; }
    }
    return sign | (uint8_t)best;
}

float glm53_weight_at(const glm53_tensor *w, int64_t row, int64_t col) {
    int64_t i = row * w->stride[0] + col * w->stride[1];
    switch (w->dtype) {
    case GLM53_F32: return ((const float *)w->data)[i];
    case GLM53_BF16: return glm53_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case GLM53_F16: return glm53_f16_to_f32(((const uint16_t *)w->data)[i]);
    case GLM53_F64: return (float)((const double *)w->data)[i];
    case GLM53_F8_E4M3: {
        float v = glm53_fp8_e4m3_to_f32(((const uint8_t *)w->data)[i]);
        if (w->scale) {
            const glm53_tensor *s = w->scale;
            v *= ((const float *)s->data)[(row / w->block_rows) * s->stride[0] + (col / w->block_cols)];
        }
        return v;
    }
    default: return NAN;
    }
}

glm53_status glm53_tensor_to_f32(const glm53_tensor *t, float *dst, int64_t n) {
    if (!t || !dst) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "tensor_to_f32: NULL argument");
    int64_t numel = glm53_tensor_numel(t);
    if (n < 0 || n > numel)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "tensor_to_f32: %lld elements asked, tensor %s has %lld",
                          (long long)n, t->name ? t->name : "(unnamed)", (long long)numel);
    if (t->device != GLM53_DEVICE_CPU)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "tensor_to_f32: tensor %s is not on the CPU",
                          t->name ? t->name : "(unnamed)");
    if (t->dtype == GLM53_F8_E4M3 && t->ndim == 2 && t->scale) {
        for (int64_t i = 0; i < n; i++) dst[i] = glm53_weight_at(t, i / t->shape[1], i % t->shape[1]);
        return GLM53_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case GLM53_F32: dst[i] = ((const float *)t->data)[i]; break;
        case GLM53_BF16: dst[i] = glm53_bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        case GLM53_F16: dst[i] = glm53_f16_to_f32(((const uint16_t *)t->data)[i]); break;
        case GLM53_F8_E4M3: dst[i] = glm53_fp8_e4m3_to_f32(((const uint8_t *)t->data)[i]); break;
        case GLM53_I32: dst[i] = (float)((const int32_t *)t->data)[i]; break;
        case GLM53_I64: dst[i] = (float)((const int64_t *)t->data)[i]; break;
        case GLM53_F64: dst[i] = (float)((const double *)t->data)[i]; break;
        default: return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "tensor_to_f32: unknown dtype %d", t->dtype);
        }
    }
    return GLM53_OK;
}

int32_t glm53_argmax_f32(const float *x, int64_t n) {
    if (!x || n <= 0) return -1;
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i;
    return (int32_t)best;
}

const char *glm53_shape_string(int32_t ndim, const int64_t *shape, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}
