/*
 * ops_elementwise.cu - unary activations, add/mul with row broadcast, axpby, clamped SwiGLU and the depthwise
 * causal conv1d on the CUDA backend.
 *
 * Grid-stride loops over output elements; each element is read and written by one thread, so the in-place uses
 * the contracts allow (y == x, y == a) are safe. NaN propagates as in torch and the CPU backend: clamps and relu
 * are comparisons that let NaN through, never fminf/fmaxf.
 */
#include "kernels/cuda/cuda_common.cuh"

enum { EW_THREADS = 256 };

/* ------------------------------------------------------------------------------------------------------------
 * Kernels
 */
__global__ void unary_kernel(act_out y, act_in x, int64_t n, glm53_unary_op op) {
    cuda_pdl_begin();
    GRID_STRIDE(i, n) {
        float v = x[i], r;
        switch (op) {
        case GLM53_UNARY_SIGMOID: r = cuda_sigmoid(v); break;
        case GLM53_UNARY_SILU: r = cuda_silu(v); break;
        case GLM53_UNARY_GELU:   /* the CPU's form: 1 + erf(v / sqrt 2) cancels to 0 below -5.9 in F32, erfc not */
            r = 0.5f * v * erfcf(v * -0.70710678118654752f);
            break;
        case GLM53_UNARY_SOFTPLUS: r = cuda_softplus(v); break;
        case GLM53_UNARY_EXP: r = expf(v); break;
        default: r = v < 0.0f ? 0.0f : v; break;   /* RELU */
        }
        y.store(i, r);
    }
}

/* y[M,N] = a[M,N] op b, b either [M,N] or a row [N] (broadcast). */
__global__ void binary_kernel(act_out y, act_in a, act_in b, int64_t n, int64_t N, bool b_broadcast,
                              glm53_binary_op op) {
    cuda_pdl_begin();
    GRID_STRIDE(i, n) {
        float bv = b[b_broadcast ? i % N : i];
        y.store(i, op == GLM53_BINARY_ADD ? a[i] + bv : a[i] * bv);
    }
}

/* y = alpha x + beta y; beta == 0 never reads y (it may be uninitialised, and 0 * NaN is NaN). */
__global__ void axpby_kernel(act_out y, act_in x, act_in y_old, int64_t n, float alpha, float beta) {
    cuda_pdl_begin();
    GRID_STRIDE(i, n) {
        float v = alpha * x[i];
        if (beta != 0.0f) v += beta * y_old[i];
        y.store(i, v);
    }
}

/* y = silu(min(gate, limit)) * clamp(up, -limit, limit); limit <= 0: no clamp. */
__global__ void swiglu_kernel(act_out y, act_in gate, act_in up, int64_t n, float limit) {
    cuda_pdl_begin();
    GRID_STRIDE(i, n) {
        y.store(i, cuda_swiglu_value(gate[i], up[i], limit));
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Host side
 */
glm53_status cuda_unary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, glm53_unary_op op) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(x) && cuda_is_act(y) && glm53_tensor_numel(y) == glm53_tensor_numel(x));
    assert(op >= GLM53_UNARY_SIGMOID && op <= GLM53_UNARY_RELU);
    GLM53_TRY(cuda_enter(cb));
    int64_t n = glm53_tensor_numel(x);
    if (n == 0) return GLM53_OK;
    CUDA_TRY(cuda_launch(cb, unary_kernel, cuda_blocks_for(n, EW_THREADS), EW_THREADS, 0, cb->pdl, cuda_act_out(y),
                         cuda_act_in(x), n, op));
    CUDA_LAUNCHED("unary");
    return GLM53_OK;
}

glm53_status cuda_binary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *a, const glm53_tensor *b,
                         glm53_binary_op op) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(y) && cuda_is_act(a) && cuda_is_act(b));
    assert(op == GLM53_BINARY_ADD || op == GLM53_BINARY_MUL);
    int64_t M = glm53_tensor_rows(a), N = cuda_cols(a), n = M * N;
    assert(glm53_tensor_numel(y) == n);
    bool b_broadcast = glm53_tensor_numel(b) == N;
    assert(b_broadcast || glm53_tensor_numel(b) == n);
    GLM53_TRY(cuda_enter(cb));
    if (n == 0) return GLM53_OK;
    CUDA_TRY(cuda_launch(cb, binary_kernel, cuda_blocks_for(n, EW_THREADS), EW_THREADS, 0, cb->pdl, cuda_act_out(y),
                         cuda_act_in(a), cuda_act_in(b), n, N, b_broadcast, op));
    CUDA_LAUNCHED("binary");
    return GLM53_OK;
}

glm53_status cuda_axpby(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float alpha, float beta) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(x) && cuda_is_act(y) && glm53_tensor_numel(y) == glm53_tensor_numel(x));
    GLM53_TRY(cuda_enter(cb));
    int64_t n = glm53_tensor_numel(x);
    if (n == 0) return GLM53_OK;
    CUDA_TRY(cuda_launch(cb, axpby_kernel, cuda_blocks_for(n, EW_THREADS), EW_THREADS, 0, cb->pdl, cuda_act_out(y),
                         cuda_act_in(x), cuda_act_in(y), n, alpha, beta));
    CUDA_LAUNCHED("axpby");
    return GLM53_OK;
}

glm53_status cuda_swiglu(glm53_backend *be, glm53_tensor *y, const glm53_tensor *gate, const glm53_tensor *up,
                         float limit) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(y) && cuda_is_act(gate) && cuda_is_act(up));
    int64_t n = glm53_tensor_numel(y);
    assert(glm53_tensor_numel(gate) == n && glm53_tensor_numel(up) == n);
    GLM53_TRY(cuda_enter(cb));
    if (n == 0) return GLM53_OK;
    CUDA_TRY(cuda_launch(cb, swiglu_kernel, cuda_blocks_for(n, EW_THREADS), EW_THREADS, 0, cb->pdl, cuda_act_out(y),
                         cuda_act_in(gate), cuda_act_in(up), n, limit));
    CUDA_LAUNCHED("swiglu");
    return GLM53_OK;
}

