/*
 * ops_norm.c - row-wise normalisations: rmsnorm, layernorm, l2norm, softmax.
 *
 * Every op works on the rows of a contiguous F32 tensor independently, so rows are split over the pool when
 * there are enough of them. Row statistics are accumulated in 8 F32 lanes (cpu_dot / cpu_sum), which also keeps
 * the rounding error of a long sum small. Each op reads a whole row before it writes it, so y == x is allowed.
 * Norm weights and biases may be F32, BF16 or F16; non-F32 ones are converted once per call.
 */
#include "kernels/cpu/cpu_ops.h"

#include <stdlib.h>

typedef struct norm_job {
    float       *y;        /* [M, D] */
    const float *x;        /* [M, D] */
    const float *weight;   /* [D] or NULL */
    const float *bias;     /* [D] or NULL */
    int64_t      d;
    float        eps, scale;
} norm_job;

static void rmsnorm_rows(void *ctx, int64_t begin, int64_t end) {
    const norm_job *job = ctx;
    const int64_t D = job->d;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * D;
        float *y = job->y + r * D;
        float inv_rms = 1.0f / sqrtf(cpu_dot(x, x, D) / (float)D + job->eps);
        if (job->weight)
            for (int64_t i = 0; i < D; i++) y[i] = x[i] * inv_rms * job->weight[i];
        else
            for (int64_t i = 0; i < D; i++) y[i] = x[i] * inv_rms;
    }
}

/* Two passes (mean, then squared deviations): a one-pass E[x^2] - E[x]^2 cancels badly for rows with a large
 * mean. */
static void layernorm_rows(void *ctx, int64_t begin, int64_t end) {
    const norm_job *job = ctx;
    const int64_t D = job->d;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * D;
        float *y = job->y + r * D;
        float mean = cpu_sum(x, D) / (float)D;
        v8f acc = v8f_splat(0.0f), mean_v = v8f_splat(mean);
        int64_t i = 0;
        for (; i + 8 <= D; i += 8) {
            v8f dev = v8f_load(x + i) - mean_v;
            acc += dev * dev;
        }
        float sq = v8f_sum(&acc);
        for (; i < D; i++) sq += (x[i] - mean) * (x[i] - mean);
        float inv_std = 1.0f / sqrtf(sq / (float)D + job->eps);
        for (i = 0; i < D; i++) {
            float v = (x[i] - mean) * inv_std;
            if (job->weight) v *= job->weight[i];
            if (job->bias) v += job->bias[i];
            y[i] = v;
        }
    }
}

static void l2norm_rows(void *ctx, int64_t begin, int64_t end) {
    const norm_job *job = ctx;
    const int64_t D = job->d;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * D;
        float *y = job->y + r * D;
        float inv_norm = 1.0f / sqrtf(cpu_dot(x, x, D) + job->eps);
        for (int64_t i = 0; i < D; i++) y[i] = x[i] * inv_norm * job->scale;
    }
}

static void softmax_rows(void *ctx, int64_t begin, int64_t end) {
    const norm_job *job = ctx;
    const int64_t D = job->d;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * D;
        float *y = job->y + r * D;
        float max = -INFINITY;
        for (int64_t i = 0; i < D; i++) max = fmaxf(max, x[i]);
        for (int64_t i = 0; i < D; i++) y[i] = expf(x[i] - max);
        float inv_sum = 1.0f / cpu_sum(y, D);
        for (int64_t i = 0; i < D; i++) y[i] *= inv_sum;
    }
}

/* Runs one of the row kernels over x[M,D] -> y[M,D] with optional F32 copies of w and b. */
static glm53_status norm_run(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                             const glm53_tensor *b, float eps, float scale, glm53_pool_fn rows_fn,
                             int64_t flops_per_element) {
    assert(cpu_is_f32(x) && cpu_is_f32(y));
    int64_t M = glm53_tensor_rows(x), D = cpu_cols(x);
    assert(glm53_tensor_rows(y) == M && cpu_cols(y) == D);
    assert(!w || glm53_tensor_numel(w) == D);
    assert(!b || glm53_tensor_numel(b) == D);

    glm53_status st = GLM53_OK;
    bool w_owned = false, b_owned = false;
    const float *weight = w ? cpu_param_f32(w, &w_owned, &st) : NULL;
    const float *bias = (st == GLM53_OK && b) ? cpu_param_f32(b, &b_owned, &st) : NULL;
    if (st == GLM53_OK) {
        norm_job job = {.y = y->data, .x = x->data, .weight = weight, .bias = bias, .d = D, .eps = eps,
                        .scale = scale};
        cpu_parallel_for(be, M, flops_per_element * D, rows_fn, &job);
    }
    if (w_owned) free((void *)weight);
    if (b_owned) free((void *)bias);
    return st;
}

/* y[M,D] = x / sqrt(mean(x^2) + eps) * w; w[D] or NULL. */
glm53_status cpu_rmsnorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                         float eps) {
    return norm_run(be, y, x, w, NULL, eps, 1.0f, rmsnorm_rows, 4);
}

/* y[M,D] = (x - mean) / sqrt(var + eps) * w + b, biased var; w[D], b[D] or NULL. */
glm53_status cpu_layernorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                           const glm53_tensor *b, float eps) {
    return norm_run(be, y, x, w, b, eps, 1.0f, layernorm_rows, 6);
}

/* y[M,D] = x / sqrt(sum(x^2) + eps) * scale. */
glm53_status cpu_l2norm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float eps, float scale) {
    return norm_run(be, y, x, NULL, NULL, eps, scale, l2norm_rows, 4);
}

/* y[M,N] = softmax(x) per row, max-subtracted. */
glm53_status cpu_softmax(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x) {
    return norm_run(be, y, x, NULL, NULL, 0.0f, 1.0f, softmax_rows, 20);
}

glm53_status cpu_rmsnorm_gated(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *gate,
                               const glm53_tensor *w, float eps) {
    int64_t M = glm53_tensor_rows(x), d = cpu_cols(x);
    assert(cpu_is_f32(y) && cpu_is_f32(x) && cpu_is_f32(gate) && glm53_tensor_numel(w) == d);
    param_f32 wp = {0};
    GLM53_TRY(param_get(w, &wp));
    const float *xv = x->data, *gv = gate->data;
    float *yv = y->data;
    for (int64_t m = 0; m < M; m++) {
        double sumsq = 0.0;
        for (int64_t i = 0; i < d; i++) sumsq += (double)xv[m * d + i] * xv[m * d + i];
        float r = 1.0f / sqrtf((float)(sumsq / (double)d) + eps);
        for (int64_t i = 0; i < d; i++)
            yv[m * d + i] = wp.v[i] * (xv[m * d + i] * r) * cpu_sigmoid(gv[m * d + i]);
    }
    param_release(&wp);
    return GLM53_OK;
}

