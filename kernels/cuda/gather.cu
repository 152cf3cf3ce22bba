/*
 * gather.cu - per-row top-k, and row gather / scatter by id, on the CUDA backend.
 *
 * topk: the CPU backend's output exactly, ties included, in its total order (larger value first, the lower index
 * on equal values, NaN after every number and NaNs by index). topk_key maps (value, column) to a 64-bit unsigned
 * key whose order is that order, so "the best" is an integer max: a warp takes it with two redux instructions
 * instead of five rounds of shuffles and comparisons.
 *   Stage 1, a block per (slice of TOPK_SLICE columns, row): the slice goes into registers with every load in
 *   flight (float4 when the row allows it), then k rounds of a block-wide max emit the slice's k best in order.
 *   A round redoes only what its pick changed: the thread that held the pick rescans its own items for the best
 *   one below it and only that thread's warp reduces again; every other thread's best is still the best of what
 *   it has left, because the pick was ahead of it.
 *   Stage 2, a block per row: the same rounds over the parts' k candidates each (scratch [rows, parts, k]). A
 *   row of a single part skips it: stage 1 writes the output.
 * The kernel before this one (one block per row, k passes over the whole row) was latency bound: 42.8 us for
 * k = 1 over the 154880 logits of a decode step on an H100, each thread walking 151 strided elements one load
 * at a time. Now the row is read once, by ~76 blocks with all their loads in flight, and the second launch
 * overlaps the first's tail (programmatic dependent launch).
 *
 * gather_rows / scatter_rows: one thread per element. An id outside the table is recorded in the backend's fault
 * record (reported by the next sync or download as GLM53_ERR_OUT_OF_RANGE); gather writes NaN for that row and
 * scatter skips it, so a bad id never reads or writes outside the tensors.
 */
#include "kernels/cuda/cuda_common.cuh"

enum {
    TOPK_THREADS = 256,                       /* stage 1 block */
    TOPK_ITEMS = 8,                           /* columns one stage-1 thread holds: two float4 */
    TOPK_SLICE = TOPK_THREADS * TOPK_ITEMS,   /* columns per stage-1 block */
    TOPK_MERGE_THREADS = 1024,                /* stage 2 block */
    INDEX_THREADS = 256,
};
static const int64_t TOPK_MAX_GRID_Y = 65535;                 /* gridDim.y limit: rows per stage-1 launch */
static const size_t  TOPK_SCRATCH_BUDGET = (size_t)16 << 20;   /* candidate bytes per chunk of rows */

/* ------------------------------------------------------------------------------------------------------------
 * topk
 */
/* The op's order as an unsigned key, larger = ahead; 0 = no item. High word: the value's order-preserving bits,
 * with -0 as +0 (they are equal, so the index decides, as in the CPU's topk_better) and NaN as 0, below every
 * number (no number maps to 0: only a NaN bit pattern would). Low word: ~index, so the lower index is ahead on
 * equal values and among NaNs. An item's low word is >= 2^31 (index >= 0), so its key is never 0. */
__device__ inline uint64_t topk_key(float value, int32_t index) {
    const uint32_t u = __float_as_uint(value);
    uint32_t hi;
    if (isnan(value)) hi = 0u;
    else if (value == 0.0f) hi = 0x80000000u;
    else hi = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)hi << 32) | (uint32_t)~index;
}

/* The largest key of the warp, to every lane; all 32 lanes must call it. */
__device__ inline uint64_t topk_warp_max(uint64_t key) {
    const uint32_t hi = __reduce_max_sync(0xffffffffu, (uint32_t)(key >> 32));
    const uint32_t lo = __reduce_max_sync(0xffffffffu, (uint32_t)(key >> 32) == hi ? (uint32_t)key : 0u);
    return ((uint64_t)hi << 32) | lo;
}

/* k rounds of the block's best: round r writes the r-th best of the block's items to out_v[r], out_i[r]; when the
 * items run out first (a slice shorter than k) the remaining slots get index -1. Items::best_below(prev, &value)
 * is this thread's best key below prev (0 for none) and its value. Keys are distinct, so exactly one thread holds
 * a round's pick. warp_keys is double-buffered by round parity: a warp writes buffer r & 1 only after passing the
 * barrier of round r - 1, which every warp reaches after reading that buffer in round r - 2. */
template <typename Items>
__device__ void topk_rounds(const Items &items, int32_t k, float *out_v, int32_t *out_i) {
    __shared__ uint64_t warp_keys[2][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    float value;
    uint64_t key = items.best_below(~0ull, &value);
    uint64_t warp_best = topk_warp_max(key);
    for (int32_t r = 0; r < k; r++) {
        if (lane == 0) warp_keys[r & 1][warp] = warp_best;
        __syncthreads();
        const uint64_t best = topk_warp_max(lane < n_warps ? warp_keys[r & 1][lane] : 0ull);   /* same everywhere */
        if (best == 0) {
            for (int32_t s = r + threadIdx.x; s < k; s += blockDim.x) out_v[s] = 0.0f, out_i[s] = -1;
            return;
        }
        const bool last = r + 1 == k;
        if (key == best) {
            out_v[r] = value;
            out_i[r] = (int32_t)~(uint32_t)best;
            if (!last) key = items.best_below(best, &value);
        }
        if (!last && warp_best == best) warp_best = topk_warp_max(key);   /* warp-uniform condition */
    }
}

/* A stage-1 thread's columns: their values and keys (0 for a column outside the slice or past n_valid). */
struct topk_slice_items {
    float    v[TOPK_ITEMS];
    uint64_t key[TOPK_ITEMS];
    __device__ uint64_t best_below(uint64_t prev, float *value) const {
        uint64_t best = 0;
        float best_v = 0.0f;
#pragma unroll
        for (int j = 0; j < TOPK_ITEMS; j++)
            if (key[j] < prev && key[j] > best) best = key[j], best_v = v[j];
        *value = best_v;
        return best;
    }
};

/* Stage 1. grid (parts, rows of this launch): block (p, y) takes columns [p * TOPK_SLICE, (p + 1) * TOPK_SLICE)
 * of [0, n_valid) of row r0 + y of x[M,N], and writes their k best to out_v, out_i [rows, parts, k] (the output
 * [rows, k] itself when parts == 1). VEC: N % 4 == 0 and x 16-byte aligned, so every float4 of a row is aligned
 * and one that starts below n_valid ends inside the row. Thread t holds columns 4 (t + q TOPK_THREADS) + e
 * (VEC) or t + j TOPK_THREADS of the slice. */
template <bool VEC>
__global__ void __launch_bounds__(TOPK_THREADS) topk_slice_kernel(float *out_v, int32_t *out_i, const float *x,
                                                                  int64_t N, int64_t n_valid, int32_t k, int64_t r0) {
    cuda_pdl_begin();
    const float *row = x + (r0 + blockIdx.y) * N;
    const int64_t begin = (int64_t)blockIdx.x * TOPK_SLICE;
    const int64_t end = begin + TOPK_SLICE < n_valid ? begin + TOPK_SLICE : n_valid;
    topk_slice_items items;
    int64_t col[TOPK_ITEMS];
    if (VEC) {
#pragma unroll
        for (int q = 0; q < TOPK_ITEMS / 4; q++) {
            const int64_t c = begin + 4 * (threadIdx.x + q * TOPK_THREADS);
            const float4 f = c < end ? *reinterpret_cast<const float4 *>(row + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            items.v[4 * q] = f.x, items.v[4 * q + 1] = f.y, items.v[4 * q + 2] = f.z, items.v[4 * q + 3] = f.w;
#pragma unroll
            for (int e = 0; e < 4; e++) col[4 * q + e] = c + e;
        }
    } else {
#pragma unroll
        for (int j = 0; j < TOPK_ITEMS; j++) {
            col[j] = begin + threadIdx.x + j * TOPK_THREADS;
            items.v[j] = col[j] < end ? row[col[j]] : 0.0f;
        }
    }
#pragma unroll
    for (int j = 0; j < TOPK_ITEMS; j++) items.key[j] = col[j] < end ? topk_key(items.v[j], (int32_t)col[j]) : 0ull;
    const int64_t out = ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * k;
    topk_rounds(items, k, out_v + out, out_i + out);
}

/* A stage-2 thread's candidates: c = threadIdx.x, + blockDim.x, ... of the row's n (index -1: none), read again
 * from scratch (L1) by the one thread that rescans each round. */
struct topk_merge_items {
    const float   *v;
    const int32_t *i;
    int64_t        n;
    __device__ uint64_t best_below(uint64_t prev, float *value) const {
        uint64_t best = 0;
        float best_v = 0.0f;
#pragma unroll 4
        for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
            const float val = v[c];
            const int32_t index = i[c];
            const uint64_t key = index < 0 ? 0ull : topk_key(val, index);
            if (key < prev && key > best) best = key, best_v = val;
        }
        *value = best_v;
        return best;
    }
};

/* Stage 2. grid: rows of this launch; block y merges cand_v, cand_i [rows, n_cand] (n_cand = parts * k) into
 * vals, idx [rows, k]. */
__global__ void __launch_bounds__(TOPK_MERGE_THREADS) topk_merge_kernel(float *vals, int32_t *idx, const float *cand_v,
                                                                        const int32_t *cand_i, int64_t n_cand,
                                                                        int32_t k) {
    cuda_pdl_begin();
    const topk_merge_items items = {cand_v + blockIdx.x * n_cand, cand_i + blockIdx.x * n_cand, n_cand};
    topk_rounds(items, k, vals + (int64_t)blockIdx.x * k, idx + (int64_t)blockIdx.x * k);
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
    float *vv = (float *)vals->data;
    int32_t *iv = (int32_t *)idx->data;
    const float *xv = (const float *)x->data;
    const bool vec = N % 4 == 0 && (uintptr_t)xv % 16 == 0;
    void (*slice_kernel)(float *, int32_t *, const float *, int64_t, int64_t, int32_t, int64_t) =
        vec ? topk_slice_kernel<true> : topk_slice_kernel<false>;
    const int64_t parts = (n_valid + TOPK_SLICE - 1) / TOPK_SLICE;
    if (parts == 1) {   /* stage 1 alone: its block's k best are the row's */
        for (int64_t r0 = 0; r0 < M; r0 += TOPK_MAX_GRID_Y) {
            const int64_t rows = M - r0 < TOPK_MAX_GRID_Y ? M - r0 : TOPK_MAX_GRID_Y;
            CUDA_TRY(cuda_launch(cb, slice_kernel, dim3(1, (unsigned)rows), TOPK_THREADS, 0, cb->pdl, vv + r0 * k,
                                 iv + r0 * k, xv, N, n_valid, k, r0));
            CUDA_LAUNCHED("topk");
        }
        return GLM53_OK;
    }
    /* Rows go in chunks whose candidates fit the budget (at least one row; at most one stage-1 grid's). */
    const int64_t n_cand = parts * k, cand_bytes = n_cand * (int64_t)(sizeof(float) + sizeof(int32_t));
    int64_t chunk = (int64_t)TOPK_SCRATCH_BUDGET / cand_bytes;
    if (chunk < 1) chunk = 1;
    if (chunk > M) chunk = M;
    if (chunk > TOPK_MAX_GRID_Y) chunk = TOPK_MAX_GRID_Y;
    cuda_scratch cand;
    GLM53_TRY(cand.get(cb, (size_t)(chunk * cand_bytes), "topk candidates"));
    float *cv = (float *)cand.ptr;
    int32_t *ci = (int32_t *)(cv + chunk * n_cand);
    for (int64_t r0 = 0; r0 < M; r0 += chunk) {
        const int64_t rows = M - r0 < chunk ? M - r0 : chunk;
        CUDA_TRY(cuda_launch(cb, slice_kernel, dim3((unsigned)parts, (unsigned)rows), TOPK_THREADS, 0, cb->pdl, cv, ci,
                             xv, N, n_valid, k, r0));
        CUDA_LAUNCHED("topk (slices)");
        CUDA_TRY(cuda_launch(cb, topk_merge_kernel, dim3((unsigned)rows), TOPK_MERGE_THREADS, 0, cb->pdl, vv + r0 * k,
                             iv + r0 * k, (const float *)cv, (const int32_t *)ci, n_cand, k));
        CUDA_LAUNCHED("topk (merge)");
    }
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * gather_rows / scatter_rows
 */
/* y[M,D] = table[ids[m]]; table [V, D] of any weight dtype. */
__global__ void gather_rows_kernel(act_out y, weight_ref table, const int32_t *ids, int64_t M, int64_t D, int64_t V,
                                   cuda_fault *fault) {
    cuda_pdl_begin();
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
    cuda_pdl_begin();
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
    CUDA_TRY(cuda_launch(cb, gather_rows_kernel, cuda_blocks_for(M * D, INDEX_THREADS), INDEX_THREADS, 0, cb->pdl,
                         cuda_act_out(y), tr, (const int32_t *)ids->data, M, D, V, cb->fault));
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
        CUDA_TRY(cuda_launch(cb, scatter_rows_kernel<uint8_t>, blocks, INDEX_THREADS, 0, cb->pdl, (uint8_t *)y->data,
                             (const uint8_t *)x->data, id, M, D, V, cb->fault));
        break;
    case 2:
        CUDA_TRY(cuda_launch(cb, scatter_rows_kernel<uint16_t>, blocks, INDEX_THREADS, 0, cb->pdl, (uint16_t *)y->data,
                             (const uint16_t *)x->data, id, M, D, V, cb->fault));
        break;
    case 4:
        CUDA_TRY(cuda_launch(cb, scatter_rows_kernel<uint32_t>, blocks, INDEX_THREADS, 0, cb->pdl, (uint32_t *)y->data,
                             (const uint32_t *)x->data, id, M, D, V, cb->fault));
        break;
    case 8:
        CUDA_TRY(cuda_launch(cb, scatter_rows_kernel<uint64_t>, blocks, INDEX_THREADS, 0, cb->pdl, (uint64_t *)y->data,
                             (const uint64_t *)x->data, id, M, D, V, cb->fault));
        break;
    default:
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda scatter_rows: dtype %s",
                          glm53_dtype_name((glm53_dtype)y->dtype));
    }
    CUDA_LAUNCHED("scatter_rows");
    return GLM53_OK;
}
