/*
 * ops_mhc.cu - manifold-constrained hyper-connections (glm53-architecture.md section 4.3) on the CUDA backend:
 * expand (embedding into every stream), pre (the 24-wide F32 projection, Sinkhorn, collapse), post (write-back
 * and stream mixing), mean (final collapse).
 *
 * mhc_pre runs one block per token row. The (2+S)*S = 24 projections of the flattened streams (S*D = 16384
 * values) are split over the block's warps, one projection per warp at a time, each a lane-strided F32 dot
 * product finished by a warp reduction; the RMS of the row is a block reduction, applied after the projection
 * (it is one scalar per row, so it commutes). The Sinkhorn iterations on the S x S matrix are a few hundred
 * flops: thread 0 runs them in shared memory, in exactly the CPU backend's order. Then all threads collapse the
 * streams into x.
 */
#include "kernels/cuda/cuda_common.cuh"

enum { MHC_THREADS = 256, MHC_MAX_S = 16 };

/* ------------------------------------------------------------------------------------------------------------
 * Kernels
 */
/* H[N,S,D][n][s] = x[N,D][n]. */
__global__ void mhc_expand_kernel(act_out H, act_in x, int64_t N, int64_t S, int64_t D) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * S * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / (S * D), d = i % D;
        H.store(i, x[n * D + d]);
    }
}

/* One block per row n. post[N,S], comb[N,S,S] F32; x[N,D] activation; H[N,S,D]; fn[(2+S)*S, S*D]. */
__global__ void __launch_bounds__(MHC_THREADS)
mhc_pre_kernel(act_out x, float *post, float *comb, act_in H, weight_ref fn, weight_ref base, weight_ref scale,
               int64_t S, int64_t D, float rms_eps, float hc_eps, int32_t iters) {
    __shared__ float m[(2 + MHC_MAX_S) * MHC_MAX_S];
    __shared__ float pre[MHC_MAX_S];
    __shared__ float C[MHC_MAX_S * MHC_MAX_S];
    const int64_t n = blockIdx.x, SD = S * D, n_mix = (2 + S) * S;
    const int64_t h0 = n * SD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;

    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < SD; i += blockDim.x) {
        float v = H[h0 + i];
        ss += v * v;
    }
    float r = 1.0f / sqrtf(cuda_block_sum(ss) / (float)SD + rms_eps);

    for (int64_t j = warp; j < n_mix; j += n_warps) {
        float dot = 0.0f;
        for (int64_t i = lane; i < SD; i += 32) dot += H[h0 + i] * fn.at(j, i);
        dot = cuda_warp_sum(dot);
        if (lane == 0) m[j] = dot * r;
    }
    __syncthreads();

    if (threadIdx.x == 0) {
        float s0 = scale.at(0, 0), s1 = scale.at(0, 1), s2 = scale.at(0, 2);
        for (int64_t k = 0; k < S; k++) {
            pre[k] = cuda_sigmoid(m[k] * s0 + base.at(0, k)) + hc_eps;
            post[n * S + k] = 2.0f * cuda_sigmoid(m[S + k] * s1 + base.at(0, S + k));
        }
        /* Sinkhorn: row softmax (+eps), column normalisation, then iters-1 x (row, column); every denominator
         * + eps. */
        for (int64_t j = 0; j < S; j++) {
            float *row = C + j * S, mx = -INFINITY, sum = 0.0f;
            for (int64_t k = 0; k < S; k++) {
                row[k] = m[2 * S + j * S + k] * s2 + base.at(0, 2 * S + j * S + k);
                if (row[k] > mx) mx = row[k];
            }
            for (int64_t k = 0; k < S; k++) sum += (row[k] = expf(row[k] - mx));
            for (int64_t k = 0; k < S; k++) row[k] = row[k] / sum + hc_eps;
        }
        for (int32_t it = 0; it < iters; it++) {
            if (it > 0) {
                for (int64_t j = 0; j < S; j++) {
                    float sum = 0.0f;
                    for (int64_t k = 0; k < S; k++) sum += C[j * S + k];
                    for (int64_t k = 0; k < S; k++) C[j * S + k] /= sum + hc_eps;
                }
            }
            for (int64_t k = 0; k < S; k++) {
                float sum = 0.0f;
                for (int64_t j = 0; j < S; j++) sum += C[j * S + k];
                for (int64_t j = 0; j < S; j++) C[j * S + k] /= sum + hc_eps;
            }
        }
        for (int64_t i = 0; i < S * S; i++) comb[n * S * S + i] = C[i];
    }
    __syncthreads();

    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t k = 0; k < S; k++) acc += pre[k] * H[h0 + k * D + d];
        x.store(n * D + d, acc);
    }
}

/* H_out[n][k][d] = post[n][k] y[n][d] + sum_j comb[n][j][k] H_in[n][j][d]  (comb applied transposed). */
__global__ void mhc_post_kernel(act_out H_out, act_in y, act_in H_in, const float *post, const float *comb,
                                int64_t N, int64_t S, int64_t D) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * S * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / (S * D), k = (i / D) % S, d = i % D;
        float acc = post[n * S + k] * y[n * D + d];
        for (int64_t j = 0; j < S; j++) acc += comb[(n * S + j) * S + k] * H_in[(n * S + j) * D + d];
        H_out.store(i, acc);
    }
}

/* y[n][d] = sum_s H[n][s][d] / S. */
__global__ void mhc_mean_kernel(act_out y, act_in H, int64_t N, int64_t S, int64_t D) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / D, d = i % D;
        float acc = 0.0f;
        for (int64_t s = 0; s < S; s++) acc += H[(n * S + s) * D + d];
        y.store(i, acc / (float)S);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Host side
 */
glm53_status cuda_mhc_expand(glm53_backend *be, glm53_tensor *H, const glm53_tensor *x) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(H) && cuda_is_act(x) && H->ndim == 3);
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(glm53_tensor_rows(x) == N && cuda_cols(x) == D);
    GLM53_TRY(cuda_enter(cb));
    if (N * S * D == 0) return GLM53_OK;
    mhc_expand_kernel<<<cuda_blocks_for(N * S * D, 256), 256, 0, cb->stream>>>(cuda_act_out(H), cuda_act_in(x), N,
                                                                             S, D);
    CUDA_LAUNCHED("mhc_expand");
    return GLM53_OK;
}

glm53_status cuda_mhc_pre(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                          const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                          const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(H) && H->ndim == 3 && cuda_is_act(x));
    assert(cuda_is_act(post) && post->dtype == GLM53_F32 && cuda_is_act(comb) && comb->dtype == GLM53_F32);
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(S >= 1 && S <= MHC_MAX_S && sinkhorn_iters >= 1);
    assert(glm53_tensor_rows(x) == N && cuda_cols(x) == D);
    assert(glm53_tensor_numel(post) == N * S && glm53_tensor_numel(comb) == N * S * S);
    assert(fn->ndim == 2 && fn->shape[0] == (2 + S) * S && fn->shape[1] == S * D);
    assert(glm53_tensor_numel(base) == (2 + S) * S && glm53_tensor_numel(scale) == 3);
    assert(N <= INT32_MAX);
    weight_ref fr, br, sr;
    GLM53_TRY(cuda_weight_ref(fn, &fr, "mhc_pre"));
    GLM53_TRY(cuda_weight_ref(base, &br, "mhc_pre"));
    GLM53_TRY(cuda_weight_ref(scale, &sr, "mhc_pre"));
    GLM53_TRY(cuda_enter(cb));
    if (N == 0) return GLM53_OK;
    mhc_pre_kernel<<<(unsigned)N, MHC_THREADS, 0, cb->stream>>>(cuda_act_out(x), (float *)post->data,
                                                                (float *)comb->data, cuda_act_in(H), fr, br, sr, S,
                                                                D, rms_eps, hc_eps, sinkhorn_iters);
    CUDA_LAUNCHED("mhc_pre");
    return GLM53_OK;
}

glm53_status cuda_mhc_post(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y,
                           const glm53_tensor *H_in, const glm53_tensor *post, const glm53_tensor *comb) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(H_out) && cuda_is_act(y) && cuda_is_act(H_in) && H_in->ndim == 3);
    assert(H_out->data != H_in->data);
    assert(cuda_is_act(post) && post->dtype == GLM53_F32 && cuda_is_act(comb) && comb->dtype == GLM53_F32);
    int64_t N = H_in->shape[0], S = H_in->shape[1], D = H_in->shape[2];
    assert(glm53_tensor_numel(H_out) == N * S * D && glm53_tensor_rows(y) == N && cuda_cols(y) == D);
    assert(glm53_tensor_numel(post) == N * S && glm53_tensor_numel(comb) == N * S * S);
    GLM53_TRY(cuda_enter(cb));
    if (N * S * D == 0) return GLM53_OK;
    mhc_post_kernel<<<cuda_blocks_for(N * S * D, 256), 256, 0, cb->stream>>>(
        cuda_act_out(H_out), cuda_act_in(y), cuda_act_in(H_in), (const float *)post->data,
        (const float *)comb->data, N, S, D);
    CUDA_LAUNCHED("mhc_post");
    return GLM53_OK;
}

glm53_status cuda_mhc_mean(glm53_backend *be, glm53_tensor *y, const glm53_tensor *H) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(y) && cuda_is_act(H) && H->ndim == 3);
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(glm53_tensor_rows(y) == N && cuda_cols(y) == D);
    GLM53_TRY(cuda_enter(cb));
    if (N * D == 0) return GLM53_OK;
    mhc_mean_kernel<<<cuda_blocks_for(N * D, 256), 256, 0, cb->stream>>>(cuda_act_out(y), cuda_act_in(H), N, S, D);
    CUDA_LAUNCHED("mhc_mean");
    return GLM53_OK;
}
