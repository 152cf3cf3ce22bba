/*
 * ops_vision.c - the vision tower's own ops on the CPU backend: 2-D rotary embedding and bidirectional attention
 * within segments (one segment per image, or per temporal group of a video).
 *
 * rope_2d follows transformers' Glm5NextVisionRotaryEmbedding + apply_rotary_pos_emb_vision in F32: the inverse
 * frequencies are computed in F32 as torch does (pow, then reciprocal), angles are F32 products, and each output
 * is x * cos + rotate_half(x) * sin.
 *
 * attention_segments is the plain two-pass softmax per (row, head): scores against every row of the segment into
 * a scratch row, max, exp and sum, then the weighted sum of values. Items (row, head) are split over the pool;
 * each range of items allocates one scratch row as long as the longest segment.
 */
#include "kernels/cpu/cpu_ops.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * rope_2d
 */
typedef struct {
    float         *y;
    const float   *x;
    const int32_t *pos;
    const float   *inv_freq;   /* [d/4] */
    int64_t        H, d;
} rope_job;

static void rope_rows(void *ctx, int64_t begin, int64_t end) {
    const rope_job *job = ctx;
    const int64_t d = job->d, half = d / 2, q = d / 4;
    float cosv[512], sinv[512];   /* d <= 1024, checked by the op */
    for (int64_t m = begin; m < end; m++) {
        const float row = (float)job->pos[2 * m], col = (float)job->pos[2 * m + 1];
        for (int64_t i = 0; i < q; i++) {
            float a = row * job->inv_freq[i], b = col * job->inv_freq[i];
            cosv[i] = cosf(a);
            sinv[i] = sinf(a);
            cosv[q + i] = cosf(b);
            sinv[q + i] = sinf(b);
        }
        for (int64_t h = 0; h < job->H; h++) {
            const float *x = job->x + (m * job->H + h) * d;
            float *y = job->y + (m * job->H + h) * d;
            for (int64_t j = 0; j < half; j++) {
                /* e = [a | a]: element j and j + d/2 share angle j; rotate_half pairs them with opposite signs. */
                float x1 = x[j], x2 = x[j + half];
                float lo = x1 * cosv[j] + (-x2) * sinv[j];
                float hi = x2 * cosv[j] + x1 * sinv[j];
                y[j] = lo;
                y[j + half] = hi;
            }
        }
    }
}

glm53_status cpu_rope_2d(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *pos,
                         float theta) {
    assert(cpu_is_f32(y) && cpu_is_f32(x) && x->ndim == 3 && glm53_tensor_numel(y) == glm53_tensor_numel(x));
    const int64_t M = x->shape[0], H = x->shape[1], d = x->shape[2];
    assert(pos->dtype == GLM53_I32 && pos->data && glm53_tensor_numel(pos) == 2 * M);
    if (d % 4 != 0 || d > 1024)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cpu rope_2d: head dim %lld must be a multiple of 4, at most 1024",
                          (long long)d);
    float inv_freq[256];
    const int64_t q = d / 4;
    for (int64_t i = 0; i < q; i++) {
        /* torch: arange(0, d/2, 2, float) / (d/2) in F32, theta ** that in F32, 1 / that in F32 */
        float e = (float)(2 * i) / (float)(d / 2);
        float p = powf(theta, e);
        inv_freq[i] = 1.0f / p;
    }
    rope_job job = {y->data, x->data, pos->data, inv_freq, H, d};
    cpu_parallel_for(be, M, H * d * 4 + q * 40, rope_rows, &job);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * attention_segments
 */
typedef struct {
    float         *o;
    const float   *q, *k, *v;
    const int32_t *cu;
    int64_t        n_seg, H, d, max_len;
    float          scale;
    int            oom;   /* set by a range that could not get its scratch row */
} attn_job;

/* Segment of row i: the s with cu[s] <= i < cu[s+1] (binary search; cu is non-decreasing). */
static int64_t segment_of(const int32_t *cu, int64_t n_seg, int64_t i) {
    int64_t lo = 0, hi = n_seg - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (cu[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void attn_items(void *ctx, int64_t begin, int64_t end) {
    attn_job *job = ctx;
    const int64_t H = job->H, d = job->d;
    float *p = malloc((size_t)(job->max_len > 0 ? job->max_len : 1) * sizeof *p);
    float *acc = malloc((size_t)d * sizeof *acc);
    if (!p || !acc) {
        __atomic_store_n(&job->oom, 1, __ATOMIC_RELAXED);
        free(p);
        free(acc);
        return;
    }
    for (int64_t item = begin; item < end; item++) {
        const int64_t i = item / H, h = item % H;
        const int64_t s = segment_of(job->cu, job->n_seg, i), j0 = job->cu[s], len = job->cu[s + 1] - j0;
        const float *qi = job->q + (i * H + h) * d;
        float mx = -INFINITY;
        for (int64_t j = 0; j < len; j++) {
            p[j] = job->scale * cpu_dot(qi, job->k + ((j0 + j) * H + h) * d, d);
            if (p[j] > mx) mx = p[j];
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < len; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        for (int64_t e = 0; e < d; e++) acc[e] = 0.0f;
        for (int64_t j = 0; j < len; j++) {
            const float w = p[j] / sum, *vj = job->v + ((j0 + j) * H + h) * d;
            for (int64_t e = 0; e < d; e++) acc[e] += w * vj[e];
        }
        memcpy(job->o + (i * H + h) * d, acc, (size_t)d * sizeof *acc);
    }
    free(p);
    free(acc);
}

glm53_status cpu_attention_segments(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                    const glm53_tensor *v, const glm53_tensor *cu_seqlens, float scale) {
    assert(cpu_is_f32(o) && cpu_is_f32(q) && cpu_is_f32(k) && cpu_is_f32(v) && q->ndim == 3);
    assert(cu_seqlens->dtype == GLM53_I32 && cu_seqlens->data && cu_seqlens->ndim == 1);
    const int64_t M = q->shape[0], H = q->shape[1], d = q->shape[2], n_seg = cu_seqlens->shape[0] - 1;
    assert(glm53_tensor_numel(k) == M * H * d && glm53_tensor_numel(v) == M * H * d &&
           glm53_tensor_numel(o) == M * H * d);
    const int32_t *cu = cu_seqlens->data;
    if (n_seg < 1 || cu[0] != 0 || cu[n_seg] != M)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cpu attention_segments: cu_seqlens must run from 0 to %lld",
                          (long long)M);
    int64_t max_len = 0;
    for (int64_t s = 0; s < n_seg; s++) {
        if (cu[s + 1] < cu[s])
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cpu attention_segments: cu_seqlens decreases at %lld",
                              (long long)s);
        if (cu[s + 1] - cu[s] > max_len) max_len = cu[s + 1] - cu[s];
    }
    attn_job job = {o->data, q->data, k->data, v->data, cu, n_seg, H, d, max_len, scale, 0};
    cpu_parallel_for(be, M * H, max_len * d * 4, attn_items, &job);
    if (job.oom)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cpu attention_segments: no memory for a %lld-float score row",
                          (long long)max_len);
    return GLM53_OK;
}
