/*
 * ops_index.cu - per-row top-k, and row gather / scatter by id, on the CUDA backend.
 *
 * topk: one block per row and k rounds; round r finds, with a block-wide arg-best, the best element that is
 * strictly worse than round r-1's pick in the total order the CPU backend uses (larger value first, the lower
 * index on equal values, NaN after every number and NaNs by index). No scratch, no sort, and the output is the
 * CPU's exactly, ties included; each round reads the row once, which is fine for the small k (<= 64) this op
 * serves. Rows of 154880 logits stay in L2 between rounds.
 *
 * gather_rows / scatter_rows: one thread per element. An id outside the table is recorded in the backend's fault
 * record (reported by the next sync or download as GLM53_ERR_OUT_OF_RANGE); gather writes NaN for that row and
 * scatter skips it, so a bad id never reads or writes outside the tensors.
 */
#include "kernels/cuda/cuda_common.cuh"

enum { TOPK_THREADS = 1024, INDEX_THREADS = 256 };

/* ------------------------------------------------------------------------------------------------------------
 * topk
 */
/* A candidate; index < 0 means none yet. */
struct topk_item {
    float   value;
    int32_t index;
};

/* Is (va, ia) ahead of (vb, ib)? The CPU backend's topk_better. */
__device__ inline bool topk_better(float va, int32_t ia, float vb, int32_t ib) {
    if (isnan(va)) return isnan(vb) && ia < ib;
    if (isnan(vb)) return true;
    return va > vb || (va == vb && ia < ib);
}

__device__ inline topk_item topk_pick(topk_item a, topk_item b) {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    return topk_better(a.value, a.index, b.value, b.index) ? a : b;
}

/* The best item of the block, returned to every thread (the order is strict, so the result does not depend on
 * the combination order). */
__device__ topk_item topk_block_pick(topk_item item) {
    __shared__ float values[32];
    __shared__ int32_t indices[32];
    for (int offset = 16; offset > 0; offset >>= 1) {
        topk_item other = {__shfl_xor_sync(0xffffffffu, item.value, offset),
                           __shfl_xor_sync(0xffffffffu, item.index, offset)};
        item = topk_pick(item, other);
    }
    __syncthreads();   /* the previous round may still be reading values / indices */
    if ((threadIdx.x & 31) == 0) {
        values[threadIdx.x >> 5] = item.value;
        indices[threadIdx.x >> 5] = item.index;
    }
    __syncthreads();
    topk_item best = {0.0f, -1};
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; w++) best = topk_pick(best, topk_item{values[w], indices[w]});
    return best;
}

/* vals[M,k], idx[M,k] from columns [0, n_valid) of x[M,N]; grid: one block per row. */
__global__ void __launch_bounds__(TOPK_THREADS) topk_kernel(float *vals, int32_t *idx, const float *x, int64_t N,
                                                            int64_t n_valid, int32_t k) {
    const float *row = x + (int64_t)blockIdx.x * N;
    topk_item prev = {0.0f, -1};
    for (int32_t r = 0; r < k; r++) {
        topk_item best = {0.0f, -1};
        for (int64_t i = threadIdx.x; i < n_valid; i += blockDim.x) {
            float v = row[i];
            if (prev.index >= 0 && !topk_better(prev.value, prev.index, v, (int32_t)i)) continue;
            best = topk_pick(best, topk_item{v, (int32_t)i});
        }
        best = topk_block_pick(best);
        if (threadIdx.x == 0) {
            vals[(int64_t)blockIdx.x * k + r] = best.value;
            idx[(int64_t)blockIdx.x * k + r] = best.index;
        }
        prev = best;
    }
}

glm53_status cuda_topk(glm53_backend *be, glm53_tensor *vals, glm53_tensor *idx, const glm53_tensor *x, int32_t k,
                       int64_t n_valid) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(x) && x->dtype == GLM53_F32 && cuda_is_act(vals) && vals->dtype == GLM53_F32);
    assert(idx->dtype == GLM53_I32 && idx->data && idx->device == GLM53_DEVICE_CUDA);
    int64_t M = glm53_tensor_rows(x), N = cuda_cols(x);
    if (n_valid <= 0 || n_valid > N) n_valid = N;
    assert(k >= 1 && k <= n_valid && N <= INT32_MAX && M <= INT32_MAX);
    assert(glm53_tensor_numel(vals) == M * k && glm53_tensor_numel(idx) == M * k);
    GLM53_TRY(cuda_enter(cb));
    if (M == 0) return GLM53_OK;
    topk_kernel<<<(unsigned)M, TOPK_THREADS, 0, cb->stream>>>((float *)vals->data, (int32_t *)idx->data,
                                                              (const float *)x->data, N, n_valid, k);
    CUDA_LAUNCHED("topk");
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * gather_rows / scatter_rows
 */
/* y[M,D] = table[ids[m]]; table [V, D] of any weight dtype. */
__global__ void gather_rows_kernel(act_out y, weight_ref table, const int32_t *ids, int64_t M, int64_t D, int64_t V,
                                   cuda_fault *fault) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = i / D, d = i % D;
        int32_t id = ids[m];
        if (id < 0 || id >= V) {
            if (d == 0) cuda_record_fault(fault, CUDA_FAULT_GATHER_ROWS, m, id, V);
            y.store(i, NAN);
            continue;
        }
        y.store(i, table.at(id, d));
    }
}

/* y[ids[m]] = x[m] for rows of D elements; T is an unsigned integer of the element's size (a bit copy). */
template <typename T>
__global__ void scatter_rows_kernel(T *y, const T *x, const int32_t *ids, int64_t M, int64_t D, int64_t V,
                                    cuda_fault *fault) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = i / D, d = i % D;
        int32_t id = ids[m];
        if (id < 0 || id >= V) {
            if (d == 0) cuda_record_fault(fault, CUDA_FAULT_SCATTER_ROWS, m, id, V);
            continue;
        }
        y[(int64_t)id * D + d] = x[i];
    }
}

glm53_status cuda_gather_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *table,
                              const glm53_tensor *ids) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(y));
    assert(table->ndim == 2 && ids->dtype == GLM53_I32 && ids->data && ids->device == GLM53_DEVICE_CUDA);
    int64_t M = glm53_tensor_numel(ids), D = table->shape[1], V = table->shape[0];
    assert(glm53_tensor_rows(y) == M && cuda_cols(y) == D);
    weight_ref tr;
    GLM53_TRY(cuda_weight_ref(table, &tr, "gather_rows"));
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || D == 0) return GLM53_OK;
    gather_rows_kernel<<<cuda_blocks_for(M * D, INDEX_THREADS), INDEX_THREADS, 0, cb->stream>>>(
        cuda_act_out(y), tr, (const int32_t *)ids->data, M, D, V, cb->fault);
    CUDA_LAUNCHED("gather_rows");
    return GLM53_OK;
}

glm53_status cuda_scatter_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids) {
    cuda_backend *cb = cuda_impl(be);
    assert(x->dtype == y->dtype && x->data && y->data);
    assert(x->device == GLM53_DEVICE_CUDA && y->device == GLM53_DEVICE_CUDA);
    assert(glm53_tensor_is_contiguous(x) && glm53_tensor_is_contiguous(y));
    assert(ids->dtype == GLM53_I32 && ids->data && ids->device == GLM53_DEVICE_CUDA);
    int64_t M = glm53_tensor_numel(ids), D = cuda_cols(y), V = glm53_tensor_rows(y);
    assert(glm53_tensor_rows(x) == M && cuda_cols(x) == D);
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || D == 0) return GLM53_OK;
    unsigned blocks = cuda_blocks_for(M * D, INDEX_THREADS);
    const int32_t *id = (const int32_t *)ids->data;
    switch (glm53_dtype_size((glm53_dtype)y->dtype)) {
    case 1:
        scatter_rows_kernel<uint8_t><<<blocks, INDEX_THREADS, 0, cb->stream>>>(
            (uint8_t *)y->data, (const uint8_t *)x->data, id, M, D, V, cb->fault);
        break;
    case 2:
        scatter_rows_kernel<uint16_t><<<blocks, INDEX_THREADS, 0, cb->stream>>>(
            (uint16_t *)y->data, (const uint16_t *)x->data, id, M, D, V, cb->fault);
        break;
    case 4:
        scatter_rows_kernel<uint32_t><<<blocks, INDEX_THREADS, 0, cb->stream>>>(
            (uint32_t *)y->data, (const uint32_t *)x->data, id, M, D, V, cb->fault);
        break;
    case 8:
        scatter_rows_kernel<uint64_t><<<blocks, INDEX_THREADS, 0, cb->stream>>>(
            (uint64_t *)y->data, (const uint64_t *)x->data, id, M, D, V, cb->fault);
        break;
    default:
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda scatter_rows: dtype %s",
                          glm53_dtype_name((glm53_dtype)y->dtype));
    }
    CUDA_LAUNCHED("scatter_rows");
    return GLM53_OK;
}
