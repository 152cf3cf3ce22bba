/*
 * kpool_indexer.cu - the KPool "lightning" indexer (glm53-architecture.md section 4.7) on the CUDA backend: pool
 * compression, scoring of closed pools, and the per-row selection of positions.
 *
 * kpool_compress: one thread per (pool, channel), a softmax over the P slots in F32.
 * kpool_score: a block per (query row, 32 pools); the row's Q [Hi, dI] and head weights sit in shared memory,
 *   a warp scores one pool at a time (the key read once into registers, a warp sum per head). A thread per
 *   pool, as before, ran 302 us per decode call at the real dims (a serial 4096-term loop per thread).
 * kpool_select: a block per query row. When every closed pool fits the budget the answer is 0 .. G*P-1.
 *   Otherwise a radix select over the scores' order-preserving 32-bit keys (four passes of 8 bits, a shared
 *   histogram each) finds the key of the n_select-th best pool and how many pools with exactly that key are
 *   still needed; one more ordered pass keeps every pool above that key and the lowest-index ones at it (ties
 *   to the lower pool, as the contract says), compacting them with block scans. The selected pools come out in
 *   ascending pool order (the contract fixes the set, not the order: the CPU backend emits its heap order).
 */
#include "kernels/cuda/cuda_common.cuh"

#include <cub/block/block_scan.cuh>

enum {
    SCORE_THREADS = 256,
    SCORE_POOLS = 32,      /* pools per kpool_score block: 4 per warp */
    SCORE_KEY_REGS = 4,    /* key channels a lane keeps in registers: dI <= 128 */
    SELECT_THREADS = 256,
};
static const int64_t MAX_GRID_Y = 65535;   /* gridDim.y limit: longer score launches are split */

/* ------------------------------------------------------------------------------------------------------------
 * kpool_compress
 */
/* pooled[G,dI] F32; kappa, sigma [G*P, dI] activations; ape [P, dI] weight.
 *   a_i = sigma[g*P+i][c] + ape[i][c];  pi = softmax_i(a);  pooled[g][c] = sum_i pi_i kappa[g*P+i][c]. */
__global__ void kpool_compress_kernel(float *pooled, act_in kappa, act_in sigma, weight_ref ape, int64_t G,
                                      int64_t dI, int64_t P) {
    for (int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; item < G * dI;
         item += (int64_t)gridDim.x * blockDim.x) {
        int64_t g = item / dI, c = item % dI;
        float mx = -INFINITY;
        for (int64_t i = 0; i < P; i++) mx = fmaxf(mx, sigma[(g * P + i) * dI + c] + ape.at(i, c));
        float sum = 0.0f;
        for (int64_t i = 0; i < P; i++) sum += expf(sigma[(g * P + i) * dI + c] + ape.at(i, c) - mx);
        float acc = 0.0f;
        for (int64_t i = 0; i < P; i++)
            acc += (expf(sigma[(g * P + i) * dI + c] + ape.at(i, c) - mx) / sum) * kappa[(g * P + i) * dI + c];
        pooled[item] = acc;
    }
}

glm53_status cuda_kpool_compress(glm53_backend *be, glm53_tensor *pooled, const glm53_tensor *kappa,
                                 const glm53_tensor *sigma, const glm53_tensor *ape) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(pooled) && pooled->dtype == GLM53_F32 && cuda_is_act(kappa) && cuda_is_act(sigma));
    assert(ape->ndim == 2);
    int64_t G = glm53_tensor_rows(pooled), dI = cuda_cols(pooled), P = ape->shape[0];
    assert(ape->shape[1] == dI && glm53_tensor_numel(kappa) == G * P * dI && glm53_tensor_numel(sigma) == G * P * dI);
    weight_ref ar;
    GLM53_TRY(cuda_weight_ref(ape, &ar, "kpool_compress"));
    GLM53_TRY(cuda_enter(cb));
    if (G * dI == 0) return GLM53_OK;
    kpool_compress_kernel<<<cuda_blocks_for(G * dI, 256), 256, 0, cb->stream>>>(
        (float *)pooled->data, cuda_act_in(kappa), cuda_act_in(sigma), ar, G, dI, P);
    CUDA_LAUNCHED("kpool_compress");
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * kpool_score
 */
/* grid (ceil(G / SCORE_POOLS), rows of this launch); row t = t0 + blockIdx.y; SCORE_THREADS / 32 warps, warp w
 * scores the pools g = blockIdx.x * SCORE_POOLS + w + k * (SCORE_THREADS / 32). Dynamic shared memory: Q_t [Hi*dI],
 * w_t [Hi]. For one pool the warp reads the key once (lane l holds channels l, l + 32, ... in registers when
 * dI <= 32 * SCORE_KEY_REGS), and per head the lanes' partial products are summed by cuda_warp_sum:
 *   scores[t][g] = sum_h w[t][h] relu(scale * Q[t,h] . pooled[g])  for g < n_closed[t], else -inf. */
__global__ void __launch_bounds__(SCORE_THREADS)
kpool_score_kernel(float *scores, act_in Q, const float *w, const float *pooled, const int32_t *n_closed,
                   int64_t t0, int64_t G, int64_t Hi, int64_t dI, float scale) {
    extern __shared__ float smem[];
    float *q_t = smem, *w_t = smem + Hi * dI;
    const int64_t t = t0 + blockIdx.y;
    for (int64_t i = threadIdx.x; i < Hi * dI; i += blockDim.x) q_t[i] = Q[t * Hi * dI + i];
    for (int64_t i = threadIdx.x; i < Hi; i += blockDim.x) w_t[i] = w[t * Hi + i];
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = SCORE_THREADS / 32;
    const int64_t closed = n_closed[t];
    const bool in_regs = dI <= 32 * SCORE_KEY_REGS;
    for (int k = 0; k < SCORE_POOLS / n_warps; k++) {
        const int64_t g = (int64_t)blockIdx.x * SCORE_POOLS + warp + (int64_t)k * n_warps;
        if (g >= G) break;
        if (g >= closed) {
            if (lane == 0) scores[t * G + g] = -INFINITY;
            continue;
        }
        const float *key = pooled + g * dI;
        float kv[SCORE_KEY_REGS];
#pragma unroll
        for (int r = 0; r < SCORE_KEY_REGS; r++) kv[r] = in_regs && lane + 32 * r < dI ? key[lane + 32 * r] : 0.0f;
        float s = 0.0f;
        for (int64_t h = 0; h < Hi; h++) {
            const float *qh = q_t + h * dI;
            float part = 0.0f;
            if (in_regs) {
#pragma unroll
                for (int r = 0; r < SCORE_KEY_REGS; r++)
                    if (lane + 32 * r < dI) part += qh[lane + 32 * r] * kv[r];
            } else {
                for (int64_t d = lane; d < dI; d += 32) part += qh[d] * key[d];
            }
            float dot = cuda_warp_sum(part) * scale;
            s += w_t[h] * (dot > 0.0f ? dot : 0.0f);
        }
        if (lane == 0) scores[t * G + g] = s;
    }
}

glm53_status cuda_kpool_score(glm53_backend *be, glm53_tensor *scores, const glm53_tensor *Q,
                              const glm53_tensor *w, const glm53_tensor *pooled, const glm53_tensor *n_closed,
                              float scale) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(scores) && scores->dtype == GLM53_F32 && cuda_is_act(Q) && Q->ndim == 3);
    assert(cuda_is_act(w) && w->dtype == GLM53_F32 && cuda_is_act(pooled) && pooled->dtype == GLM53_F32);
    assert(n_closed->dtype == GLM53_I32 && n_closed->data && n_closed->device == GLM53_DEVICE_CUDA);
    int64_t T = Q->shape[0], Hi = Q->shape[1], dI = Q->shape[2], G = cuda_cols(scores);
    assert(glm53_tensor_rows(scores) == T && glm53_tensor_numel(w) == T * Hi);
    assert(cuda_cols(pooled) == dI && glm53_tensor_rows(pooled) >= G && glm53_tensor_numel(n_closed) == T);
    GLM53_TRY(cuda_enter(cb));
    if (T == 0 || G == 0) return GLM53_OK;
    size_t smem = (size_t)(Hi * dI + Hi) * sizeof(float);
    GLM53_TRY(cuda_smem_optin(cb, (const void *)kpool_score_kernel, smem, "kpool_score"));
    for (int64_t t0 = 0; t0 < T; t0 += MAX_GRID_Y) {
        int64_t rows = T - t0 < MAX_GRID_Y ? T - t0 : MAX_GRID_Y;
        dim3 grid((unsigned)((G + SCORE_POOLS - 1) / SCORE_POOLS), (unsigned)rows);
        kpool_score_kernel<<<grid, SCORE_THREADS, smem, cb->stream>>>(
            (float *)scores->data, cuda_act_in(Q), (const float *)w->data, (const float *)pooled->data,
            (const int32_t *)n_closed->data, t0, G, Hi, dI, scale);
        CUDA_LAUNCHED("kpool_score");
    }
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * kpool_select
 */
/* An unsigned key whose order is the selection order of scores: larger is better, -0 equals +0, and NaN (key 0)
 * is below every number (no number maps to 0: only a negative NaN would). */
__device__ inline uint32_t score_key(float f) {
    if (isnan(f)) return 0u;
    if (f == 0.0f) f = 0.0f;
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* One block per row t. idx[T, W] I32; scores[T, G] F32; pos[T] I32. */
__global__ void __launch_bounds__(SELECT_THREADS)
kpool_select_kernel(int32_t *idx, const float *scores, const int32_t *pos, int64_t G, int64_t W, int32_t P,
                    int32_t n_select, bool with_tail, cuda_fault *fault) {
    typedef cub::BlockScan<int32_t, SELECT_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage scan_storage;
    __shared__ uint32_t hist[256];
    __shared__ uint32_t chosen_prefix, chosen_remaining;

    const int64_t t = blockIdx.x;
    int32_t *out = idx + t * W;
    const float *row = scores + t * G;
    const int64_t L = (int64_t)pos[t] + 1;                  /* visible tokens */
    const int64_t closed = L > 0 ? L / P : 0;                /* closed pools */

    int64_t written = 0;
    if (closed <= n_select) {
        for (int64_t i = threadIdx.x; i < closed * P; i += blockDim.x) out[i] = (int32_t)i;
        written = closed * P;
    } else if (closed > G) {   /* scores too narrow to rank this row's pools: a caller bug, reported at sync */
        if (threadIdx.x == 0) cuda_record_fault(fault, CUDA_FAULT_KPOOL_SELECT, t, closed, G + 1);
    } else {
        /* Radix select, most significant byte first: after the pass of byte b, `prefix` holds the top bytes of
         * the n_select-th best key and `remaining` how many keys with exactly those top bytes are still needed. */
        uint32_t prefix = 0, mask = 0, remaining = (uint32_t)n_select;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
            __syncthreads();
            for (int64_t g = threadIdx.x; g < closed; g += blockDim.x) {
                uint32_t key = score_key(row[g]);
                if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                uint32_t above = 0;
                for (int b = 255; b >= 0; b--) {
                    if (above + hist[b] >= remaining) {
                        chosen_prefix = prefix | ((uint32_t)b << shift);
                        chosen_remaining = remaining - above;
                        break;
                    }
                    above += hist[b];
                }
            }
            __syncthreads();
            prefix = chosen_prefix;
            remaining = chosen_remaining;
            mask |= 0xffu << shift;
        }
        /* prefix is now the threshold key: take every key above it and the first `remaining` (by pool index)
         * equal to it, in ascending pool order. */
        int32_t equal_seen = 0, selected = 0;
        for (int64_t chunk = 0; chunk < closed; chunk += blockDim.x) {
            int64_t g = chunk + threadIdx.x;
            uint32_t key = g < closed ? score_key(row[g]) : 0u;
            int32_t is_equal = g < closed && key == prefix;
            int32_t equal_rank, equal_total;   /* rank among this chunk's equal keys; their count */
            scan_t(scan_storage).ExclusiveSum(is_equal, equal_rank, equal_total);
            __syncthreads();
            int32_t take = g < closed && (key > prefix || (is_equal && equal_seen + equal_rank < (int32_t)remaining));
            int32_t slot, take_total;
            scan_t(scan_storage).ExclusiveSum(take, slot, take_total);
            __syncthreads();
            if (take)
                for (int32_t i = 0; i < P; i++) out[(int64_t)(selected + slot) * P + i] = (int32_t)(g * P + i);
            equal_seen += equal_total;
            selected += take_total;
        }
        written = (int64_t)n_select * P;
    }

    if (with_tail) {   /* the open pool: positions closed*P .. L-1 */
        int64_t tail = L - closed * P;
        for (int64_t i = threadIdx.x; i < tail; i += blockDim.x) out[written + i] = (int32_t)(closed * P + i);
        written += tail > 0 ? tail : 0;
    }
    for (int64_t i = written + threadIdx.x; i < W; i += blockDim.x) out[i] = -1;
}

glm53_status cuda_kpool_select(glm53_backend *be, glm53_tensor *idx, const glm53_tensor *scores,
                               const glm53_tensor *pos, int32_t pool_size, int32_t n_select, int32_t with_tail) {
    cuda_backend *cb = cuda_impl(be);
    assert(idx->dtype == GLM53_I32 && idx->data && idx->device == GLM53_DEVICE_CUDA && idx->ndim == 2);
    assert(pos->dtype == GLM53_I32 && pos->data && pos->device == GLM53_DEVICE_CUDA);
    assert(cuda_is_act(scores) && scores->dtype == GLM53_F32);
    int64_t T = idx->shape[0], W = idx->shape[1], G = cuda_cols(scores);
    assert(pool_size >= 1 && n_select >= 1);
    assert(W == (int64_t)n_select * pool_size + (with_tail ? pool_size - 1 : 0));
    assert(glm53_tensor_numel(pos) == T && glm53_tensor_rows(scores) == T && T <= INT32_MAX);
    GLM53_TRY(cuda_enter(cb));
    if (T == 0) return GLM53_OK;
    kpool_select_kernel<<<(unsigned)T, SELECT_THREADS, 0, cb->stream>>>(
        (int32_t *)idx->data, (const float *)scores->data, (const int32_t *)pos->data, G, W, pool_size, n_select,
        with_tail != 0, cb->fault);
    CUDA_LAUNCHED("kpool_select");
    return GLM53_OK;
}
