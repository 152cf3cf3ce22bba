/*
 * test_cuda_vision_ops.c - the CUDA vision ops (kernels/cuda/ops_vision.cu: rope_2d, attention_segments) against
 * the CPU backend's ops of the same name, in the style of test_cuda_ops.c.
 *
 * Each check draws random inputs, runs the op on the CPU backend (F32) and on the CUDA backend (F32 or BF16
 * activations; BF16 inputs are rounded on the host first so both sides see the same values), poisons the
 * outputs with NaN, and compares max|cuda - cpu| / max|cpu|. Thresholds: 1e-5 for F32 (both sides compute in F32;
 * cos/sin and exp may differ in the last bit), 1e-2 for BF16 (one rounding of the output, plus BF16 storage of
 * q, k, v). Segments cover length 1, empty segments, odd lengths, several chunks of 32 keys and one long segment
 * (1200 rows) so the online softmax crosses many chunks.
 *
 * Prints one line per check and a table; "cuda vision ops: N passed, M failed" is the last line; the exit status
 * is non-zero on any failure. --self-test runs the CPU backend on both sides (checks this harness without a GPU).
 *
 * Usage: test_cuda_vision_ops [--self-test]
 */
#include "kernels/backend.h"
#include "test_util.h"

#include <stdbool.h>
#include <string.h>

static glm53_backend *cpu, *gpu;
static bool self_test;

typedef struct {
    char op[32], shape[64], dtype[8];
    double err, thr;
    bool pass;
    char note[200];
} row;
static row rows[256];
static int n_rows;

static void record(const char *op, const char *shape, const char *dtype, double err, double thr, const char *note) {
    row *r = &rows[n_rows++];
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    snprintf(r->dtype, sizeof r->dtype, "%s", dtype);
    snprintf(r->note, sizeof r->note, "%s", note ? note : "");
    r->err = err;
    r->thr = thr;
    r->pass = note == NULL && err <= thr;
    test_checks++;
    test_failures += !r->pass;
    printf("[%s] %-20s %-36s %-5s err %.3e (thr %.0e)%s%s\n", r->pass ? "PASS" : "FAIL", op, shape, dtype, err, thr,
           note ? "  " : "", note ? note : "");
    fflush(stdout);
}

/* A tensor on `be` holding host floats (converted to dtype) or int32s. */
static glm53_tensor *put(glm53_backend *be, int dtype, int ndim, const int64_t *dims, const void *host) {
    glm53_tensor *t = calloc(1, sizeof *t);
    t->dtype = dtype;
    t->device = be->device;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = dims[i];
    if (be->ops->alloc(be, t) != GLM53_OK) {
        printf("alloc failed: %s\n", glm53_last_error());
        exit(2);
    }
    int64_t n = glm53_tensor_numel(t);
    if (host && dtype == GLM53_BF16) {
        uint16_t *h = malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) h[i] = glm53_f32_to_bf16(((const float *)host)[i]);
        be->ops->upload(be, t, h);
        free(h);
    } else if (host) {
        be->ops->upload(be, t, host);
    } else {
        be->ops->fill(be, t, NAN);
    }
    return t;
}

static float *get(glm53_backend *be, const glm53_tensor *t) {
    int64_t n = glm53_tensor_numel(t);
    float *out = malloc((size_t)n * sizeof *out);
    if (t->dtype == GLM53_BF16) {
        uint16_t *h = malloc((size_t)n * 2);
        be->ops->download(be, h, t);
        for (int64_t i = 0; i < n; i++) out[i] = glm53_bf16_to_f32(h[i]);
        free(h);
    } else {
        be->ops->download(be, out, t);
    }
    return out;
}

static void drop(glm53_backend *be, glm53_tensor *t) {
    be->ops->release(be, t);
    free(t);
}

static float *randn(int64_t n, bool bf16) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = bf16 ? glm53_round_bf16(test_normal()) : test_normal();
    return v;
}

static void check_rope(int64_t M, int64_t H, int64_t d, int dtype, bool in_place) {
    char shape[64];
    snprintf(shape, sizeof shape, "x[%lld,%lld,%lld]%s", (long long)M, (long long)H, (long long)d,
             in_place ? " in place" : "");
    bool bf16 = dtype == GLM53_BF16;
    float *x = randn(M * H * d, bf16);
    int32_t *pos = malloc((size_t)(2 * M) * sizeof *pos);
    for (int64_t i = 0; i < 2 * M; i++) pos[i] = (int32_t)(test_next() % 600);
    const int64_t dx[3] = {M, H, d}, dp[2] = {M, 2};
    glm53_tensor *cx = put(cpu, GLM53_F32, 3, dx, x), *cy = put(cpu, GLM53_F32, 3, dx, NULL);
    glm53_tensor *cp = put(cpu, GLM53_I32, 2, dp, pos);
    glm53_tensor *gx = put(gpu, bf16 && !self_test ? GLM53_BF16 : GLM53_F32, 3, dx, x);
    glm53_tensor *gy = put(gpu, gx->dtype, 3, dx, NULL), *gp = put(gpu, GLM53_I32, 2, dp, pos);
    glm53_status a = cpu->ops->rope_2d(cpu, cy, cx, cp, 10000.0f);
    glm53_status b = gpu->ops->rope_2d(gpu, in_place ? gx : gy, gx, gp, 10000.0f);
    if (b == GLM53_OK) b = gpu->ops->sync(gpu);
    if (a != GLM53_OK || b != GLM53_OK) {
        record("rope_2d", shape, bf16 ? "bf16" : "f32", INFINITY, 0, glm53_last_error());
    } else {
        float *ref = get(cpu, cy), *got = get(gpu, in_place ? gx : gy);
        record("rope_2d", shape, bf16 ? "bf16" : "f32", test_rel_err_f32(got, ref, M * H * d), bf16 ? 1e-2 : 1e-5,
               NULL);
        free(ref);
        free(got);
    }
    drop(cpu, cx), drop(cpu, cy), drop(cpu, cp), drop(gpu, gx), drop(gpu, gy), drop(gpu, gp);
    free(x);
    free(pos);
}

static void check_attention(const int32_t *lens, int n_seg, int64_t H, int64_t d, int dtype) {
    int64_t M = 0;
    for (int s = 0; s < n_seg; s++) M += lens[s];
    char shape[64];
    snprintf(shape, sizeof shape, "q[%lld,%lld,%lld] %d segments", (long long)M, (long long)H, (long long)d, n_seg);
    bool bf16 = dtype == GLM53_BF16;
    float *q = randn(M * H * d, bf16), *k = randn(M * H * d, bf16), *v = randn(M * H * d, bf16);
    int32_t *cu = malloc((size_t)(n_seg + 1) * sizeof *cu);
    cu[0] = 0;
    for (int s = 0; s < n_seg; s++) cu[s + 1] = cu[s] + lens[s];
    const int64_t dx[3] = {M, H, d}, dc[1] = {n_seg + 1};
    int gd = bf16 && !self_test ? GLM53_BF16 : GLM53_F32;
    glm53_tensor *cq = put(cpu, GLM53_F32, 3, dx, q), *ck = put(cpu, GLM53_F32, 3, dx, k);
    glm53_tensor *cv = put(cpu, GLM53_F32, 3, dx, v), *co = put(cpu, GLM53_F32, 3, dx, NULL);
    glm53_tensor *cc = put(cpu, GLM53_I32, 1, dc, cu);
    glm53_tensor *gq = put(gpu, gd, 3, dx, q), *gk = put(gpu, gd, 3, dx, k), *gv = put(gpu, gd, 3, dx, v);
    glm53_tensor *go = put(gpu, gd, 3, dx, NULL), *gc = put(gpu, GLM53_I32, 1, dc, cu);
    const float scale = 1.0f / sqrtf((float)d);
    glm53_status a = cpu->ops->attention_segments(cpu, co, cq, ck, cv, cc, scale);
    glm53_status b = gpu->ops->attention_segments(gpu, go, gq, gk, gv, gc, scale);
    if (b == GLM53_OK) b = gpu->ops->sync(gpu);
    if (a != GLM53_OK || b != GLM53_OK) {
        record("attention_segments", shape, bf16 ? "bf16" : "f32", INFINITY, 0, glm53_last_error());
    } else {
        float *ref = get(cpu, co), *got = get(gpu, go);
        record("attention_segments", shape, bf16 ? "bf16" : "f32", test_rel_err_f32(got, ref, M * H * d),
               bf16 ? 1e-2 : 1e-5, NULL);
        free(ref);
        free(got);
    }
    glm53_tensor *ct[] = {cq, ck, cv, co, cc}, *gt[] = {gq, gk, gv, go, gc};
    for (int i = 0; i < 5; i++) drop(cpu, ct[i]), drop(gpu, gt[i]);
    free(q), free(k), free(v), free(cu);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--self-test") == 0) self_test = true;
        else {
            fprintf(stderr, "usage: %s [--self-test]\n", argv[0]);
            return 2;
        }
    }
    glm53_status st = self_test ? glm53_backend_cpu_create(0, &gpu) : glm53_backend_cuda_create(0, &gpu);
    if (st != GLM53_OK || glm53_backend_cpu_create(0, &cpu) != GLM53_OK) {
        printf("cannot create the backends: %s\ncuda vision ops: 0 passed, 1 failed\n", glm53_last_error());
        return 1;
    }
    if (!gpu->ops->rope_2d || !gpu->ops->attention_segments) {
        printf("the backend lacks the vision ops\ncuda vision ops: 0 passed, 1 failed\n");
        return 1;
    }
    test_current = "cuda vision ops";
    test_seed(0x7157);
    const int dtypes[2] = {GLM53_F32, GLM53_BF16};
    for (int t = 0; t < 2; t++) {
        check_rope(1, 1, 4, dtypes[t], false);
        check_rope(37, 2, 32, dtypes[t], false);
        check_rope(300, 16, 64, dtypes[t], true);
        check_rope(5, 3, 128, dtypes[t], false);
        const int32_t one[] = {1}, mixed[] = {5, 0, 33, 1, 64, 0}, real[] = {256, 64, 1200};
        check_attention(one, 1, 1, 16, dtypes[t]);
        check_attention(mixed, 6, 2, 32, dtypes[t]);
        check_attention(real, 3, 16, 64, dtypes[t]);
        check_attention(mixed, 6, 3, 128, dtypes[t]);
        check_attention(mixed, 6, 1, 256, dtypes[t]);
    }
    int passed = 0;
    printf("\n--- table ---\n%-20s %-36s %-5s %12s %10s  %s\n", "op", "shape", "dtype", "max rel err", "threshold",
           "result");
    for (int i = 0; i < n_rows; i++) {
        printf("%-20s %-36s %-5s %12.3e %10.1e  %s%s%s\n", rows[i].op, rows[i].shape, rows[i].dtype, rows[i].err,
               rows[i].thr, rows[i].pass ? "PASS" : "FAIL", rows[i].note[0] ? "  " : "", rows[i].note);
        passed += rows[i].pass;
    }
    printf("--- end table ---\ncuda vision ops: %d passed, %d failed\n", passed, n_rows - passed);
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    return test_failures ? 1 : 0;
}
