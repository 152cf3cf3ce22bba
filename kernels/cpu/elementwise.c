/*
 * ops_elementwise.c - unary activations, add/mul with row broadcast, axpby, clamped SwiGLU.
 *
 * All of them are independent per element, so y may be the same buffer as an input. Work is split over
 * contiguous element ranges (rows for binary, whose broadcast operand is indexed by column). NaN inputs give
 * NaN outputs everywhere, as in torch: the clamps and relu are written with comparisons that let NaN through
 * (fminf/fmaxf would replace it).
 */
#include "kernels/cpu/cpu_ops.h"

/* ------------------------------------------------------------------------------------------------------------
 * unary
 */
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* x / (1 + e^-x) rather than x * sigmoid(x): one rounding fewer, and -> -0 (not NaN) as x -> -inf. */
static inline float silu(float x) { return x / (1.0f + expf(-x)); }

typedef struct unary_job {
    float          *y;
    const float    *x;
    glm53_unary_op  op;
} unary_job;

static void unary_range(void *ctx, int64_t begin, int64_t end) {
    const unary_job *job = ctx;
    const float *x = job->x;
    float *y = job->y;
    switch (job->op) {
    case GLM53_UNARY_SIGMOID:
        for (int64_t i = begin; i < end; i++) y[i] = sigmoid(x[i]);
        break;
    case GLM53_UNARY_SILU:
        for (int64_t i = begin; i < end; i++) y[i] = silu(x[i]);
        break;
    case GLM53_UNARY_GELU:
        for (int64_t i = begin; i < end; i++) y[i] = 0.5f * x[i] * erfcf(x[i] * -0.70710678118654752f);
        break;
    case GLM53_UNARY_SOFTPLUS:   /* torch: beta 1, threshold 20, above which softplus(x) == x in F32 */
        for (int64_t i = begin; i < end; i++) y[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
        break;
    case GLM53_UNARY_EXP:
        for (int64_t i = begin; i < end; i++) y[i] = expf(x[i]);
        break;
    case GLM53_UNARY_RELU:
        for (int64_t i = begin; i < end; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
        break;
    }
}

/* y = op(x), any shape, same numel. */
glm53_status cpu_unary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, glm53_unary_op op) {
    assert(cpu_is_f32(x) && cpu_is_f32(y));
    assert(glm53_tensor_numel(y) == glm53_tensor_numel(x));
    assert(op >= GLM53_UNARY_SIGMOID && op <= GLM53_UNARY_RELU);
    unary_job job = {.y = y->data, .x = x->data, .op = op};
    cpu_parallel_for(be, glm53_tensor_numel(x), op == GLM53_UNARY_RELU ? 1 : CPU_COST_EXP, unary_range, &job);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * binary
 */
typedef struct binary_job {
    float           *y;            /* [M, N] */
    const float     *a;            /* [M, N] */
    const float     *b;            /* [N] (broadcast) or [M, N] */
    int64_t          n;
    bool             b_broadcast;
    glm53_binary_op  op;
} binary_job;

static void binary_rows(void *ctx, int64_t begin, int64_t end) {
    const binary_job *job = ctx;
    const int64_t N = job->n;
    for (int64_t r = begin; r < end; r++) {
        const float *a = job->a + r * N, *b = job->b_broadcast ? job->b : job->b + r * N;
        float *y = job->y + r * N;
        if (job->op == GLM53_BINARY_ADD)
            for (int64_t i = 0; i < N; i++) y[i] = a[i] + b[i];
        else
            for (int64_t i = 0; i < N; i++) y[i] = a[i] * b[i];
    }
}

/* y[M,N] = a[M,N] op b, b [N] broadcast over rows or [M,N]. */
glm53_status cpu_binary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *a, const glm53_tensor *b,
                        glm53_binary_op op) {
    assert(cpu_is_f32(y) && cpu_is_f32(a) && cpu_is_f32(b));
    assert(op == GLM53_BINARY_ADD || op == GLM53_BINARY_MUL);
    int64_t M = glm53_tensor_rows(a), N = cpu_cols(a);
    assert(glm53_tensor_numel(y) == M * N);
    bool b_broadcast = glm53_tensor_numel(b) == N;
    assert(b_broadcast || glm53_tensor_numel(b) == M * N);
    binary_job job = {.y = y->data, .a = a->data, .b = b->data, .n = N, .b_broadcast = b_broadcast, .op = op};
    cpu_parallel_for(be, M, N, binary_rows, &job);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * axpby
 */
typedef struct axpby_job {
    float       *y;
    const float *x;
    float        alpha, beta;
} axpby_job;

static void axpby_range(void *ctx, int64_t begin, int64_t end) {
    const axpby_job *job = ctx;
    float *y = job->y;
    const float *x = job->x;
    /* beta == 0 must not read y: it may be uninitialised, and 0 * NaN would poison the result. */
    if (job->beta == 0.0f)
        for (int64_t i = begin; i < end; i++) y[i] = job->alpha * x[i];
    else
        for (int64_t i = begin; i < end; i++) y[i] = job->alpha * x[i] + job->beta * y[i];
}

/* y = alpha * x + beta * y, same numel. */
glm53_status cpu_axpby(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float alpha, float beta) {
    assert(cpu_is_f32(x) && cpu_is_f32(y));
    assert(glm53_tensor_numel(y) == glm53_tensor_numel(x));
    axpby_job job = {.y = y->data, .x = x->data, .alpha = alpha, .beta = beta};
    cpu_parallel_for(be, glm53_tensor_numel(x), 3, axpby_range, &job);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * swiglu
 */
typedef struct swiglu_job {
    float       *y;
    const float *gate, *up;
    float        limit;
} swiglu_job;

void cpu_swiglu_n(float *y, const float *gate, const float *up, int64_t n, float limit) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i];
        if (limit > 0.0f) {
            g = g > limit ? limit : g;
            u = u > limit ? limit : (u < -limit ? -limit : u);
        }
        y[i] = silu(g) * u;
    }
}

static void swiglu_range(void *ctx, int64_t begin, int64_t end) {
    const swiglu_job *job = ctx;
    cpu_swiglu_n(job->y + begin, job->gate + begin, job->up + begin, end - begin, job->limit);
}

/* y[M,F] = silu(min(gate, limit)) * clamp(up, -limit, limit); limit <= 0: no clamp. */
glm53_status cpu_swiglu(glm53_backend *be, glm53_tensor *y, const glm53_tensor *gate, const glm53_tensor *up,
                        float limit) {
    assert(cpu_is_f32(y) && cpu_is_f32(gate) && cpu_is_f32(up));
    int64_t n = glm53_tensor_numel(y);
    assert(glm53_tensor_numel(gate) == n && glm53_tensor_numel(up) == n);
    swiglu_job job = {.y = y->data, .gate = gate->data, .up = up->data, .limit = limit};
    cpu_parallel_for(be, n, CPU_COST_EXP, swiglu_range, &job);
    return GLM53_OK;
}
