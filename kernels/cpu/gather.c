/*
 * ops_index.c - top-k selection per row, and row gather / scatter by id (embedding lookup, cache writes).
 *
 * topk keeps a binary heap of the k best candidates so far, stored in the output row itself (no scratch), with
 * the worst candidate at the root: each new element costs one comparison unless it beats the root. The order is
 * total: a larger value wins, equal values go to the lower index, NaN loses to every number (so NaN is only
 * returned when a row has fewer than k numbers; then the NaNs come last, lowest index first). A final heap sort
 * leaves the row in descending order. Rows are independent and split over the pool.
 *
 * gather_rows and scatter_rows check every id before touching memory: ids come from token ids and cache slots,
 * where an out-of-range value is bad input, so it is reported rather than asserted.
 */
#include "kernels/cpu/cpu_ops.h"

/* ------------------------------------------------------------------------------------------------------------
 * topk
 */
static inline bool topk_better(float va, int32_t ia, float vb, int32_t ib) {
    if (isnan(va)) return isnan(vb) && ia < ib;
    if (isnan(vb)) return true;
    return va > vb || (va == vb && ia < ib);
}

/* Restores the heap property below `node` in a heap of n entries whose root is the worst entry. */
static void topk_sift_down(float *vals, int32_t *idx, int32_t n, int32_t node) {
    for (;;) {
        int32_t worst = node, left = 2 * node + 1, right = left + 1;
        if (left < n && topk_better(vals[worst], idx[worst], vals[left], idx[left])) worst = left;
        if (right < n && topk_better(vals[worst], idx[worst], vals[right], idx[right])) worst = right;
        if (worst == node) return;
        float v = vals[node];
        int32_t i = idx[node];
        vals[node] = vals[worst], idx[node] = idx[worst];
        vals[worst] = v, idx[worst] = i;
        node = worst;
    }
}

typedef struct topk_job {
    float       *vals;   /* [M, k] */
    int32_t     *idx;    /* [M, k] */
    const float *x;      /* [M, N] */
    int64_t      n;      /* row stride */
    int64_t      n_valid;   /* columns that compete */
    int32_t      k;
} topk_job;

static void topk_rows(void *ctx, int64_t begin, int64_t end) {
    const topk_job *job = ctx;
    const int32_t k = job->k;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * job->n;
        float *vals = job->vals + r * k;
        int32_t *idx = job->idx + r * k;
        for (int32_t i = 0; i < k; i++) vals[i] = x[i], idx[i] = i;
        for (int32_t node = k / 2 - 1; node >= 0; node--) topk_sift_down(vals, idx, k, node);
        for (int64_t i = k; i < job->n_valid; i++) {
            if (!topk_better(x[i], (int32_t)i, vals[0], idx[0])) continue;
            vals[0] = x[i], idx[0] = (int32_t)i;
            topk_sift_down(vals, idx, k, 0);
        }
        /* Heap sort: moving the root (the worst left) to the end each time yields descending order. */
        for (int32_t last = k - 1; last > 0; last--) {
            float v = vals[0];
            int32_t i = idx[0];
            vals[0] = vals[last], idx[0] = idx[last];
            vals[last] = v, idx[last] = i;
            topk_sift_down(vals, idx, last, 0);
        }
    }
}

/* vals[M,k] F32, idx[M,k] I32 = the k largest of columns [0, n_valid) of each row of x[M,N], descending;
 * 1 <= k <= n_valid (n_valid <= 0 or > N: N). */
glm53_status cpu_topk(glm53_backend *be, glm53_tensor *vals, glm53_tensor *idx, const glm53_tensor *x, int32_t k,
                      int64_t n_valid) {
    assert(cpu_is_f32(x) && cpu_is_f32(vals));
    assert(idx->dtype == GLM53_I32 && idx->data && glm53_tensor_is_contiguous(idx));
    int64_t M = glm53_tensor_rows(x), N = cpu_cols(x);
    if (n_valid <= 0 || n_valid > N) n_valid = N;
    assert(k >= 1 && k <= n_valid && N <= INT32_MAX);
    assert(glm53_tensor_numel(vals) == M * k && glm53_tensor_numel(idx) == M * k);
    topk_job job = {.vals = vals->data, .idx = idx->data, .x = x->data, .n = N, .n_valid = n_valid, .k = k};
    cpu_parallel_for(be, M, 4 * n_valid, topk_rows, &job);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * gather_rows / scatter_rows
 */
static glm53_status check_ids(const glm53_tensor *ids, int64_t n_rows, const char *op) {
    const int32_t *id = ids->data;
    int64_t M = glm53_tensor_numel(ids);
    for (int64_t m = 0; m < M; m++)
        if (id[m] < 0 || id[m] >= n_rows)
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "cpu %s: id %d at position %lld is outside [0, %lld)", op,
                              id[m], (long long)m, (long long)n_rows);
    return GLM53_OK;
}

typedef struct gather_job {
    float              *y;       /* [M, D] */
    const glm53_tensor *table;   /* [V, D] */
    const int32_t      *ids;     /* [M] */
    const float        *fp8_table;
    int64_t             d;
} gather_job;

static void gather_range(void *ctx, int64_t begin, int64_t end) {
    const gather_job *job = ctx;
    for (int64_t m = begin; m < end; m++)
        cpu_weight_row_to_f32(job->table, job->fp8_table, job->ids[m], 0, job->d, job->y + m * job->d);
}

/* y[M,D] = table[ids[m]]; table [V,D] of any weight dtype (FP8 with its scale); ids I32 [M]. */
glm53_status cpu_gather_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *table,
                             const glm53_tensor *ids) {
    assert(cpu_is_f32(y));
    assert(table->ndim == 2 && table->data && glm53_tensor_is_contiguous(table));
    assert(ids->dtype == GLM53_I32 && ids->data);
    int64_t M = glm53_tensor_numel(ids), D = table->shape[1];
    assert(glm53_tensor_rows(y) == M && cpu_cols(y) == D);
    if (!cpu_weight_supported(table))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cpu gather_rows: table %s has dtype %s (or a malformed FP8 "
                          "scale)", table->name ? table->name : "(unnamed)",
                          glm53_dtype_name((glm53_dtype)table->dtype));
    GLM53_TRY(check_ids(ids, table->shape[0], "gather_rows"));
    gather_job job = {.y = y->data, .table = table, .ids = ids->data, .fp8_table = cpu_impl(be)->fp8_table,
                      .d = D};
    cpu_parallel_for(be, M, D, gather_range, &job);
    return GLM53_OK;
}

/* y[ids[m]] = x[m]; y[V,D], x[M,D] of the same dtype, ids I32 [M] distinct. */
glm53_status cpu_scatter_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids) {
    assert(x->dtype == y->dtype && x->data && y->data);
    assert(glm53_tensor_is_contiguous(x) && glm53_tensor_is_contiguous(y));
    assert(ids->dtype == GLM53_I32 && ids->data);
    int64_t M = glm53_tensor_numel(ids), D = cpu_cols(y);
    assert(glm53_tensor_rows(x) == M && cpu_cols(x) == D);
    GLM53_TRY(check_ids(ids, glm53_tensor_rows(y), "scatter_rows"));
    size_t row_bytes = (size_t)D * glm53_dtype_size((glm53_dtype)y->dtype);
    const int32_t *id = ids->data;
    for (int64_t m = 0; m < M; m++)
        memcpy((char *)y->data + (size_t)id[m] * row_bytes, (const char *)x->data + (size_t)m * row_bytes, row_bytes);
    return GLM53_OK;
}
