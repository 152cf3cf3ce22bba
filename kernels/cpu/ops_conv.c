/*
 * ops_conv.c - depthwise causal conv1d (the KDA short convolution over q, k, v).
 *
 * The caller keeps the last K-1 input rows of a sequence as history and stacks the T new rows under them, so
 * output row t sees input rows t .. t+K-1 and the op itself needs no padding or state. Work items are output
 * elements (t, c), so a decode step (T = 1) still spreads its channels over the threads.
 */
#include "cpu_ops.h"

#include <stdlib.h>

typedef struct conv_job {
    float       *y;   /* [T, C] */
    const float *x;   /* [T+K-1, C] */
    const float *w;   /* [C, K] */
    int64_t      c, k;
} conv_job;

static void conv_range(void *ctx, int64_t begin, int64_t end) {
    const conv_job *job = ctx;
    const int64_t C = job->c, K = job->k;
    for (int64_t item = begin; item < end; item++) {
        int64_t t = item / C, c = item % C;
        const float *w = job->w + c * K;
        const float *x = job->x + t * C + c;
        float acc = 0.0f;
        for (int64_t i = 0; i < K; i++) acc += w[i] * x[i * C];
        job->y[item] = acc;
    }
}

/* y[T,C][t][c] = sum_i w[c][i] * x[t+i][c]; x[T+K-1, C] F32, w[C,K] (or [C,1,K]) F32, BF16 or F16. */
glm53_status cpu_conv1d_causal(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w) {
    assert(cpu_is_f32(x) && cpu_is_f32(y));
    assert(w->data && glm53_tensor_is_contiguous(w));
    int64_t T = glm53_tensor_rows(y), C = cpu_cols(y), K = cpu_cols(w);
    assert(K >= 1 && glm53_tensor_rows(w) == C);
    assert(cpu_cols(x) == C && glm53_tensor_rows(x) == T + K - 1);

    glm53_status st;
    bool w_owned;
    const float *w32 = cpu_param_f32(w, &w_owned, &st);
    if (st != GLM53_OK) return st;
    conv_job job = {.y = y->data, .x = x->data, .w = w32, .c = C, .k = K};
    cpu_parallel_for(be, T * C, 2 * K, conv_range, &job);
    if (w_owned) free((void *)w32);
    return GLM53_OK;
}
