/*
 * ops_attention.cu - sparse MLA in absorbed form (glm53-architecture.md section 4.6) on the CUDA backend.
 *
 * One block per (query row t, head h), everything in F32, in five phases separated by barriers:
 *   1. qh[R] = Wk^T q[t,h]         thread r walks the dk key rows of kv_b (coalesced across r)
 *   2. s_j = scale * qh . latent[idx_j]   one warp per selected position, lanes over R, warp reduction
 *   3. p = softmax(s) over the valid positions (-1 entries skipped), block reductions
 *   4. c[R] = sum_j p_j latent[idx_j]      thread r walks the positions in order (coalesced across r)
 *   5. o[t,h,e] = Wv[e] . c           one warp per output channel
 * Shared memory holds q, qh, c, the scores and the positions: (dk + 2R + 2W) * 4 bytes, 15 KiB at the real
 * dims (dk 256, R 512, W 2051). A row with no valid position gets zeros. A position outside the latent cache
 * is recorded as a fault (reported at the next sync) and skipped.
 */
#include "kernels/cuda/cuda_common.cuh"

enum { MLA_THREADS = 256 };

/* q[T,H,dk], latent[cap,R], idx[T,W] I32, kv_b[H*(dk+dv), R] weight, o[T,H,dv]; block = t * H + h. */
__global__ void __launch_bounds__(MLA_THREADS)
sparse_mla_kernel(act_out o, act_in q, act_in latent, const int32_t *idx, weight_ref kv_b, int64_t H, int64_t dk,
                  int64_t dv, int64_t R, int64_t W, int64_t cap, float scale, cuda_fault *fault) {
    extern __shared__ float smem[];
    float *q_s = smem, *qh = q_s + dk, *c = qh + R, *p = c + R;
    int32_t *pos = (int32_t *)(p + W);
    const int64_t t = blockIdx.x / H, h = blockIdx.x % H;
    const int64_t k_row0 = h * (dk + dv), v_row0 = k_row0 + dk;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;

    for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) q_s[i] = q[(t * H + h) * dk + i];
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
        int32_t id = idx[t * W + j];
        if (id >= cap) {
            if (h == 0) cuda_record_fault(fault, CUDA_FAULT_SPARSE_MLA, t * W + j, id, cap);
            id = -1;
        }
        pos[j] = id < 0 ? -1 : id;
    }
    __syncthreads();

    /* 1. qh = Wk^T q */
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int64_t i = 0; i < dk; i++) a += q_s[i] * kv_b.at(k_row0 + i, r);
        qh[r] = a;
    }
    __syncthreads();

    /* 2. scores */
    for (int64_t j = warp; j < W; j += n_warps) {
        if (pos[j] < 0) continue;   /* the same for the whole warp */
        const int64_t row = (int64_t)pos[j] * R;
        float dot = 0.0f;
        for (int64_t r = lane; r < R; r += 32) dot += qh[r] * latent[row + r];
        dot = cuda_warp_sum(dot);
        if (lane == 0) p[j] = dot * scale;
    }
    __syncthreads();

    /* 3. softmax over the valid positions */
    float mx = -INFINITY, valid = 0.0f;
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x)
        if (pos[j] >= 0) {
            mx = fmaxf(mx, p[j]);
            valid += 1.0f;
        }
    mx = cuda_block_max(mx);
    valid = cuda_block_sum(valid);
    if (valid == 0.0f) {   /* no visible position: zeros (uniform across the block) */
        for (int64_t e = threadIdx.x; e < dv; e += blockDim.x) o.store((t * H + h) * dv + e, 0.0f);
        return;
    }
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < W; j += blockDim.x) {
        float e = pos[j] >= 0 ? expf(p[j] - mx) : 0.0f;
        p[j] = e;
        sum += e;
    }
    sum = cuda_block_sum(sum);   /* its barriers also publish the p[j] writes */

    /* 4. c = sum_j p_j latent[pos_j] */
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int64_t j = 0; j < W; j++)
            if (pos[j] >= 0) a += (p[j] / sum) * latent[(int64_t)pos[j] * R + r];
        c[r] = a;
    }
    __syncthreads();

    /* 5. o = Wv c */
    for (int64_t e = warp; e < dv; e += n_warps) {
        float dot = 0.0f;
        for (int64_t r = lane; r < R; r += 32) dot += kv_b.at(v_row0 + e, r) * c[r];
        dot = cuda_warp_sum(dot);
        if (lane == 0) o.store((t * H + h) * dv + e, dot);
    }
}

glm53_status cuda_sparse_mla(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *latent,
                             const glm53_tensor *idx, const glm53_tensor *kv_b, float scale) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(o) && cuda_is_act(q) && cuda_is_act(latent) && q->ndim == 3 && o->ndim == 3);
    assert(idx->dtype == GLM53_I32 && idx->data && idx->device == GLM53_DEVICE_CUDA && idx->ndim == 2);
    int64_t T = q->shape[0], H = q->shape[1], dk = q->shape[2], dv = o->shape[2];
    int64_t R = cuda_cols(latent), cap = glm53_tensor_rows(latent), W = idx->shape[1];
    assert(o->shape[0] == T && o->shape[1] == H && idx->shape[0] == T);
    assert(kv_b->ndim == 2 && kv_b->shape[0] == H * (dk + dv) && kv_b->shape[1] == R);
    assert(T * H <= INT32_MAX);
    weight_ref kr;
    GLM53_TRY(cuda_weight_ref(kv_b, &kr, "sparse_mla"));
    GLM53_TRY(cuda_enter(cb));
    if (T * H == 0) return GLM53_OK;
    size_t smem = (size_t)(dk + 2 * R + 2 * W) * sizeof(float);
    GLM53_TRY(cuda_smem_optin(cb, (const void *)sparse_mla_kernel, smem, "sparse_mla"));
    sparse_mla_kernel<<<(unsigned)(T * H), MLA_THREADS, smem, cb->stream>>>(
        cuda_act_out(o), cuda_act_in(q), cuda_act_in(latent), (const int32_t *)idx->data, kr, H, dk, dv, R, W, cap,
        scale, cb->fault);
    CUDA_LAUNCHED("sparse_mla");
    return GLM53_OK;
}
