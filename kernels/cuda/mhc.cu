/*
 * mhc.cu - manifold-constrained hyper-connections (glm53-architecture.md section 4.3) on the CUDA backend:
 * expand (embedding into every stream), pre (the 24-wide F32 projection, Sinkhorn, collapse), post (write-back
 * and stream mixing), mean (final collapse).
 *
 * mhc_pre runs in two kernels, so that a decode row is spread over many multiprocessors (one block per row did
 * all of it before: 754 us per call at the real dims on the H200, for a 786 KB weight):
 *   1. projections: grid (row, 512-element chunk of the flattened streams S*D), each block the partial dot
 *      products of its chunk with the (2+S)*S = 24 rows of fn and the partial sum of squares, 16-byte loads when
 *      H and fn are BF16, all 24 rows' loads in flight at once; partials to scratch [N, chunks, 25];
 *   2. mix: grid (row, 512-column block of x + 1). Each collapse block adds the partials it needs in chunk order,
 *      applies 1 / rms (one scalar per row, so it commutes with the projection), computes pre and collapses the
 *      streams into its columns of x; the last block computes post and runs the Sinkhorn iterations on the
 *      S x S matrix (S * S <= 32: one lane per element, in a register, the sums gathered by shuffles; larger S:
 *      one lane per row / column in shared memory; either way each sum over its S terms in the CPU's order).
 *   On the H100's flash slice the two took 15.4 and 23.2 us a call (0.62 ms of a batch-1 step over 16 calls)
 *   when stage 1 waited on its loads one row at a time and stage 2 was one block per row.
 * Every row is computed alone, in a fixed order: the result of a row does not depend on the batch.
 */
#include "kernels/cuda/cuda_common.cuh"

enum {
    MHC_THREADS = 256,
    MHC_MAX_S = 16,
    MHC_MAX_MIX = (2 + MHC_MAX_S) * MHC_MAX_S,
    MHC_GROUP = 24,              /* stage-1 projections per pass: all (2 + S) * S of them at S = 4 */
    MHC_PROJECT_THREADS = 64,
    MHC_CHUNK = 512,             /* flattened-stream elements per stage-1 block: 8 per thread, 32 blocks a row */
    MHC_COLS = 512,              /* columns of x per stage-2 collapse block: 8 blocks a row at D = 4096 */
};

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

/* Stage 1 of mhc_pre. grid (N, n_chunks), MHC_PROJECT_THREADS threads; block (n, c) covers the flattened
 * streams H[n] [S*D] from c * MHC_CHUNK to (c+1) * MHC_CHUNK and writes n_mix + 1 partial sums
 *   part[n][c][j] = sum_i H[n][i] * fn[j][i]   (j < n_mix),     part[n][c][n_mix] = sum_i H[n][i]^2,
 * MHC_GROUP projections per pass over the chunk (one pass at S = 4), the sum of squares in the first.
 * VEC: H and fn are BF16 and 16-byte aligned, SD % 8 == 0: each thread takes 8 consecutive elements per 16-byte
 * load (of H, and of each fn row); the MHC_GROUP rows' loads are issued before any is used (a row past n_mix
 * reads row n_mix - 1 and is dropped), because a load under a run-time condition waits for the previous one:
 * 24 round trips to memory in a row took 15 us per call. Otherwise one element at a time through act_in /
 * weight_ref. part[N, n_chunks, n_mix + 1] F32 scratch; stage 2 adds the chunks in order, so the result is fixed. */
template <bool VEC>
__global__ void __launch_bounds__(MHC_PROJECT_THREADS)
mhc_project_kernel(float *part, act_in H, weight_ref fn, int64_t S, int64_t D) {
    cuda_pdl_begin();
    __shared__ float warp_part[MHC_PROJECT_THREADS / 32][MHC_GROUP + 1];
    const int64_t n = blockIdx.x, SD = S * D;
    const int n_mix = (int)((2 + S) * S), n_chunks = (int)gridDim.y;
    const int64_t i0 = (int64_t)blockIdx.y * MHC_CHUNK, i1 = i0 + MHC_CHUNK < SD ? i0 + MHC_CHUNK : SD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *out = part + ((int64_t)n * n_chunks + blockIdx.y) * (n_mix + 1);

    for (int v0 = 0; v0 < n_mix; v0 += MHC_GROUP) {   /* projections v0 .. v0 + MHC_GROUP; slot MHC_GROUP: squares */
        float acc[MHC_GROUP + 1];
#pragma unroll
        for (int g = 0; g <= MHC_GROUP; g++) acc[g] = 0.0f;
        if (VEC) {
            const __nv_bfloat16 *h = (const __nv_bfloat16 *)H.data + n * SD, *w = (const __nv_bfloat16 *)fn.data;
            for (int64_t i = i0 + (int64_t)threadIdx.x * 8; i < i1; i += (int64_t)MHC_PROJECT_THREADS * 8) {
                uint4 raw[MHC_GROUP];
#pragma unroll
                for (int g = 0; g < MHC_GROUP; g++)
                    raw[g] = *reinterpret_cast<const uint4 *>(w + (int64_t)min(v0 + g, n_mix - 1) * SD + i);
                float hv[8];
                cuda_bf16x8_to_float(*reinterpret_cast<const uint4 *>(h + i), hv);
#pragma unroll
                for (int g = 0; g < MHC_GROUP; g++) {
                    float wv[8], a = 0.0f;
                    cuda_bf16x8_to_float(raw[g], wv);
#pragma unroll
                    for (int e = 0; e < 4; e++) a += hv[2 * e] * wv[2 * e] + hv[2 * e + 1] * wv[2 * e + 1];
                    acc[g] += a;
                }
                float sq = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) sq += hv[e] * hv[e];
                acc[MHC_GROUP] += sq;
            }
        } else {
            for (int64_t i = i0 + threadIdx.x; i < i1; i += MHC_PROJECT_THREADS) {
                float x = H[n * SD + i];
#pragma unroll
                for (int g = 0; g < MHC_GROUP; g++)
                    if (v0 + g < n_mix) acc[g] += x * fn.at(v0 + g, i);
                acc[MHC_GROUP] += x * x;
            }
        }
        /* Block sums: warp reductions, then the warps added in order. */
#pragma unroll
        for (int g = 0; g <= MHC_GROUP; g++) {
            float v = cuda_warp_sum(acc[g]);
            if (lane == 0) warp_part[warp][g] = v;
        }
        __syncthreads();
        const int g = threadIdx.x, v = g < MHC_GROUP ? v0 + g : n_mix;
        if (g <= MHC_GROUP && (g < MHC_GROUP ? v < n_mix : v0 == 0)) {
            float s = 0.0f;
            for (int w = 0; w < MHC_PROJECT_THREADS / 32; w++) s += warp_part[w][g];
            out[v] = s;
        }
        __syncthreads();   /* warp_part is written again by the next group */
    }
}

/* Sum over the chunks, in chunk order, of stage 1's partial value j of row n. */
__device__ inline float mhc_chunk_sum(const float *part, int64_t n, int n_chunks, int n_mix, int j) {
    const float *p = part + (int64_t)n * n_chunks * (n_mix + 1) + j;
    float v = 0.0f;
#pragma unroll 8
    for (int c = 0; c < n_chunks; c++) v += p[(int64_t)c * (n_mix + 1)];
    return v;
}

/* Sinkhorn on an S x S matrix (S * S <= 32) in one warp: lane j*S + k holds C[j][k] in a register; a row
 * (column) sum gathers its S terms by shuffles and adds them in the CPU's order, so every lane of the row divides
 * by the same sum the serial loop forms. SS: S known at compile time (4, the model's), which lets the S shuffles
 * of a sum go out together (a run-time S took one round trip per term: 20 iterations of them dominated the
 * call); 0: S = s at run time. m: the row's chunk sums, r its 1 / rms; comb[S * S] out. */
template <int SS>
__device__ inline void mhc_sinkhorn_lanes(float *comb, const float *m, float r, float s2, const weight_ref &base, int s,
                                          float hc_eps, int32_t iters) {
    const int S = SS ? SS : s, lane = threadIdx.x & 31;
    const int j = lane / S, k = lane % S;
    const bool mine = lane < S * S;
    float c = mine ? m[2 * S + lane] * r * s2 + base.at(0, 2 * S + lane) : 0.0f;
    float mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int q = 0; q < S; q++) mx = fmaxf(mx, __shfl_sync(0xffffffffu, c, (j * S + q) & 31));
    /* The CPU's max is a serial `if (row[k] > mx)`: equal to fmaxf for the non-NaN values it meets. */
    c = mine ? expf(c - mx) : 0.0f;
#pragma unroll
    for (int q = 0; q < S; q++) sum += __shfl_sync(0xffffffffu, c, (j * S + q) & 31);
    c = c / sum + hc_eps;
    for (int32_t it = 0; it < iters; it++) {
        if (it > 0) {
            float rs = 0.0f;
#pragma unroll
            for (int q = 0; q < S; q++) rs += __shfl_sync(0xffffffffu, c, (j * S + q) & 31);
            c /= rs + hc_eps;
        }
        float cs = 0.0f;
#pragma unroll
        for (int q = 0; q < S; q++) cs += __shfl_sync(0xffffffffu, c, (q * S + k) & 31);
        c /= cs + hc_eps;
    }
    if (mine) comb[lane] = c;
}

/* Stage 2 of mhc_pre. grid (N, n_col_blocks + 1), MHC_THREADS threads. Blocks y < n_col_blocks collapse columns
 * y * MHC_COLS .. + MHC_COLS of row n into x, each computing the row's pre weights itself (S + 1 chunk sums, the
 * same in every block); block n_col_blocks computes post and comb: the Sinkhorn iterations on the S x S matrix
 * in warp 0, each row or column sum over its S terms in the CPU's order, so the matrix comes out as the serial
 * loop's. The Sinkhorn block and the collapse blocks run side by side (one block doing both took 23 us a call).
 * post[N,S], comb[N,S,S] F32; x[N,D] activation; H[N,S,D]; part[N, n_chunks, n_mix + 1]. */
__global__ void __launch_bounds__(MHC_THREADS)
mhc_mix_kernel(act_out x, float *post, float *comb, act_in H, const float *part, int n_chunks, weight_ref base,
               weight_ref scale, int64_t S, int64_t D, float rms_eps, float hc_eps, int32_t iters) {
    cuda_pdl_begin();
    __shared__ float m[MHC_MAX_MIX + 1];
    __shared__ float pre[MHC_MAX_S];
    __shared__ float C[MHC_MAX_S * MHC_MAX_S];
    const int64_t n = blockIdx.x, SD = S * D;
    const int n_mix = (int)((2 + S) * S);
    const bool sinkhorn_block = blockIdx.y == gridDim.y - 1;

    if (!sinkhorn_block) {
        /* pre, then x[n][d] = sum_k pre[k] H[n][k][d] over this block's columns */
        if (threadIdx.x <= S) {
            const int j = threadIdx.x < S ? (int)threadIdx.x : n_mix;
            m[j] = mhc_chunk_sum(part, n, n_chunks, n_mix, j);
        }
        __syncthreads();
        if (threadIdx.x < S) {
            const float r = 1.0f / sqrtf(m[n_mix] / (float)SD + rms_eps);
            pre[threadIdx.x] = cuda_sigmoid(m[threadIdx.x] * r * scale.at(0, 0) + base.at(0, threadIdx.x)) + hc_eps;
        }
        __syncthreads();
        const int64_t d0 = (int64_t)blockIdx.y * MHC_COLS, d1 = d0 + MHC_COLS < D ? d0 + MHC_COLS : D;
        for (int64_t d = d0 + threadIdx.x; d < d1; d += blockDim.x) {
            float acc = 0.0f;
            for (int64_t k = 0; k < S; k++) acc += pre[k] * H[n * SD + k * D + d];
            x.store(n * D + d, acc);
        }
        return;
    }

    for (int j = threadIdx.x; j <= n_mix; j += blockDim.x) m[j] = mhc_chunk_sum(part, n, n_chunks, n_mix, j);
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const float r = 1.0f / sqrtf(m[n_mix] / (float)SD + rms_eps);
    const float s1 = scale.at(0, 1), s2 = scale.at(0, 2);
    const int lane = threadIdx.x;
    if (lane < S) post[n * S + lane] = 2.0f * cuda_sigmoid(m[S + lane] * r * s1 + base.at(0, S + lane));
    if (S == 4) {
        mhc_sinkhorn_lanes<4>(comb + n * S * S, m, r, s2, base, 4, hc_eps, iters);
    } else if (S * S <= 32) {
        mhc_sinkhorn_lanes<0>(comb + n * S * S, m, r, s2, base, (int)S, hc_eps, iters);
    } else {
        /* Larger S: lane j normalises row j, lane k column k, in shared memory. */
        if (lane < S) {
            float *row = C + lane * S, mx = -INFINITY, sum = 0.0f;
            for (int64_t k = 0; k < S; k++) {
                row[k] = m[2 * S + lane * S + k] * r * s2 + base.at(0, 2 * S + lane * S + k);
                if (row[k] > mx) mx = row[k];
            }
            for (int64_t k = 0; k < S; k++) sum += (row[k] = expf(row[k] - mx));
            for (int64_t k = 0; k < S; k++) row[k] = row[k] / sum + hc_eps;
        }
        __syncwarp();
        for (int32_t it = 0; it < iters; it++) {
            if (it > 0) {
                if (lane < S) {
                    float sum = 0.0f;
                    for (int64_t k = 0; k < S; k++) sum += C[lane * S + k];
                    for (int64_t k = 0; k < S; k++) C[lane * S + k] /= sum + hc_eps;
                }
                __syncwarp();
            }
            if (lane < S) {
                float sum = 0.0f;
                for (int64_t j = 0; j < S; j++) sum += C[j * S + lane];
                for (int64_t j = 0; j < S; j++) C[j * S + lane] /= sum + hc_eps;
            }
            __syncwarp();
        }
        for (int64_t i = lane; i < S * S; i += 32) comb[n * S * S + i] = C[i];
    }
}

/* H_out[n][k][d] = post[n][k] y[n][d] + sum_j comb[n][j][k] H_in[n][j][d]  (comb applied transposed). */
__global__ void mhc_post_kernel(act_out H_out, act_in y, act_in H_in, const float *post, const float *comb,
                                int64_t N, int64_t S, int64_t D) {
    cuda_pdl_begin();
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
    assert(N <= INT32_MAX && S * D <= (int64_t)MHC_CHUNK * 65535 && D <= (int64_t)MHC_COLS * 65534);   /* the grids */
    weight_ref fr, br, sr;
    GLM53_TRY(cuda_weight_ref(fn, &fr, "mhc_pre"));
    GLM53_TRY(cuda_weight_ref(base, &br, "mhc_pre"));
    GLM53_TRY(cuda_weight_ref(scale, &sr, "mhc_pre"));
    GLM53_TRY(cuda_enter(cb));
    if (N == 0) return GLM53_OK;
    const int64_t SD = S * D, n_mix = (2 + S) * S;
    const int n_chunks = (int)((SD + MHC_CHUNK - 1) / MHC_CHUNK);
    cuda_scratch part;
    GLM53_TRY(part.get(cb, (size_t)(N * n_chunks * (n_mix + 1)) * sizeof(float), "mhc_pre partial sums"));
    const bool vec = H->dtype == GLM53_BF16 && fn->dtype == GLM53_BF16 && SD % 8 == 0 &&
                     (uintptr_t)H->data % 16 == 0 && (uintptr_t)fn->data % 16 == 0;
    dim3 grid((unsigned)N, (unsigned)n_chunks);
    if (vec)
        CUDA_TRY(cuda_launch(cb, mhc_project_kernel<true>, grid, MHC_PROJECT_THREADS, 0, cb->pdl, (float *)part.ptr,
                             cuda_act_in(H), fr, S, D));
    else
        CUDA_TRY(cuda_launch(cb, mhc_project_kernel<false>, grid, MHC_PROJECT_THREADS, 0, cb->pdl, (float *)part.ptr,
                             cuda_act_in(H), fr, S, D));
    CUDA_LAUNCHED("mhc_pre (projections)");
    const dim3 mix_grid((unsigned)N, (unsigned)((D + MHC_COLS - 1) / MHC_COLS + 1));   /* + the Sinkhorn block */
    CUDA_TRY(cuda_launch(cb, mhc_mix_kernel, mix_grid, MHC_THREADS, 0, cb->pdl, cuda_act_out(x), (float *)post->data,
                         (float *)comb->data, cuda_act_in(H), (const float *)part.ptr, n_chunks, br, sr, S, D, rms_eps,
                         hc_eps, sinkhorn_iters));
    CUDA_LAUNCHED("mhc_pre (sinkhorn, collapse)");
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
    CUDA_TRY(cuda_launch(cb, mhc_post_kernel, cuda_blocks_for(N * S * D, 256), 256, 0, cb->pdl, cuda_act_out(H_out),
                         cuda_act_in(y), cuda_act_in(H_in), (const float *)post->data, (const float *)comb->data, N, S,
                         D));
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
