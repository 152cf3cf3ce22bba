/*
 * bench_matmul.c - throughput of the CPU backend's matmul, decode (M = 1) and a small prefill, over weight
 * dtypes and thread counts. Not part of ctest. Prints the fastest call's time, GFLOP/s, and the weight bytes read
 * per second (decode is bound by the latter).
 *
 * Build and run from the repository root (compiles the backend sources directly, since libglm53 hides them):
 *     cc -std=gnu11 -O2 -march=x86-64-v2 -Icore -Ikernels kernels/cpu/bench/bench_matmul.c kernels/cpu/[a-z]*.c \
 *        core/tensor.c core/error.c -lpthread -lm -o /tmp/bench_matmul && /tmp/bench_matmul [K N]
 */
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A [rows, cols] weight with pseudo-random contents (FP8 with a 128 x 128 block scale in *scale). */
static glm53_tensor make_weight(glm53_dtype dtype, int64_t rows, int64_t cols, glm53_tensor *scale) {
    glm53_tensor w = {.dtype = dtype, .ndim = 2, .shape = {rows, cols}};
    glm53_tensor_set_contiguous(&w);
    size_t nbytes = glm53_tensor_nbytes(&w);
    w.data = malloc(nbytes);
    uint8_t *bytes = w.data;
    uint32_t state = 12345;
    for (size_t i = 0; i < nbytes; i++) {
        state = state * 1664525u + 1013904223u;
        bytes[i] = (uint8_t)(state >> 24);
    }
    if (dtype == GLM53_BF16) /* keep BF16 exponents tame: random high bytes would be inf/NaN-heavy */
        for (int64_t i = 0; i < rows * cols; i++) ((uint16_t *)w.data)[i] = (uint16_t)(0x3c00 | (i & 0x7f));
    if (dtype == GLM53_F8_E4M3) {
        for (int64_t i = 0; i < rows * cols; i++)
            if ((bytes[i] & 0x7f) == 0x7f) bytes[i] = 0x7e;
        *scale = (glm53_tensor){.dtype = GLM53_F32, .ndim = 2, .shape = {(rows + 127) / 128, (cols + 127) / 128}};
        glm53_tensor_set_contiguous(scale);
        scale->data = malloc(glm53_tensor_nbytes(scale));
        for (int64_t i = 0; i < glm53_tensor_numel(scale); i++) ((float *)scale->data)[i] = 1e-3f;
        w.scale = scale;
        w.block_rows = w.block_cols = 128;
    }
    return w;
}

int main(int argc, char **argv) {
    int64_t K = argc > 2 ? atoll(argv[1]) : 4096, N = argc > 2 ? atoll(argv[2]) : 4096;
    static const glm53_dtype dtypes[] = {GLM53_F32, GLM53_BF16, GLM53_F8_E4M3};
    static const int64_t rows[] = {1, 64};
    printf("matmul y[M,%lld] = x[M,%lld] w^T\n", (long long)N, (long long)K);
    printf("%-8s %-4s %-7s %-6s %10s %10s %10s\n", "dtype", "M", "threads", "build", "best ms", "GFLOP/s", "w GB/s");
    for (int32_t threads = 1; threads <= 2; threads++) {
        glm53_backend *be;
        if (glm53_backend_cpu_create(threads, &be) != GLM53_OK) {
            fprintf(stderr, "%s\n", glm53_last_error());
            return 1;
        }
        bool have_avx2 = cpu_impl(be)->use_avx2;
        for (int variant = 0; variant < (have_avx2 ? 2 : 1); variant++) {
            cpu_impl(be)->use_avx2 = have_avx2 && variant == 0;
            for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
                for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                    int64_t M = rows[r];
                    glm53_tensor scale = {0};
                    glm53_tensor w = make_weight(dtypes[d], N, K, &scale);
                    glm53_tensor x = {.dtype = GLM53_F32, .ndim = 2, .shape = {M, K}};
                    glm53_tensor y = {.dtype = GLM53_F32, .ndim = 2, .shape = {M, N}};
                    be->ops->alloc(be, &x);
                    be->ops->alloc(be, &y);
                    for (int64_t i = 0; i < M * K; i++) ((float *)x.data)[i] = (float)(i % 7) * 0.25f - 0.75f;
                    be->ops->matmul(be, &y, &x, &w);   /* warm-up: page in the weight */
                    /* the fastest of many calls: the machine may be shared, and noise only ever adds time */
                    double per = INFINITY, start = now_s();
                    while (now_s() - start < 1.0) {
                        double t0 = now_s();
                        be->ops->matmul(be, &y, &x, &w);
                        double t = now_s() - t0;
                        if (t < per) per = t;
                    }
                    printf("%-8s %-4lld %-7d %-6s %10.3f %10.2f %10.2f\n", glm53_dtype_name(dtypes[d]), (long long)M,
                           threads, cpu_impl(be)->use_avx2 ? "avx2" : "base", per * 1e3, 2.0 * M * N * K / per * 1e-9,
                           (double)glm53_tensor_nbytes(&w) / per * 1e-9);
                    be->ops->release(be, &x);
                    be->ops->release(be, &y);
                    free(w.data);
                    free(scale.data);
                }
        }
        be->ops->destroy(be);
    }
    return 0;
}
