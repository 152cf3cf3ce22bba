/*
 * ops_norm.cu - row normalisations on the CUDA backend: rmsnorm, layernorm, l2norm, softmax, and KDA's gated
 * rmsnorm.
 *
 * One block per row. Row statistics are F32 block reductions (cuda_block_sum / cuda_block_max); the row is then
 * read again and each element written by the thread that read it, after the reduction's barrier, so y == x
 * (in place) is safe. The formulas follow the CPU backend term by term (same operand order), so the two differ
 * only by summation order.
 *
 * rmsnorm of rows of up to 8192 elements, 16-byte aligned (every decode-step norm: 4096, 1536, 512): thread t
 * loads the 8-element chunks t, t + 256, ... with 16-byte loads all issued before any is used, keeps them in
 * registers for the second pass and sums its squares chunk by chunk (rmsnorm_rows_kernel). The element-wise
 * loop took 12.8 us per row of 4096 on the H100 (16 loads in a row per thread, then the row read again): 21 of
 * them are 0.27 ms of a flash-slice decode step.
 */
#include "kernels/cuda/cuda_common.cuh"

enum { NORM_THREADS = CUDA_NORM_THREADS };

/* ------------------------------------------------------------------------------------------------------------
 * Kernels (grid: one block per row of x[M,D])
 */
/* sum(x^2) of the row x[base, base + D) in F32, returned to every thread of the block (the CPU uses cpu_dot). */
static __device__ float row_sum_squares(act_in x, int64_t base, int64_t D) {
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float v = x[base + i];
        ss += v * v;
    }
    return cuda_block_sum(ss);
}

/* y = x / sqrt(mean(x^2) + eps) * w (w optional). */
__global__ void rmsnorm_kernel(act_out y, act_in x, weight_ref w, bool has_w, int64_t D, float eps) {
    cuda_pdl_begin();
    int64_t base = (int64_t)blockIdx.x * D;
    float inv_rms = 1.0f / sqrtf(row_sum_squares(x, base, D) / (float)D + eps);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float v = x[base + i] * inv_rms;
        if (has_w) v *= w.at(0, i);
        y.store(base + i, v);
    }
}

/* y = (x - mean) / sqrt(var + eps) * w + b, biased variance from squared deviations (no E[x^2] - E[x]^2). */
__global__ void layernorm_kernel(act_out y, act_in x, weight_ref w, bool has_w, weight_ref b, bool has_b, int64_t D,
                                 float eps) {
    cuda_pdl_begin();
    int64_t base = (int64_t)blockIdx.x * D;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += x[base + i];
    float mean = cuda_block_sum(s) / (float)D;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float dev = x[base + i] - mean;
        sq += dev * dev;
    }
    float inv_std = 1.0f / sqrtf(cuda_block_sum(sq) / (float)D + eps);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float v = (x[base + i] - mean) * inv_std;
        if (has_w) v *= w.at(0, i);
        if (has_b) v += b.at(0, i);
        y.store(base + i, v);
    }
}

/* y = x / sqrt(sum(x^2) + eps) * scale. */
__global__ void l2norm_kernel(act_out y, act_in x, int64_t D, float eps, float scale) {
    int64_t base = (int64_t)blockIdx.x * D;
    float inv_norm = cuda_l2norm_factor(row_sum_squares(x, base, D), eps);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
        y.store(base + i, cuda_l2norm_apply(x[base + i], inv_norm, scale));
}

/* y = exp(x - max) / sum; the exponentials are recomputed in the last pass rather than stored, so y may be x. */
__global__ void softmax_kernel(act_out y, act_in x, int64_t D) {
    int64_t base = (int64_t)blockIdx.x * D;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) mx = fmaxf(mx, x[base + i]);
    mx = cuda_block_max(mx);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += expf(x[base + i] - mx);
    float inv_sum = 1.0f / cuda_block_sum(s);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y.store(base + i, expf(x[base + i] - mx) * inv_sum);
}

/* y = w * (x / sqrt(mean(x^2) + eps)) * sigmoid(gate), all F32, one rounding. */
__global__ void rmsnorm_gated_kernel(act_out y, act_in x, act_in gate, weight_ref w, int64_t D, float eps) {
    cuda_pdl_begin();
    int64_t base = (int64_t)blockIdx.x * D;
    float r = 1.0f / sqrtf(row_sum_squares(x, base, D) / (float)D + eps);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
        y.store(base + i, w.at(0, i) * (x[base + i] * r) * cuda_sigmoid(gate[base + i]));
}

/* rmsnorm_gated for many short rows (KDA's output norm: a row per token and head, dv = 128 wide, 524,288 rows at an
 * 8,192-token prefill of 64 heads; GLM53_CUDA_KDA_ROWS): a warp per row, GATED_WARP_ROWS rows a block, instead of
 * a block of 128 threads and two barriers a row (635 us a call there on the H100, against about 180 us of
 * traffic). The warp plays rmsnorm_gated_kernel's 128 threads: lane l is its threads l, l + 32, l + 64, l + 96,
 * each summing its elements t, t + 128, ... in that order (ss += v * v, as row_sum_squares), then each of the four
 * warps' butterfly (cuda_warp_sum) and their sums added in warp order from 0, as cuda_block_sum adds them; the
 * output is the same expression. So a row gets the bits of rmsnorm_gated_kernel at 128 threads. */
enum { GATED_BLOCK_THREADS = 128, GATED_WARP_ROWS = 8 };
__global__ void __launch_bounds__(32 * GATED_WARP_ROWS)
rmsnorm_gated_rows_kernel(act_out y, act_in x, act_in gate, weight_ref w, int64_t M, int64_t D, float eps) {
    cuda_pdl_begin();
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * GATED_WARP_ROWS + (threadIdx.x >> 5);
    if (row >= M) return;   /* a whole warp: the shuffles below see only full warps */
    const int64_t base = row * D;
    float total = 0.0f;
#pragma unroll
    for (int warp = 0; warp < GATED_BLOCK_THREADS / 32; warp++) {
        float ss = 0.0f;   /* thread 32 warp + lane of the block form */
        for (int64_t i = 32 * warp + lane; i < D; i += GATED_BLOCK_THREADS) {
            float v = x[base + i];
            ss += v * v;
        }
        total += cuda_warp_sum(ss);
    }
    const float r = 1.0f / sqrtf(total / (float)D + eps);
    for (int64_t i = lane; i < D; i += 32)
        y.store(base + i, w.at(0, i) * (x[base + i] * r) * cuda_sigmoid(gate[base + i]));
}

enum { NORM_CHUNKS = 4 };   /* 8-element chunks per thread in rmsnorm_rows_kernel: rows up to 8 * 256 * 4 */

/* The same for a 16-byte aligned row with D % 8 == 0 and D <= 8 * NORM_THREADS * NORM_CHUNKS; one block per row. */
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_rows_kernel(act_out y, act_in x, weight_ref w, bool has_w, int64_t D, float eps) {
    cuda_pdl_begin();
    const int64_t base = (int64_t)blockIdx.x * D;
    float v[NORM_CHUNKS][8];
#pragma unroll
    for (int c = 0; c < NORM_CHUNKS; c++) {
        const int64_t i = ((int64_t)c * NORM_THREADS + threadIdx.x) * 8;
        if (i < D) cuda_act_load8(x, base + i, true, v[c]);
    }
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < NORM_CHUNKS; c++)
        if (((int64_t)c * NORM_THREADS + threadIdx.x) * 8 < D)
#pragma unroll
            for (int j = 0; j < 8; j++) ss = __fmaf_rn(v[c][j], v[c][j], ss);   /* spelled out: mhc_site replays it */
    const float inv_rms = 1.0f / sqrtf(cuda_block_sum(ss) / (float)D + eps);
#pragma unroll
    for (int c = 0; c < NORM_CHUNKS; c++) {
        const int64_t i = ((int64_t)c * NORM_THREADS + threadIdx.x) * 8;
        if (i < D)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float o = v[c][j] * inv_rms;
                if (has_w) o *= w.at(0, i + j);
                y.store(base + i + j, o);
            }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Host side
 */
/* Rows and columns of x, checked against y. */
static void row_shape(const glm53_tensor *y, const glm53_tensor *x, int64_t *M, int64_t *D) {
    assert(cuda_is_act(x) && cuda_is_act(y));
    *M = glm53_tensor_rows(x);
    *D = cuda_cols(x);
    assert(glm53_tensor_rows(y) == *M && cuda_cols(y) == *D);
    assert(*M <= INT32_MAX);
}

/* A weight_ref for an optional 1-D parameter of D elements (an unused placeholder when p is NULL). */
static glm53_status optional_param(const glm53_tensor *p, int64_t D, weight_ref *out, const char *op) {
    if (!p) {
        *out = weight_ref{};
        return GLM53_OK;
    }
    assert(glm53_tensor_numel(p) == D);
    GLM53_TRY(cuda_weight_ref(p, out, op));
    if (p->dtype == GLM53_F8_E4M3 && p->scale)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda %s: a block-scaled FP8 norm parameter", op);
    return GLM53_OK;
}

glm53_status cuda_rmsnorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                          float eps) {
    cuda_backend *cb = cuda_impl(be);
    int64_t M, D;
    row_shape(y, x, &M, &D);
    weight_ref wr;
    GLM53_TRY(optional_param(w, D, &wr, "rmsnorm"));
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || D == 0) return GLM53_OK;
    const size_t elem = glm53_dtype_size((glm53_dtype)x->dtype);
    if (D % 8 == 0 && D <= 8 * NORM_THREADS * NORM_CHUNKS && (uintptr_t)x->data % 16 == 0 && (D * elem) % 16 == 0) {
        CUDA_TRY(cuda_launch(cb, rmsnorm_rows_kernel, (unsigned)M, NORM_THREADS, 0, cb->pdl, cuda_act_out(y),
                             cuda_act_in(x), wr, w != nullptr, D, eps));
        CUDA_LAUNCHED("rmsnorm");
        return GLM53_OK;
    }
    CUDA_TRY(cuda_launch(cb, rmsnorm_kernel, (unsigned)M, NORM_THREADS, 0, cb->pdl, cuda_act_out(y), cuda_act_in(x), wr,
                         w != nullptr, D, eps));
    CUDA_LAUNCHED("rmsnorm");
    return GLM53_OK;
}

glm53_status cuda_layernorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                            const glm53_tensor *b, float eps) {
    cuda_backend *cb = cuda_impl(be);
    int64_t M, D;
    row_shape(y, x, &M, &D);
    weight_ref wr, br;
    GLM53_TRY(optional_param(w, D, &wr, "layernorm"));
    GLM53_TRY(optional_param(b, D, &br, "layernorm"));
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || D == 0) return GLM53_OK;
    CUDA_TRY(cuda_launch(cb, layernorm_kernel, (unsigned)M, NORM_THREADS, 0, cb->pdl, cuda_act_out(y), cuda_act_in(x),
                         wr, w != nullptr, br, b != nullptr, D, eps));
    CUDA_LAUNCHED("layernorm");
    return GLM53_OK;
}

glm53_status cuda_l2norm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float eps, float scale) {
    cuda_backend *cb = cuda_impl(be);
    int64_t M, D;
    row_shape(y, x, &M, &D);
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || D == 0) return GLM53_OK;
    l2norm_kernel<<<(unsigned)M, NORM_THREADS, 0, cb->stream>>>(cuda_act_out(y), cuda_act_in(x), D, eps, scale);
    CUDA_LAUNCHED("l2norm");
    return GLM53_OK;
}

glm53_status cuda_softmax(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x) {
    cuda_backend *cb = cuda_impl(be);
    int64_t M, D;
    row_shape(y, x, &M, &D);
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || D == 0) return GLM53_OK;
    softmax_kernel<<<(unsigned)M, NORM_THREADS, 0, cb->stream>>>(cuda_act_out(y), cuda_act_in(x), D);
    CUDA_LAUNCHED("softmax");
    return GLM53_OK;
}

glm53_status cuda_rmsnorm_gated(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                const glm53_tensor *gate, const glm53_tensor *w, float eps) {
    cuda_backend *cb = cuda_impl(be);
    int64_t M, D;
    row_shape(y, x, &M, &D);
    assert(cuda_is_act(gate) && glm53_tensor_numel(gate) == M * D);
    assert(w != nullptr);
    weight_ref wr;
    GLM53_TRY(optional_param(w, D, &wr, "rmsnorm_gated"));
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || D == 0) return GLM53_OK;
    if (cb->kda_rows && D <= 4 * GATED_BLOCK_THREADS) {   /* short rows: a warp a row, the same bits */
        CUDA_TRY(cuda_launch(cb, rmsnorm_gated_rows_kernel, (unsigned)((M + GATED_WARP_ROWS - 1) / GATED_WARP_ROWS),
                             32 * GATED_WARP_ROWS, 0, cb->pdl, cuda_act_out(y), cuda_act_in(x), cuda_act_in(gate), wr, M,
                             D, eps));
        CUDA_LAUNCHED("rmsnorm_gated (warp rows)");
    } else {
        CUDA_TRY(cuda_launch(cb, rmsnorm_gated_kernel, (unsigned)M, GATED_BLOCK_THREADS, 0, cb->pdl, cuda_act_out(y),
                             cuda_act_in(x), cuda_act_in(gate), wr, D, eps));
        CUDA_LAUNCHED("rmsnorm_gated");
    }
    return GLM53_OK;
}
