/*
 * ops_vision.cu - the vision tower's own ops on the CUDA backend (semantics: the "Vision ops" section of
 * kernels/backend.h; CPU reference: kernels/cpu/ops_vision.c).
 *
 * rope_2d: one thread per (row, head, j < d/2) pair of elements j and j + d/2, which share one angle; inverse
 * frequency, angle, cos and sin in F32 as the reference (accurate cosf/sinf, no fast math).
 *
 * attention_segments: one warp per (row, head), online softmax over the rows of the row's segment in chunks of 32
 * keys: lane l scores key j0 + l against q (held in shared memory), the chunk's max and sum update the running
 * max and normaliser, and every lane accumulates the output elements e = l, l + 32, ... (d <= 256) from the
 * chunk's values, each probability broadcast by shuffle. K and V are read once per (row, head); everything is F32
 * until the one rounding at the store. A segment of any length works (no score row is kept).
 */
#include "kernels/cuda/cuda_common.cuh"

enum { ROPE_THREADS = 256, ATTN_WARPS = 4, ATTN_MAX_D = 256 };

/* x, y [M,H,d]; pos [M,2]; one thread per (m, h, j), j < d/2. */
__global__ void rope_2d_kernel(act_out y, act_in x, const int32_t *pos, int64_t M, int64_t H, int64_t d,
                               float theta) {
    const int64_t half = d / 2, q = d / 4, n = M * H * half;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = t % half, mh = t / half, m = mh / H;
        const int64_t i = j < q ? j : j - q;
        const float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)half);
        const float p = (float)pos[2 * m + (j < q ? 0 : 1)];
        const float angle = p * inv_freq;
        const float c = cosf(angle), s = sinf(angle);
        const int64_t base = mh * d;
        const float x1 = x[base + j], x2 = x[base + j + half];
        y.store(base + j, x1 * c + (-x2) * s);
        y.store(base + j + half, x2 * c + x1 * s);
    }
}

glm53_status cuda_rope_2d(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *pos,
                          float theta) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(y) && cuda_is_act(x) && x->ndim == 3 && glm53_tensor_numel(y) == glm53_tensor_numel(x));
    const int64_t M = x->shape[0], H = x->shape[1], d = x->shape[2];
    assert(pos->dtype == GLM53_I32 && pos->data && pos->device == GLM53_DEVICE_CUDA && glm53_tensor_numel(pos) == 2 * M);
    if (d % 4 != 0 || d > 1024)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda rope_2d: head dim %lld must be a multiple of 4, at most 1024",
                          (long long)d);
    GLM53_TRY(cuda_enter(cb));
    const int64_t n = M * H * (d / 2);
    if (n == 0) return GLM53_OK;
    rope_2d_kernel<<<cuda_blocks_for(n, ROPE_THREADS), ROPE_THREADS, 0, cb->stream>>>(
        cuda_act_out(y), cuda_act_in(x), (const int32_t *)pos->data, M, H, d, theta);
    CUDA_LAUNCHED("rope_2d");
    return GLM53_OK;
}

/* q, k, v, o [M,H,d]; cu [n_seg + 1]; warp w of block b handles item b * ATTN_WARPS + w = (row, head). */
__global__ void __launch_bounds__(ATTN_WARPS * 32)
attention_segments_kernel(act_out o, act_in q, act_in k, act_in v, const int32_t *cu, int64_t n_seg, int64_t M,
                          int64_t H, int64_t d, float scale) {
    __shared__ float q_s[ATTN_WARPS][ATTN_MAX_D];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t item = (int64_t)blockIdx.x * ATTN_WARPS + warp;
    if (item >= M * H) return;   /* whole warps only: no block-wide barrier below */
    const int64_t i = item / H, h = item % H;
    int64_t lo = 0, hi = n_seg - 1;   /* the segment holding row i */
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (cu[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    const int64_t j0 = cu[lo], len = cu[lo + 1] - j0;
    for (int64_t e = lane; e < d; e += 32) q_s[warp][e] = q[(i * H + h) * d + e];
    __syncwarp();

    float acc[ATTN_MAX_D / 32];
    for (int t = 0; t < ATTN_MAX_D / 32; t++) acc[t] = 0.0f;
    float run_max = -INFINITY, run_sum = 0.0f;
    for (int64_t c0 = 0; c0 < len; c0 += 32) {
        const int64_t j = c0 + lane;
        float s = -INFINITY;
        if (j < len) {
            const int64_t kb = ((j0 + j) * H + h) * d;
            float dot = 0.0f;
            for (int64_t e = 0; e < d; e++) dot += q_s[warp][e] * k[kb + e];
            s = scale * dot;
        }
        const float new_max = fmaxf(run_max, cuda_warp_max(s));
        const float alpha = expf(run_max - new_max);   /* 0 on the first chunk (run_max = -inf) */
        const float p = j < len ? expf(s - new_max) : 0.0f;
        run_sum = run_sum * alpha + cuda_warp_sum(p);
        for (int t = 0; t < ATTN_MAX_D / 32; t++) acc[t] *= alpha;
        const int64_t n_keys = len - c0 < 32 ? len - c0 : 32;
        for (int64_t jj = 0; jj < n_keys; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, (int)jj);
            const int64_t vb = ((j0 + c0 + jj) * H + h) * d;
            for (int t = 0; t < ATTN_MAX_D / 32; t++) {
                const int64_t e = lane + 32 * t;
                if (e < d) acc[t] += pj * v[vb + e];
            }
        }
        run_max = new_max;
    }
    for (int t = 0; t < ATTN_MAX_D / 32; t++) {
        const int64_t e = lane + 32 * t;
        if (e < d) o.store((i * H + h) * d + e, acc[t] / run_sum);
    }
}

glm53_status cuda_attention_segments(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                     const glm53_tensor *v, const glm53_tensor *cu_seqlens, float scale) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(o) && cuda_is_act(q) && cuda_is_act(k) && cuda_is_act(v) && q->ndim == 3);
    assert(cu_seqlens->dtype == GLM53_I32 && cu_seqlens->data && cu_seqlens->device == GLM53_DEVICE_CUDA &&
           cu_seqlens->ndim == 1);
    const int64_t M = q->shape[0], H = q->shape[1], d = q->shape[2], n_seg = cu_seqlens->shape[0] - 1;
    assert(glm53_tensor_numel(k) == M * H * d && glm53_tensor_numel(v) == M * H * d &&
           glm53_tensor_numel(o) == M * H * d);
    if (d > ATTN_MAX_D)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda attention_segments: head dim %lld > %d", (long long)d,
                          ATTN_MAX_D);
    if (n_seg < 1) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cuda attention_segments: no segment");
    GLM53_TRY(cuda_enter(cb));
    if (M * H == 0) return GLM53_OK;
    const int64_t blocks = (M * H + ATTN_WARPS - 1) / ATTN_WARPS;
    if (blocks > INT32_MAX) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda attention_segments: too many rows");
    attention_segments_kernel<<<(unsigned)blocks, ATTN_WARPS * 32, 0, cb->stream>>>(
        cuda_act_out(o), cuda_act_in(q), cuda_act_in(k), cuda_act_in(v), (const int32_t *)cu_seqlens->data, n_seg, M,
        H, d, scale);
    CUDA_LAUNCHED("attention_segments");
    return GLM53_OK;
}
