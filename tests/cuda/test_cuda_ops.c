/*
 * test_cuda_ops.c - every op of the CUDA backend against the CPU backend's op of the same name.
 *
 * Each check draws fresh random inputs, creates them on the CPU backend (F32 activations) and on the CUDA backend
 * (BF16 or F32 activations; weights in the same dtype on both), poisons every output with NaN (I32: -12345) on
 * both sides, runs the op on both and compares each output by max|cuda - cpu| / max|cpu|. BF16 inputs are
 * rounded to BF16 on the host first, so both backends see exactly the same values and only the computation
 * differs. Integer outputs must be equal (kpool_select as per-row sets: the contract fixes which positions, not
 * their order).
 *
 * Thresholds: 1e-5 when every tensor of the check is F32 or FP8 (full F32 computation on both sides), 1e-2 when
 * any activation or weight is BF16 or F16.
 *
 * A failing op records a FAIL row and the run goes on. If the CUDA context itself is lost (a kernel fault), the
 * table so far is printed and the program exits with status 3; tests/cuda/run.sh then reruns every op group in
 * its own process. After the checks, a few ops are timed with CUDA events (informative only).
 *
 * Usage: test_cuda_ops [--only group[,group...]] [--no-bench] [--list] [--self-test]
 */
#include "kernels/backend.h"
#include "test_util.h"

#include <cuda_runtime.h>

#include <assert.h>
#include <float.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

enum { F32 = GLM53_F32, BF16 = GLM53_BF16, F16 = GLM53_F16, FP8 = GLM53_F8_E4M3, I32 = GLM53_I32 };

/* SHAPE(a, b, c) -> "3, (int64_t[]){a, b, c}": the (ndim, dims) argument pair of the tensor helpers. */
#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static glm53_backend *cpu, *gpu;

/* --self-test: `gpu` is a second CPU backend and every activation is F32, to check this harness (shapes, the CPU
 * ops' preconditions, the comparisons) on a machine without a GPU. The memory group and the timings need CUDA. */
static bool self_test;

/* The dtype an activation of `dtype` gets on the `gpu` side. */
static int gpu_dtype(int dtype) { return self_test && dtype == BF16 ? F32 : dtype; }

static const char *dt_name(int dtype) {
    switch (dtype) {
    case F32: return "f32";
    case BF16: return "bf16";
    case F16: return "f16";
    case FP8: return "fp8";
    case I32: return "i32";
    default: return "-";
    }
}

/* 1e-2 if any of the dtypes (list ends with -1) is a 16-bit float, else 1e-5. */
static double thr_list(const int *dtypes) {
    for (; *dtypes >= 0; dtypes++)
        if (*dtypes == BF16 || *dtypes == F16) return 1e-2;
    return 1e-5;
}
#define THR(...) thr_list((int[]){__VA_ARGS__, -1})

/* ------------------------------------------------------------------------------------------------------------
 * Results
 */
typedef struct {
    char op[64], shape[64], dtype[48], note[120];
    double err, thr;
    bool pass;
} result_row;

static result_row results[2048];
static int n_results;

static void print_table(void) {
    int passed = 0, failed = 0;
    printf("\n--- table ---\n");
    printf("%-26s %-40s %-28s %12s %10s  %s\n", "op", "shape", "dtype", "max rel err", "threshold", "result");
    for (int i = 0; i < n_results; i++) {
        const result_row *r = &results[i];
        printf("%-26s %-40s %-28s %12.3e %10.1e  %s%s%s\n", r->op, r->shape, r->dtype, r->err, r->thr,
               r->pass ? "PASS" : "FAIL", r->note[0] ? "  " : "", r->note);
        if (r->pass) passed++;
        else failed++;
    }
    printf("--- end table ---\n");
    printf("cuda ops: %d passed, %d failed\n", passed, failed);
    fflush(stdout);
}

/* ------------------------------------------------------------------------------------------------------------
 * The current check: its name, what it allocated, whether a call failed
 */
static struct {
    char op[40], shape[64], dtype[48];
    bool failed;
    char msg[600];
    int n_recorded;
    glm53_backend *owner[512];
    glm53_tensor *tensors[512];
    int n_tensors;
    void *host[4096];
    int n_host;
} ck;

static uint64_t check_counter;

static void record(const char *what, double err, double thr, bool pass, const char *note) {
    if (n_results == (int)(sizeof results / sizeof results[0])) return;
    result_row *r = &results[n_results++];
    snprintf(r->op, sizeof r->op, "%s%s%s", ck.op, what && what[0] ? "." : "", what ? what : "");
    snprintf(r->shape, sizeof r->shape, "%s", ck.shape);
    snprintf(r->dtype, sizeof r->dtype, "%s", ck.dtype);
    snprintf(r->note, sizeof r->note, "%s", note ? note : "");
    r->err = err;
    r->thr = thr;
    r->pass = pass;
    ck.n_recorded++;
    test_checks++;
    test_failures += !pass;
    printf("[%s] %-26s %-40s %-28s err %.3e (thr %.0e)%s%s\n", pass ? "PASS" : "FAIL", r->op, r->shape, r->dtype, err,
           thr, note && note[0] ? "  " : "", note ? note : "");
    fflush(stdout);
}

static void check_begin(const char *op, const char *dtype, const char *shape_fmt, ...) {
    ck.failed = false;
    ck.msg[0] = '\0';
    ck.n_recorded = 0;
    ck.n_tensors = 0;
    ck.n_host = 0;
    snprintf(ck.op, sizeof ck.op, "%s", op);
    test_current = ck.op;
    snprintf(ck.dtype, sizeof ck.dtype, "%s", dtype);
    va_list ap;
    va_start(ap, shape_fmt);
    vsnprintf(ck.shape, sizeof ck.shape, shape_fmt, ap);
    va_end(ap);
    test_seed(0x51ed2701ull + 0x9e3779b97f4a7c15ull * ++check_counter);
    glm53_clear_error();
}

static void fail_msg(const char *fmt, ...) {
    if (ck.failed) return;   /* keep the first failure: later ones are usually its consequences */
    ck.failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ck.msg, sizeof ck.msg, fmt, ap);
    va_end(ap);
}

static bool status_ok(glm53_status st, const char *what) {
    if (st == GLM53_OK) return true;
    fail_msg("%s -> %s: %s", what, glm53_status_name(st), glm53_last_error());
    return false;
}

/* Every backend call of a check goes through TRY: a failure records the message and skips to `done:`. */
#define TRY(expr)                                   \
    do {                                            \
        if (!status_ok((expr), #expr)) goto done;   \
    } while (0)

/* The op must exist on both backends (the CPU reference may not be written yet). */
#define NEED(op)                                                                       \
    do {                                                                               \
        if (!cpu->ops->op) { fail_msg("the CPU backend has no " #op " (no reference)"); goto done; } \
        if (!gpu->ops->op) { fail_msg("the CUDA backend has no " #op); goto done; }          \
    } while (0)

static void *hmem(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || ck.n_host == (int)(sizeof ck.host / sizeof ck.host[0])) {
        fprintf(stderr, "test_cuda_ops: out of host memory or tracking slots (%zu bytes)\n", bytes);
        exit(2);
    }
    ck.host[ck.n_host++] = p;
    return p;
}

static bool context_lost(void);

/* Releases what the check allocated and makes sure it left the device healthy. */
static void check_cleanup(void) {
    for (int i = ck.n_tensors - 1; i >= 0; i--) {
        ck.owner[i]->ops->release(ck.owner[i], ck.tensors[i]);
        free(ck.tensors[i]);
    }
    for (int i = 0; i < ck.n_host; i++) free(ck.host[i]);
    ck.n_tensors = ck.n_host = 0;
    /* A fault left behind (out-of-range index) would be blamed on the next check: report it on this one. */
    glm53_status st = gpu->ops->sync(gpu);
    if (st != GLM53_OK) {
        char note[600];
        snprintf(note, sizeof note, "sync after the check: %s %s", glm53_status_name(st), glm53_last_error());
        record("sync", INFINITY, 0.0, false, note);
    }
    if (context_lost()) {
        print_table();
        printf("CUDA context lost after %s %s (%s): the remaining checks cannot run in this process\n", ck.op,
               ck.shape, cudaGetErrorString(cudaGetLastError()));
        exit(3);
    }
}

static void check_end(void) {
    if (ck.failed) record(NULL, INFINITY, 0.0, false, ck.msg);
    else if (ck.n_recorded == 0) record(NULL, NAN, 0.0, false, "no comparison was made (test bug)");
    check_cleanup();
}

/* A sticky error (illegal address, launch failure) fails every later CUDA call: ask twice. */
static bool context_lost(void) {
    if (self_test) return false;
    if (cudaDeviceSynchronize() == cudaSuccess) return false;
    (void)cudaGetLastError();
    return cudaDeviceSynchronize() != cudaSuccess;
}

/* ------------------------------------------------------------------------------------------------------------
 * Random host data
 */
static float *randn(int64_t n, float scale, bool round_bf16) {
    float *v = hmem((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        v[i] = test_normal() * scale;
        if (round_bf16) v[i] = glm53_round_bf16(v[i]);
    }
    return v;
}

static float *randu(int64_t n, float lo, float hi, bool round_bf16) {
    float *v = hmem((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        v[i] = lo + (hi - lo) * test_uniform();
        if (round_bf16) v[i] = glm53_round_bf16(v[i]);
    }
    return v;
}

static int64_t rand_below(int64_t n) { return (int64_t)(test_next() % (uint64_t)n); }

/* out[0..n) = n distinct values of [0, range) in random order; scratch holds range ints. */
static void rand_distinct(int32_t *out, int64_t n, int64_t range, int32_t *scratch) {
    for (int64_t i = 0; i < range; i++) scratch[i] = (int32_t)i;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i + rand_below(range - i);
        int32_t t = scratch[i];
        scratch[i] = scratch[j];
        scratch[j] = t;
        out[i] = scratch[i];
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Tensors on a backend
 */
static glm53_status new_tensor(glm53_backend *be, glm53_tensor **out, int dtype, int ndim, const int64_t *dims) {
    *out = NULL;
    glm53_tensor *t = calloc(1, sizeof *t);
    if (!t || ck.n_tensors == (int)(sizeof ck.tensors / sizeof ck.tensors[0])) {
        fprintf(stderr, "test_cuda_ops: out of host memory or tensor slots\n");
        exit(2);
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = dims[i];
    glm53_status st = be->ops->alloc(be, t);
    if (st != GLM53_OK) {
        free(t);
        return st;
    }
    ck.owner[ck.n_tensors] = be;
    ck.tensors[ck.n_tensors++] = t;
    *out = t;
    return GLM53_OK;
}

/* Uploads floats into an F32 or BF16 tensor (BF16: rounded to nearest even). */
static glm53_status put_f32(glm53_backend *be, glm53_tensor *t, const float *v) {
    int64_t n = glm53_tensor_numel(t);
    if (t->dtype == F32) return be->ops->upload(be, t, v);
    assert(t->dtype == BF16);
    uint16_t *h = hmem((size_t)n * sizeof(uint16_t));
    for (int64_t i = 0; i < n; i++) h[i] = glm53_f32_to_bf16(v[i]);
    return be->ops->upload(be, t, h);
}

static glm53_status tensor_from(glm53_backend *be, glm53_tensor **out, int dtype, const float *v, int ndim,
                                const int64_t *dims) {
    GLM53_TRY(new_tensor(be, out, dtype, ndim, dims));
    return put_f32(be, *out, v);
}

static glm53_status tensor_raw(glm53_backend *be, glm53_tensor **out, int dtype, const void *bytes, int ndim,
                               const int64_t *dims) {
    GLM53_TRY(new_tensor(be, out, dtype, ndim, dims));
    return be->ops->upload(be, *out, bytes);
}

/* An output, poisoned so that an element the op forgets to write cannot pass. */
static glm53_status tensor_out(glm53_backend *be, glm53_tensor **out, int dtype, int ndim, const int64_t *dims) {
    GLM53_TRY(new_tensor(be, out, dtype, ndim, dims));
    return be->ops->fill(be, *out, dtype == I32 ? -12345.0f : NAN);
}

/* Downloads an F32 / BF16 tensor as floats. */
static glm53_status fetch_f32(glm53_backend *be, const glm53_tensor *t, float *dst) {
    int64_t n = glm53_tensor_numel(t);
    if (t->dtype == F32) return be->ops->download(be, dst, t);
    assert(t->dtype == BF16);
    uint16_t *h = hmem((size_t)n * sizeof(uint16_t));
    GLM53_TRY(be->ops->download(be, h, t));
    for (int64_t i = 0; i < n; i++) dst[i] = glm53_bf16_to_f32(h[i]);
    return GLM53_OK;
}

/* Adds to *count the values of two GPU tensors of one shape whose bits differ (compared as F32, which a BF16
 * value converts to exactly): the rows-invariant checks' measure. */
static glm53_status count_differing(const glm53_tensor *a, const glm53_tensor *b, int64_t *count) {
    int64_t n = glm53_tensor_numel(a);
    assert(glm53_tensor_numel(b) == n);
    float *va = hmem((size_t)n * sizeof(float)), *vb = hmem((size_t)n * sizeof(float));
    GLM53_TRY(fetch_f32(gpu, a, va));
    GLM53_TRY(fetch_f32(gpu, b, vb));
    for (int64_t i = 0; i < n; i++) *count += memcmp(&va[i], &vb[i], sizeof(float)) != 0;
    return GLM53_OK;
}

/* count_differing for `theirs` made by `other`, a second backend of the one device on its own stream: waits for both
 * streams first. (A call on `other` that reads what gpu wrote must itself follow a gpu->ops->sync.) */
static glm53_status count_differing_from(glm53_backend *other, const glm53_tensor *mine, const glm53_tensor *theirs,
                                         int64_t *count) {
    GLM53_TRY(gpu->ops->sync(gpu));
    GLM53_TRY(other->ops->sync(other));
    return count_differing(mine, theirs, count);
}

/* Records a "taken" check: passed when some value differs from the kernel a switch replaces (the switched path ran;
 * `missing` says what failing means). */
static void record_taken(int64_t differing, const char *missing) {
    record("taken", differing > 0 ? 0.0 : 1.0, 0.0, differing > 0, differing > 0 ? "" : missing);
}

/* Records a rows-invariant check: passed when no value differed between one call and row-by-row calls. */
static void record_differing(int64_t differing, const char *what) {
    char note[120] = "";
    if (differing) snprintf(note, sizeof note, "%lld %s", (long long)differing, what);
    record(NULL, (double)differing, 0.0, differing == 0, note);
}

/* The same tensor on both backends: `c` on the CPU, `g` on CUDA. */
typedef struct {
    glm53_tensor *c, *g;
} tpair;

/* An activation: F32 on the CPU, `dtype` on CUDA, same values (round them to BF16 first when dtype is BF16). */
static glm53_status act_pair(tpair *p, int dtype, const float *v, int ndim, const int64_t *dims) {
    GLM53_TRY(tensor_from(cpu, &p->c, F32, v, ndim, dims));
    return tensor_from(gpu, &p->g, gpu_dtype(dtype), v, ndim, dims);
}

static glm53_status out_pair(tpair *p, int dtype, int ndim, const int64_t *dims) {
    GLM53_TRY(tensor_out(cpu, &p->c, dtype == I32 ? I32 : F32, ndim, dims));
    return tensor_out(gpu, &p->g, gpu_dtype(dtype), ndim, dims);
}

static glm53_status i32_pair(tpair *p, const int32_t *v, int ndim, const int64_t *dims) {
    GLM53_TRY(tensor_raw(cpu, &p->c, I32, v, ndim, dims));
    return tensor_raw(gpu, &p->g, I32, v, ndim, dims);
}

/* A weight [rows, cols] (ndim 2) or a vector [cols] (ndim 1, rows 1) of `dtype` with identical contents on both
 * backends. F32/BF16: normal * scale (+ offset). F16: random codes of magnitude 2^-3..2^3 times nothing (scale
 * unused). FP8: random codes of magnitude 2^-3..2^3 and an F32 block scale [ceil(rows/br), ceil(cols/bc)] of
 * about scale / 3 per block. */
/* FP8 test weights draw exponent fields fp8_exp_lo .. fp8_exp_lo + fp8_exp_count - 1 (the NaN code excluded):
 * 4..9 (magnitudes 2^-3 .. 2^3) unless a check asks for the subnormal codes (field 0) or the whole range. */
static int fp8_exp_lo = 4, fp8_exp_count = 6;

static glm53_status weight_pair(tpair *w, int dtype, int ndim, int64_t rows, int64_t cols, float scale, float offset,
                                int br, int bc) {
    int64_t n = rows * cols;
    int64_t dims[2] = {rows, cols};
    const int64_t *shape = ndim == 2 ? dims : dims + 1;
    if (dtype == F32 || dtype == BF16) {
        float *v = randn(n, scale, dtype == BF16);
        for (int64_t i = 0; i < n; i++) v[i] = dtype == BF16 ? glm53_round_bf16(v[i] + offset) : v[i] + offset;
        GLM53_TRY(tensor_from(cpu, &w->c, dtype, v, ndim, shape));
        return tensor_from(gpu, &w->g, dtype, v, ndim, shape);
    }
    if (dtype == F16) {
        uint16_t *h = hmem((size_t)n * sizeof(uint16_t));
        for (int64_t i = 0; i < n; i++)
            h[i] = (uint16_t)((test_next() & 1) << 15 | (12 + rand_below(6)) << 10 | rand_below(1024));
        GLM53_TRY(tensor_raw(cpu, &w->c, F16, h, ndim, shape));
        return tensor_raw(gpu, &w->g, F16, h, ndim, shape);
    }
    assert(dtype == FP8 && ndim == 2);
    uint8_t *codes = hmem((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        codes[i] = (uint8_t)((test_next() & 1) << 7 | (fp8_exp_lo + rand_below(fp8_exp_count)) << 3 | rand_below(8));
        if ((codes[i] & 0x7f) == 0x7f) codes[i] ^= 1;   /* not the NaN code: 448 instead */
    }
    int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
    float *s = hmem((size_t)(sr * sc) * sizeof(float));
    for (int64_t i = 0; i < sr * sc; i++) s[i] = scale / 3.0f * (0.5f + test_uniform());
    glm53_tensor *sc_c, *sc_g;
    GLM53_TRY(tensor_from(cpu, &sc_c, F32, s, SHAPE(sr, sc)));
    GLM53_TRY(tensor_from(gpu, &sc_g, F32, s, SHAPE(sr, sc)));
    GLM53_TRY(tensor_raw(cpu, &w->c, FP8, codes, ndim, shape));
    GLM53_TRY(tensor_raw(gpu, &w->g, FP8, codes, ndim, shape));
    w->c->scale = sc_c;
    w->g->scale = sc_g;
    w->c->block_rows = w->g->block_rows = br;
    w->c->block_cols = w->g->block_cols = bc;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Comparisons
 */
/* max|got - ref| / max|ref| over finite ref values; a non-finite ref must be matched exactly (same infinity, or
 * NaN for NaN); a non-finite got where ref is finite is +inf. *worst gets the index of the largest difference. */
static double rel_err(const float *got, const float *ref, int64_t n, int64_t *worst) {
    double maxd = 0.0, maxr = 0.0;
    *worst = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i])) {
            bool same = isnan(ref[i]) ? isnan(got[i]) : got[i] == ref[i];
            if (!same) { *worst = i; return INFINITY; }
            continue;
        }
        if (!isfinite(got[i])) { *worst = i; return INFINITY; }
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > maxd || *worst < 0) { maxd = d > maxd ? d : maxd; *worst = i; }
        if (fabs((double)ref[i]) > maxr) maxr = fabs((double)ref[i]);
    }
    return maxr > 0.0 ? maxd / maxr : maxd;
}

static void report_err(const char *what, const float *got, const float *ref, int64_t n, double thr) {
    int64_t worst;
    double err = rel_err(got, ref, n, &worst);
    char note[120] = "";
    if (!(err <= thr) && worst >= 0)
        snprintf(note, sizeof note, "worst [%lld]: cuda %.6g, cpu %.6g", (long long)worst, got[worst], ref[worst]);
    record(what, err, thr, err <= thr, note);
}

/* ref on the CPU backend, got on CUDA; both F32/BF16 with the same number of elements. */
static bool compare(const char *what, const glm53_tensor *ref, const glm53_tensor *got, double thr) {
    int64_t n = glm53_tensor_numel(ref);
    assert(glm53_tensor_numel(got) == n);
    float *r = hmem((size_t)n * sizeof(float)), *g = hmem((size_t)n * sizeof(float));
    if (!status_ok(fetch_f32(cpu, ref, r), "download cpu output")) return false;
    if (!status_ok(fetch_f32(gpu, got, g), "download cuda output")) return false;
    report_err(what, g, r, n, thr);
    return true;
}

/* got (CUDA) against expected host floats. */
static bool compare_host(const char *what, const float *expected, const glm53_tensor *got, double thr) {
    int64_t n = glm53_tensor_numel(got);
    float *g = hmem((size_t)n * sizeof(float));
    if (!status_ok(fetch_f32(gpu, got, g), "download cuda output")) return false;
    report_err(what, g, expected, n, thr);
    return true;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* I32 outputs must be equal element by element, or (as_sets) row by row as sorted multisets. The error column
 * counts differing elements. */
static bool compare_i32(const char *what, const glm53_tensor *ref, const glm53_tensor *got, int64_t row_len,
                        bool as_sets) {
    int64_t n = glm53_tensor_numel(ref);
    assert(glm53_tensor_numel(got) == n && row_len > 0 && n % row_len == 0);
    int32_t *r = hmem((size_t)n * sizeof(int32_t)), *g = hmem((size_t)n * sizeof(int32_t));
    if (!status_ok(cpu->ops->download(cpu, r, ref), "download cpu output")) return false;
    if (!status_ok(gpu->ops->download(gpu, g, got), "download cuda output")) return false;
    int64_t order_diff = 0;
    for (int64_t i = 0; i < n; i++) order_diff += r[i] != g[i];
    if (as_sets)
        for (int64_t row = 0; row < n / row_len; row++) {
            qsort(r + row * row_len, (size_t)row_len, sizeof(int32_t), cmp_i32);
            qsort(g + row * row_len, (size_t)row_len, sizeof(int32_t), cmp_i32);
        }
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (r[i] != g[i]) {
            diff++;
            if (first < 0) first = i;
        }
    char note[120] = "";
    if (diff)
        snprintf(note, sizeof note, "%lld of %lld differ; first [%lld]: cuda %d, cpu %d", (long long)diff,
                 (long long)n, (long long)first, g[first], r[first]);
    else if (as_sets && order_diff)
        snprintf(note, sizeof note, "same sets, order differs in %lld elements (allowed)", (long long)order_diff);
    record(what, (double)diff, 0.0, diff == 0, note);
    return true;
}

/* ============================================================================================================
 * Checks
 * ==========================================================================================================*/

/* --- memory ----------------------------------------------------------------------------------------------- */
static void check_roundtrip(int dtype, int64_t n) {
    check_begin("upload/download", dt_name(dtype), "%lld", (long long)n);
    glm53_tensor *t = NULL;
    float *v = randn(n, 3.0f, dtype == BF16);
    TRY(tensor_from(gpu, &t, dtype, v, SHAPE(n)));
    compare_host(NULL, v, t, 0.0);
done:
    check_end();
}

static void check_copy(int src_dt, int dst_dt, int64_t rows, int64_t cols) {
    char dts[48];
    snprintf(dts, sizeof dts, "%s->%s", dt_name(src_dt), dt_name(dst_dt));
    check_begin("copy", dts, "%lldx%lld into rows 1.. of %lld", (long long)rows, (long long)cols,
                (long long)rows + 2);
    glm53_tensor *src = NULL, *dst = NULL;
    float *v = randn(rows * cols, 2.0f, src_dt == BF16);
    TRY(tensor_from(gpu, &src, src_dt, v, SHAPE(rows, cols)));
    TRY(tensor_out(gpu, &dst, dst_dt, SHAPE(rows + 2, cols)));
    /* into a row view (an offset pointer), as the model's cache writes do; F32 -> BF16 rounds to nearest even */
    glm53_tensor view = glm53_tensor_rows_view(dst, 1, rows);
    TRY(gpu->ops->copy(gpu, &view, src));
    float *expect = hmem((size_t)(rows * cols) * sizeof(float));
    for (int64_t i = 0; i < rows * cols; i++) expect[i] = dst_dt == BF16 ? glm53_round_bf16(v[i]) : v[i];
    compare_host(NULL, expect, &view, 0.0);
done:
    check_end();
}

static void check_fill(int dtype, float value, int64_t n) {
    check_begin("fill", dt_name(dtype), "%lld value %g", (long long)n, value);
    glm53_tensor *t = NULL;
    TRY(new_tensor(gpu, &t, dtype, SHAPE(n)));
    TRY(gpu->ops->fill(gpu, t, value));
    if (dtype == I32) {
        int32_t *got = hmem((size_t)n * sizeof(int32_t));
        TRY(gpu->ops->download(gpu, got, t));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += got[i] != (int32_t)value;
        record(NULL, (double)bad, 0.0, bad == 0, "");
    } else {
        float *expect = hmem((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) expect[i] = dtype == BF16 ? glm53_round_bf16(value) : value;
        compare_host(NULL, expect, t, 0.0);
    }
done:
    check_end();
}

/* A released block is reused for the next allocation of its size, and holds the new data. */
static void check_allocator_reuse(void) {
    check_begin("alloc/release", "f32", "1 MiB x 3, reuse");
    glm53_tensor *a = NULL, *b = NULL;
    int64_t n = 1 << 18;
    float *v1 = randn(n, 1.0f, false), *v2 = randn(n, 1.0f, false);
    TRY(tensor_from(gpu, &a, F32, v1, SHAPE(n)));
    void *first = a->data;
    gpu->ops->release(gpu, a);   /* data NULL now; check_end's release of it is a no-op */
    TRY(tensor_from(gpu, &b, F32, v2, SHAPE(n)));
    bool reused = b->data == first;
    record("reuse", reused ? 0.0 : 1.0, 0.0, reused, reused ? "" : "the released block was not handed out again");
    compare_host("data", v2, b, 0.0);
done:
    check_end();
}

/* An out-of-range id is reported by the next sync as GLM53_ERR_OUT_OF_RANGE, once. */
static void check_bad_index(bool scatter) {
    check_begin(scatter ? "scatter_rows" : "gather_rows", "bf16", "bad id 1000 of 1000 rows");
    glm53_tensor *table = NULL, *ids = NULL, *y = NULL;
    float *v = randn(1000 * 8, 1.0f, true);
    int32_t id[3] = {5, 1000, 7};
    TRY(tensor_from(gpu, &table, BF16, v, SHAPE(1000, 8)));
    TRY(tensor_raw(gpu, &ids, I32, id, SHAPE(3)));
    TRY(tensor_out(gpu, &y, BF16, SHAPE(3, 8)));
    if (scatter) TRY(gpu->ops->scatter_rows(gpu, table, y, ids));
    else TRY(gpu->ops->gather_rows(gpu, y, table, ids));
    glm53_status first = gpu->ops->sync(gpu), second = gpu->ops->sync(gpu);
    char note[160];
    snprintf(note, sizeof note, "first sync %s, second %s", glm53_status_name(first), glm53_status_name(second));
    bool ok = first == GLM53_ERR_OUT_OF_RANGE && second == GLM53_OK;
    record("fault", ok ? 0.0 : 1.0, 0.0, ok, note);
done:
    check_end();
}

/* --- matmul ----------------------------------------------------------------------------------------------- */
static void check_matmul_thr(int64_t M, int64_t N, int64_t K, int x_dt, int w_dt, int y_dt, int br, int bc,
                             double thr) {
    char dts[48];
    snprintf(dts, sizeof dts, "x:%s w:%s y:%s", dt_name(x_dt), dt_name(w_dt), dt_name(y_dt));
    if (w_dt == FP8) snprintf(dts + strlen(dts), sizeof dts - strlen(dts), " %dx%d", br, bc);
    check_begin("matmul", dts, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    tpair x = {0}, w = {0}, y = {0};
    float *xv = randn(M * K, 1.0f, x_dt == BF16);
    TRY(act_pair(&x, x_dt, xv, SHAPE(M, K)));
    TRY(weight_pair(&w, w_dt, 2, N, K, 0.05f, 0.0f, br, bc));
    TRY(out_pair(&y, y_dt, SHAPE(M, N)));
    TRY(cpu->ops->matmul(cpu, y.c, x.c, w.c));
    TRY(gpu->ops->matmul(gpu, y.g, x.g, w.g));
    compare(NULL, y.c, y.g, thr);
done:
    check_end();
}

static void check_matmul(int64_t M, int64_t N, int64_t K, int x_dt, int w_dt, int y_dt, int br, int bc) {
    check_matmul_thr(M, N, K, x_dt, w_dt, y_dt, br, bc, THR(x_dt, w_dt, y_dt));
}

/* Batch invariance of the small-M matmul paths: the first m rows of a 16-row product have the same bits as the
 * product of those m rows alone (exact greedy speculative decoding compares verification rows with plain decode
 * rows). The comparison is exact; err is the number of differing values. */
static void check_matmul_rows_invariant(int64_t N, int64_t K, int x_dt, int w_dt, int br, int bc) {
    char dts[48];
    snprintf(dts, sizeof dts, "x:%s w:%s y:%s", dt_name(x_dt), dt_name(w_dt), dt_name(F32));
    check_begin("matmul rows invariant", dts, "M 1,2,5,9, each row, of 16 x %lldx%lld", (long long)N, (long long)K);
    const int64_t M = 16, subs[] = {1, 2, 5, 9};
    tpair x = {0}, w = {0}, y = {0};
    float *xv = randn(M * K, 1.0f, x_dt == BF16), *all = hmem((size_t)(M * N) * sizeof(float));
    TRY(act_pair(&x, x_dt, xv, SHAPE(M, K)));
    TRY(weight_pair(&w, w_dt, 2, N, K, 0.05f, 0.0f, br, bc));
    TRY(out_pair(&y, F32, SHAPE(M, N)));
    TRY(gpu->ops->matmul(gpu, y.g, x.g, w.g));
    TRY(fetch_f32(gpu, y.g, all));
    int64_t differing = 0;
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        tpair xs = {0}, ys = {0};
        float *part = hmem((size_t)(subs[i] * N) * sizeof(float));
        TRY(act_pair(&xs, x_dt, xv, SHAPE(subs[i], K)));
        TRY(out_pair(&ys, F32, SHAPE(subs[i], N)));
        TRY(gpu->ops->matmul(gpu, ys.g, xs.g, w.g));
        TRY(fetch_f32(gpu, ys.g, part));
        for (int64_t j = 0; j < subs[i] * N; j++) differing += memcmp(&part[j], &all[j], sizeof(float)) != 0;
    }
    for (int64_t m = 0; m < M; m++) {   /* every row alone (position 0) equals its row of the 16-row product */
        tpair xs = {0}, ys = {0};
        float *part = hmem((size_t)N * sizeof(float));
        TRY(act_pair(&xs, x_dt, xv + m * K, SHAPE(1, K)));
        TRY(out_pair(&ys, F32, SHAPE(1, N)));
        TRY(gpu->ops->matmul(gpu, ys.g, xs.g, w.g));
        TRY(fetch_f32(gpu, ys.g, part));
        for (int64_t j = 0; j < N; j++) differing += memcmp(&part[j], &all[m * N + j], sizeof(float)) != 0;
    }
    char note[120] = "";
    if (differing) snprintf(note, sizeof note, "%lld values differ from the 16-row product", (long long)differing);
    record(NULL, (double)differing, 0.0, differing == 0, note);
done:
    check_end();
}

/* The fused dense SwiGLU (optional on a backend): the CUDA op against the CPU backend's generic chain
 * (matmul, matmul, swiglu), which is what the engine runs where a backend has no fused op. */
static void check_swiglu_gate_up(int64_t M, int64_t F, int64_t D, int x_dt, int w_dt, int blk) {
    /* The fused op is optional and the CPU backend has none: under --self-test there is nothing to check. On
     * CUDA its absence is a failure (below). */
    if (self_test && !gpu->ops->swiglu_gate_up) return;
    char dts[48];
    snprintf(dts, sizeof dts, "x:%s w:%s", dt_name(x_dt), dt_name(w_dt));
    if (w_dt == FP8) snprintf(dts + strlen(dts), sizeof dts - strlen(dts), " %dx%d", blk, blk);
    check_begin("swiglu_gate_up", dts, "M %lld F %lld D %lld", (long long)M, (long long)F, (long long)D);
    tpair x = {0}, wg = {0}, wu = {0}, y = {0}, gate = {0}, up = {0};
    if (!gpu->ops->swiglu_gate_up) { fail_msg("the CUDA backend has no swiglu_gate_up"); goto done; }
    TRY(act_pair(&x, x_dt, randn(M * D, 1.0f, x_dt == BF16), SHAPE(M, D)));
    TRY(weight_pair(&wg, w_dt, 2, F, D, 1.5f / sqrtf((float)D), 0.0f, blk, blk));
    TRY(weight_pair(&wu, w_dt, 2, F, D, 1.5f / sqrtf((float)D), 0.0f, blk, blk));
    TRY(out_pair(&y, x_dt, SHAPE(M, F)));
    TRY(out_pair(&gate, x_dt, SHAPE(M, F)));
    TRY(out_pair(&up, x_dt, SHAPE(M, F)));
    TRY(cpu->ops->matmul(cpu, gate.c, x.c, wg.c));
    TRY(cpu->ops->matmul(cpu, up.c, x.c, wu.c));
    TRY(cpu->ops->swiglu(cpu, y.c, gate.c, up.c, 7.0f));
    TRY(gpu->ops->swiglu_gate_up(gpu, y.g, x.g, wg.g, wu.g, 7.0f));
    compare(NULL, y.c, y.g, THR(x_dt, w_dt));
done:
    check_end();
}

/* --- normalisation ---------------------------------------------------------------------------------------- */
enum norm_kind { NORM_RMS, NORM_LAYER, NORM_L2, NORM_SOFTMAX };

static void check_norm(enum norm_kind kind, int64_t M, int64_t D, int dt, int w_dt, bool in_place) {
    static const char *names[] = {"rmsnorm", "layernorm", "l2norm", "softmax"};
    char dts[48];
    snprintf(dts, sizeof dts, "x:%s w:%s", dt_name(dt), w_dt >= 0 ? dt_name(w_dt) : "none");
    check_begin(names[kind], dts, "%lldx%lld%s", (long long)M, (long long)D, in_place ? " in-place" : "");
    tpair x = {0}, y = {0}, w = {0}, b = {0};
    float *xv = randn(M * D, kind == NORM_SOFTMAX ? 3.0f : 1.0f, dt == BF16);
    if (kind == NORM_LAYER)
        for (int64_t i = 0; i < M * D; i++) xv[i] = dt == BF16 ? glm53_round_bf16(xv[i] + 2.0f) : xv[i] + 2.0f;
    TRY(act_pair(&x, dt, xv, SHAPE(M, D)));
    if (w_dt >= 0) TRY(weight_pair(&w, w_dt, 1, 1, D, 0.3f, 1.0f, 0, 0));
    if (w_dt >= 0 && kind == NORM_LAYER) TRY(weight_pair(&b, w_dt, 1, 1, D, 0.3f, 0.0f, 0, 0));
    if (in_place) y = x;
    else TRY(out_pair(&y, dt, SHAPE(M, D)));
    switch (kind) {
    case NORM_RMS:
        TRY(cpu->ops->rmsnorm(cpu, y.c, x.c, w.c, 1e-5f));
        TRY(gpu->ops->rmsnorm(gpu, y.g, x.g, w.g, 1e-5f));
        break;
    case NORM_LAYER:
        TRY(cpu->ops->layernorm(cpu, y.c, x.c, w.c, b.c, 1e-6f));
        TRY(gpu->ops->layernorm(gpu, y.g, x.g, w.g, b.g, 1e-6f));
        break;
    case NORM_L2:
        TRY(cpu->ops->l2norm(cpu, y.c, x.c, 1e-6f, 0.0883883f));
        TRY(gpu->ops->l2norm(gpu, y.g, x.g, 1e-6f, 0.0883883f));
        break;
    case NORM_SOFTMAX:
        TRY(cpu->ops->softmax(cpu, y.c, x.c));
        TRY(gpu->ops->softmax(gpu, y.g, x.g));
        break;
    }
    /* A softmax row's denominator is one F32 sum of D terms; the two backends add in different orders, so their
     * outputs legitimately differ by about sqrt(D) ulps of that sum (2.3e-5 relative at D = 154880), above the
     * 1e-5 of short reductions. */
    double thr = THR(dt, w_dt);
    if (kind == NORM_SOFTMAX && thr < 1e-2) thr = fmax(thr, 4.0 * sqrt((double)D) * FLT_EPSILON / 2);
    compare(NULL, y.c, y.g, thr);
done:
    check_end();
}

/* A backend made with GLM53_CUDA_KDA_ROWS=0 while `gpu` has it on (main turns it on): kda_gate and rmsnorm_gated in
 * their many-rows forms must give the bits of the kernels they replace ("bits"). */
static glm53_backend *kda_rows_plain;

/* Records "bits": passed when `mine` and `plain` (the same op on kda_rows_plain) agree in every bit. */
static glm53_status record_kda_rows_bits(const glm53_tensor *mine, const glm53_tensor *plain) {
    int64_t differing = 0;
    GLM53_TRY(count_differing_from(kda_rows_plain, mine, plain, &differing));
    char note[96] = "";
    if (differing) snprintf(note, sizeof note, "%lld values differ from GLM53_CUDA_KDA_ROWS=0's", (long long)differing);
    record("bits", (double)differing, 0.0, differing == 0, note);
    return GLM53_OK;
}

static void check_rmsnorm_gated(int64_t M, int64_t d, int dt, int w_dt, bool in_place) {
    char dts[48];
    snprintf(dts, sizeof dts, "x:%s w:%s", dt_name(dt), dt_name(w_dt));
    check_begin("rmsnorm_gated", dts, "%lldx%lld%s", (long long)M, (long long)d, in_place ? " in-place" : "");
    tpair x = {0}, gate = {0}, w = {0}, y = {0};
    NEED(rmsnorm_gated);
    TRY(act_pair(&x, dt, randn(M * d, 1.0f, dt == BF16), SHAPE(M, d)));
    TRY(act_pair(&gate, dt, randn(M * d, 2.0f, dt == BF16), SHAPE(M, d)));
    TRY(weight_pair(&w, w_dt, 1, 1, d, 0.3f, 1.0f, 0, 0));
    if (in_place) y = x;
    else TRY(out_pair(&y, dt, SHAPE(M, d)));
    TRY(cpu->ops->rmsnorm_gated(cpu, y.c, x.c, gate.c, w.c, 1e-5f));
    glm53_tensor *plain = NULL;   /* out of place, before an in-place call overwrites x */
    if (kda_rows_plain) {
        TRY(gpu->ops->sync(gpu));   /* the inputs in place for the other backend's stream */
        TRY(tensor_out(kda_rows_plain, &plain, y.g->dtype, SHAPE(M, d)));
        TRY(kda_rows_plain->ops->rmsnorm_gated(kda_rows_plain, plain, x.g, gate.g, w.g, 1e-5f));
        TRY(kda_rows_plain->ops->sync(kda_rows_plain));   /* done reading x before an in-place call writes it */
    }
    TRY(gpu->ops->rmsnorm_gated(gpu, y.g, x.g, gate.g, w.g, 1e-5f));
    compare(NULL, y.c, y.g, THR(dt, w_dt));
    if (plain) TRY(record_kda_rows_bits(y.g, plain));
done:
    check_end();
}

/* --- elementwise ------------------------------------------------------------------------------------------ */
static void check_unary(glm53_unary_op op, int64_t M, int64_t N, int dt) {
    static const char *names[] = {"sigmoid", "silu", "gelu", "softplus", "exp", "relu"};
    char name[40];
    snprintf(name, sizeof name, "unary.%s", names[op]);
    check_begin(name, dt_name(dt), "%lldx%lld", (long long)M, (long long)N);
    tpair x = {0}, y = {0};
    /* softplus: some inputs past its threshold 20; exp: moderate inputs so the largest does not dwarf the rest */
    float scale = op == GLM53_UNARY_SOFTPLUS ? 12.0f : op == GLM53_UNARY_EXP ? 1.5f : 4.0f;
    TRY(act_pair(&x, dt, randn(M * N, scale, dt == BF16), SHAPE(M, N)));
    TRY(out_pair(&y, dt, SHAPE(M, N)));
    TRY(cpu->ops->unary(cpu, y.c, x.c, op));
    TRY(gpu->ops->unary(gpu, y.g, x.g, op));
    compare(NULL, y.c, y.g, THR(dt));
done:
    check_end();
}

static void check_binary(glm53_binary_op op, int64_t M, int64_t N, int dt, bool broadcast, bool in_place) {
    check_begin(op == GLM53_BINARY_ADD ? "binary.add" : "binary.mul", dt_name(dt), "%lldx%lld%s%s", (long long)M,
                (long long)N, broadcast ? " b row" : "", in_place ? " in-place" : "");
    tpair a = {0}, b = {0}, y = {0};
    TRY(act_pair(&a, dt, randn(M * N, 1.0f, dt == BF16), SHAPE(M, N)));
    if (broadcast) TRY(act_pair(&b, dt, randn(N, 1.0f, dt == BF16), SHAPE(N)));
    else TRY(act_pair(&b, dt, randn(M * N, 1.0f, dt == BF16), SHAPE(M, N)));
    if (in_place) y = a;
    else TRY(out_pair(&y, dt, SHAPE(M, N)));
    TRY(cpu->ops->binary(cpu, y.c, a.c, b.c, op));
    TRY(gpu->ops->binary(gpu, y.g, a.g, b.g, op));
    compare(NULL, y.c, y.g, THR(dt));
done:
    check_end();
}

static void check_axpby(int64_t M, int64_t N, int dt, float alpha, float beta, bool in_place) {
    check_begin("axpby", dt_name(dt), "%lldx%lld a %g b %g%s", (long long)M, (long long)N, alpha, beta,
                in_place ? " in-place" : "");
    tpair x = {0}, y = {0};
    TRY(act_pair(&x, dt, randn(M * N, 1.0f, dt == BF16), SHAPE(M, N)));
    if (in_place) y = x;
    else if (beta == 0.0f) TRY(out_pair(&y, dt, SHAPE(M, N)));   /* NaN-poisoned: beta 0 must not read it */
    else TRY(act_pair(&y, dt, randn(M * N, 1.0f, dt == BF16), SHAPE(M, N)));
    TRY(cpu->ops->axpby(cpu, y.c, x.c, alpha, beta));
    TRY(gpu->ops->axpby(gpu, y.g, x.g, alpha, beta));
    compare(NULL, y.c, y.g, THR(dt));
done:
    check_end();
}

static void check_swiglu(int64_t M, int64_t F, int dt, float limit) {
    check_begin("swiglu", dt_name(dt), "%lldx%lld limit %g", (long long)M, (long long)F, limit);
    tpair g = {0}, u = {0}, y = {0};
    TRY(act_pair(&g, dt, randn(M * F, 6.0f, dt == BF16), SHAPE(M, F)));
    TRY(act_pair(&u, dt, randn(M * F, 6.0f, dt == BF16), SHAPE(M, F)));
    TRY(out_pair(&y, dt, SHAPE(M, F)));
    TRY(cpu->ops->swiglu(cpu, y.c, g.c, u.c, limit));
    TRY(gpu->ops->swiglu(gpu, y.g, g.g, u.g, limit));
    compare(NULL, y.c, y.g, THR(dt));
done:
    check_end();
}

static void check_conv1d(int64_t T, int64_t C, int64_t K, int dt, int w_dt) {
    char dts[48];
    snprintf(dts, sizeof dts, "x:%s w:%s", dt_name(dt), dt_name(w_dt));
    check_begin("conv1d_causal", dts, "T %lld C %lld K %lld", (long long)T, (long long)C, (long long)K);
    tpair x = {0}, w = {0}, y = {0};
    TRY(act_pair(&x, dt, randn((T + K - 1) * C, 1.0f, dt == BF16), SHAPE(T + K - 1, C)));
    TRY(weight_pair(&w, w_dt, 2, C, K, 0.5f, 0.0f, 0, 0));
    TRY(out_pair(&y, dt, SHAPE(T, C)));
    TRY(cpu->ops->conv1d_causal(cpu, y.c, x.c, w.c));
    TRY(gpu->ops->conv1d_causal(gpu, y.g, x.g, w.g));
    compare(NULL, y.c, y.g, THR(dt, w_dt));
done:
    check_end();
}

/* --- selection and indexing ------------------------------------------------------------------------------- */
/* levels > 0: values drawn from that many distinct levels (many ties); nan_every > 0: every that many a NaN;
 * n_valid > 0: only columns [0, n_valid) compete (the padded vocabulary rows of the step's top-k). */
static void check_topk(int64_t M, int64_t N, int32_t k, int levels, int nan_every, int64_t n_valid) {
    check_begin("topk", "f32", "%lldx%lld k %d%s%s n_valid %lld", (long long)M, (long long)N, k, levels ? " ties" : "",
                nan_every ? " NaNs" : "", (long long)n_valid);
    tpair x = {0}, vals = {0}, idx = {0};
    float *xv = randn(M * N, 1.0f, false);
    for (int64_t i = 0; i < M * N; i++) {
        if (levels) xv[i] = (float)rand_below(levels);
        if (nan_every && rand_below(nan_every) == 0) xv[i] = NAN;
    }
    TRY(act_pair(&x, F32, xv, SHAPE(M, N)));
    TRY(out_pair(&vals, F32, SHAPE(M, k)));
    TRY(out_pair(&idx, I32, SHAPE(M, k)));
    TRY(cpu->ops->topk(cpu, vals.c, idx.c, x.c, k, n_valid));
    TRY(gpu->ops->topk(gpu, vals.g, idx.g, x.g, k, n_valid));
    if (compare_i32("idx", idx.c, idx.g, k, false)) compare("vals", vals.c, vals.g, 0.0);
done:
    check_end();
}

static void check_gather(int64_t V, int64_t D, int64_t M, int table_dt, int y_dt) {
    char dts[48];
    snprintf(dts, sizeof dts, "table:%s y:%s", dt_name(table_dt), dt_name(y_dt));
    check_begin("gather_rows", dts, "%lld of %lldx%lld", (long long)M, (long long)V, (long long)D);
    tpair table = {0}, ids = {0}, y = {0};
    TRY(weight_pair(&table, table_dt, 2, V, D, 1.0f, 0.0f, 128, 128));
    int32_t *id = hmem((size_t)M * sizeof(int32_t));
    for (int64_t m = 0; m < M; m++) id[m] = (int32_t)rand_below(V);
    TRY(i32_pair(&ids, id, SHAPE(M)));
    TRY(out_pair(&y, y_dt, SHAPE(M, D)));
    TRY(cpu->ops->gather_rows(cpu, y.c, table.c, ids.c));
    TRY(gpu->ops->gather_rows(gpu, y.g, table.g, ids.g));
    compare(NULL, y.c, y.g, THR(table_dt, y_dt));
done:
    check_end();
}

static void check_scatter(int64_t V, int64_t D, int64_t M, int dt) {
    check_begin("scatter_rows", dt_name(dt), "%lld into %lldx%lld", (long long)M, (long long)V, (long long)D);
    tpair x = {0}, ids = {0}, y = {0};
    TRY(act_pair(&y, dt, randn(V * D, 1.0f, dt == BF16), SHAPE(V, D)));
    TRY(act_pair(&x, dt, randn(M * D, 1.0f, dt == BF16), SHAPE(M, D)));
    int32_t *id = hmem((size_t)M * sizeof(int32_t)), *scratch = hmem((size_t)V * sizeof(int32_t));
    rand_distinct(id, M, V, scratch);
    TRY(i32_pair(&ids, id, SHAPE(M)));
    TRY(cpu->ops->scatter_rows(cpu, y.c, x.c, ids.c));
    TRY(gpu->ops->scatter_rows(gpu, y.g, x.g, ids.g));
    compare(NULL, y.c, y.g, 0.0);
done:
    check_end();
}

/* --- mHC -------------------------------------------------------------------------------------------------- */
static void check_mhc_expand(int64_t N, int64_t S, int64_t D, int dt) {
    check_begin("mhc_expand", dt_name(dt), "N %lld S %lld D %lld", (long long)N, (long long)S, (long long)D);
    tpair x = {0}, H = {0};
    NEED(mhc_expand);
    TRY(act_pair(&x, dt, randn(N * D, 1.0f, dt == BF16), SHAPE(N, D)));
    TRY(out_pair(&H, dt, SHAPE(N, S, D)));
    TRY(cpu->ops->mhc_expand(cpu, H.c, x.c));
    TRY(gpu->ops->mhc_expand(gpu, H.g, x.g));
    compare(NULL, H.c, H.g, THR(dt));
done:
    check_end();
}

static void check_mhc_pre(int64_t N, int64_t S, int64_t D, int dt, int fn_dt) {
    char dts[48];
    snprintf(dts, sizeof dts, "H:%s fn:%s", dt_name(dt), dt_name(fn_dt));
    check_begin("mhc_pre", dts, "N %lld S %lld D %lld", (long long)N, (long long)S, (long long)D);
    tpair H = {0}, fn = {0}, base = {0}, scale = {0}, x = {0}, post = {0}, comb = {0};
    NEED(mhc_pre);
    int64_t n_mix = (2 + S) * S;
    TRY(act_pair(&H, dt, randn(N * S * D, 1.0f, dt == BF16), SHAPE(N, S, D)));
    /* fn ~ 1/sqrt(S*D) so that the 24 mixes are O(1): Sinkhorn then sees a non-trivial matrix */
    TRY(weight_pair(&fn, fn_dt, 2, n_mix, S * D, 1.0f / sqrtf((float)(S * D)), 0.0f, 0, 0));
    TRY(weight_pair(&base, F32, 1, 1, n_mix, 0.5f, 0.0f, 0, 0));
    float sc[3] = {0.8f, 1.1f, 1.3f};
    TRY(tensor_from(cpu, &scale.c, F32, sc, SHAPE(3)));
    TRY(tensor_from(gpu, &scale.g, F32, sc, SHAPE(3)));
    TRY(out_pair(&x, dt, SHAPE(N, D)));
    TRY(out_pair(&post, F32, SHAPE(N, S)));
    TRY(out_pair(&comb, F32, SHAPE(N, S, S)));
    TRY(cpu->ops->mhc_pre(cpu, x.c, post.c, comb.c, H.c, fn.c, base.c, scale.c, 1e-5f, 1e-6f, 20));
    TRY(gpu->ops->mhc_pre(gpu, x.g, post.g, comb.g, H.g, fn.g, base.g, scale.g, 1e-5f, 1e-6f, 20));
    double thr = THR(dt, fn_dt);
    compare("x", x.c, x.g, thr);
    compare("post", post.c, post.g, thr);
    compare("comb", comb.c, comb.g, thr);
done:
    check_end();
}

/* mhc_pre on N rows at once gives each row the bits it gets alone (decode rows equal verification rows). */
static void check_mhc_pre_rows_invariant(int64_t N, int64_t S, int64_t D) {
    check_begin("mhc_pre rows invariant", "H:bf16 fn:bf16", "N %lld S %lld D %lld", (long long)N, (long long)S,
                (long long)D);
    tpair H = {0}, fn = {0}, base = {0}, scale = {0}, x = {0}, post = {0}, comb = {0};
    tpair x1 = {0}, post1 = {0}, comb1 = {0};
    NEED(mhc_pre);
    int64_t n_mix = (2 + S) * S;
    TRY(act_pair(&H, BF16, randn(N * S * D, 1.0f, true), SHAPE(N, S, D)));
    TRY(weight_pair(&fn, BF16, 2, n_mix, S * D, 1.0f / sqrtf((float)(S * D)), 0.0f, 0, 0));
    TRY(weight_pair(&base, F32, 1, 1, n_mix, 0.5f, 0.0f, 0, 0));
    float sc[3] = {0.8f, 1.1f, 1.3f};
    TRY(tensor_from(gpu, &scale.g, F32, sc, SHAPE(3)));
    TRY(out_pair(&x, BF16, SHAPE(N, D)));
    TRY(out_pair(&post, F32, SHAPE(N, S)));
    TRY(out_pair(&comb, F32, SHAPE(N, S, S)));
    TRY(out_pair(&x1, BF16, SHAPE(N, D)));
    TRY(out_pair(&post1, F32, SHAPE(N, S)));
    TRY(out_pair(&comb1, F32, SHAPE(N, S, S)));
    TRY(gpu->ops->mhc_pre(gpu, x.g, post.g, comb.g, H.g, fn.g, base.g, scale.g, 1e-5f, 1e-6f, 20));
    for (int64_t n = 0; n < N; n++) {
        glm53_tensor Hn = glm53_tensor_rows_view(H.g, n, 1), xn = glm53_tensor_rows_view(x1.g, n, 1);
        glm53_tensor pn = glm53_tensor_rows_view(post1.g, n, 1), cn = glm53_tensor_rows_view(comb1.g, n, 1);
        TRY(gpu->ops->mhc_pre(gpu, &xn, &pn, &cn, &Hn, fn.g, base.g, scale.g, 1e-5f, 1e-6f, 20));
    }
    int64_t differing = 0;
    TRY(count_differing(x.g, x1.g, &differing));
    TRY(count_differing(post.g, post1.g, &differing));
    TRY(count_differing(comb.g, comb1.g, &differing));
    record_differing(differing, "values differ between one call and row-by-row calls");
done:
    check_end();
}

static void check_mhc_post(int64_t N, int64_t S, int64_t D, int dt) {
    check_begin("mhc_post", dt_name(dt), "N %lld S %lld D %lld", (long long)N, (long long)S, (long long)D);
    tpair y = {0}, Hin = {0}, post = {0}, comb = {0}, Hout = {0};
    NEED(mhc_post);
    TRY(act_pair(&y, dt, randn(N * D, 1.0f, dt == BF16), SHAPE(N, D)));
    TRY(act_pair(&Hin, dt, randn(N * S * D, 1.0f, dt == BF16), SHAPE(N, S, D)));
    TRY(act_pair(&post, F32, randu(N * S, 0.0f, 2.0f, false), SHAPE(N, S)));
    TRY(act_pair(&comb, F32, randu(N * S * S, 0.0f, 0.5f, false), SHAPE(N, S, S)));
    TRY(out_pair(&Hout, dt, SHAPE(N, S, D)));
    TRY(cpu->ops->mhc_post(cpu, Hout.c, y.c, Hin.c, post.c, comb.c));
    TRY(gpu->ops->mhc_post(gpu, Hout.g, y.g, Hin.g, post.g, comb.g));
    compare(NULL, Hout.c, Hout.g, THR(dt));
done:
    check_end();
}

/* mhc_site (one site between two blocks, fused; optional on a backend) at S = 4 with BF16 rows: (a) the CUDA op
 * chain it replaces (mhc_post, mhc_pre, rmsnorm) must give the same bits in H_out, x, xn, post and comb; (b) the
 * CPU chain, within the BF16 thresholds. The op runs twice, the second time into fresh poisoned outputs, so a row
 * ticket that did not go back to zero shows as unwritten values. with_post 0: the first site (no post step). */
static void check_mhc_site(int64_t N, int64_t D, int with_post) {
    const int64_t S = 4, n_mix = (2 + S) * S;
    const float eps = 1e-5f;
    check_begin("mhc_site", "H:bf16 fn:bf16", "N %lld S 4 D %lld%s", (long long)N, (long long)D,
                with_post ? "" : " no post");
    tpair H = {0}, y = {0}, fn = {0}, base = {0}, norm = {0}, scale = {0}, Ho = {0}, x = {0}, xn = {0};
    tpair post = {0}, comb = {0};
    glm53_tensor *post_chain = NULL, *comb_chain = NULL, *Ho_chain = NULL, *x_chain = NULL, *xn_chain = NULL;
    if (!gpu->ops->mhc_site) {
        fail_msg("the CUDA backend has no mhc_site (GLM53_CUDA_MHC_SITE=0?)");
        goto done;
    }
    float *pv = randu(N * S, 0.0f, 2.0f, false), *cv = randu(N * S * S, 0.0f, 0.5f, false);
    float sc[3] = {0.8f, 1.1f, 1.3f};
    TRY(act_pair(&H, BF16, randn(N * S * D, 1.0f, true), SHAPE(N, S, D)));
    TRY(act_pair(&y, BF16, randn(N * D, 1.0f, true), SHAPE(N, D)));
    TRY(weight_pair(&fn, BF16, 2, n_mix, S * D, 1.0f / sqrtf((float)(S * D)), 0.0f, 0, 0));
    TRY(weight_pair(&base, F32, 1, 1, n_mix, 0.5f, 0.0f, 0, 0));
    TRY(weight_pair(&norm, BF16, 1, 1, D, 0.2f, 1.0f, 0, 0));
    TRY(tensor_from(cpu, &scale.c, F32, sc, SHAPE(3)));
    TRY(tensor_from(gpu, &scale.g, F32, sc, SHAPE(3)));
    /* the fused op, twice (post and comb are in and out: each call starts from the previous site's values) */
    for (int call = 0; call < 2; call++) {
        glm53_tensor *p = NULL, *c = NULL, *h = NULL, *xo = NULL, *xno = NULL;
        TRY(tensor_from(gpu, &p, F32, pv, SHAPE(N, S)));
        TRY(tensor_from(gpu, &c, F32, cv, SHAPE(N, S, S)));
        TRY(tensor_out(gpu, &h, BF16, SHAPE(N, S, D)));
        TRY(tensor_out(gpu, &xo, BF16, SHAPE(N, D)));
        TRY(tensor_out(gpu, &xno, BF16, SHAPE(N, D)));
        const glm53_mhc_site site = {.H_out = h, .x = xo, .xn = xno, .post = p, .comb = c, .y = with_post ? y.g : NULL,
                                     .H_in = H.g, .fn = fn.g, .base = base.g, .scale = scale.g, .norm = norm.g,
                                     .rms_eps = eps, .hc_eps = 1e-6f, .norm_eps = eps, .sinkhorn_iters = 20};
        TRY(gpu->ops->mhc_site(gpu, &site));
        post.g = p, comb.g = c, Ho.g = h, x.g = xo, xn.g = xno;   /* the second call's are compared */
    }
    /* the CUDA chain */
    TRY(tensor_from(gpu, &post_chain, F32, pv, SHAPE(N, S)));
    TRY(tensor_from(gpu, &comb_chain, F32, cv, SHAPE(N, S, S)));
    TRY(tensor_out(gpu, &Ho_chain, BF16, SHAPE(N, S, D)));
    TRY(tensor_out(gpu, &x_chain, BF16, SHAPE(N, D)));
    TRY(tensor_out(gpu, &xn_chain, BF16, SHAPE(N, D)));
    if (with_post) TRY(gpu->ops->mhc_post(gpu, Ho_chain, y.g, H.g, post_chain, comb_chain));
    TRY(gpu->ops->mhc_pre(gpu, x_chain, post_chain, comb_chain, with_post ? Ho_chain : H.g, fn.g, base.g, scale.g,
                          eps, 1e-6f, 20));
    TRY(gpu->ops->rmsnorm(gpu, xn_chain, x_chain, norm.g, eps));
    int64_t differing = 0;
    if (with_post) TRY(count_differing(Ho.g, Ho_chain, &differing));
    TRY(count_differing(x.g, x_chain, &differing));
    TRY(count_differing(xn.g, xn_chain, &differing));
    TRY(count_differing(post.g, post_chain, &differing));
    TRY(count_differing(comb.g, comb_chain, &differing));
    record_differing(differing, "values differ from the CUDA op chain's");
    /* the CPU chain */
    TRY(tensor_from(cpu, &post.c, F32, pv, SHAPE(N, S)));
    TRY(tensor_from(cpu, &comb.c, F32, cv, SHAPE(N, S, S)));
    TRY(tensor_out(cpu, &Ho.c, F32, SHAPE(N, S, D)));
    TRY(tensor_out(cpu, &x.c, F32, SHAPE(N, D)));
    TRY(tensor_out(cpu, &xn.c, F32, SHAPE(N, D)));
    if (with_post) TRY(cpu->ops->mhc_post(cpu, Ho.c, y.c, H.c, post.c, comb.c));
    TRY(cpu->ops->mhc_pre(cpu, x.c, post.c, comb.c, with_post ? Ho.c : H.c, fn.c, base.c, scale.c, eps, 1e-6f, 20));
    TRY(cpu->ops->rmsnorm(cpu, xn.c, x.c, norm.c, eps));
    double thr = THR(BF16);
    if (with_post) compare("H_out", Ho.c, Ho.g, thr);
    compare("x", x.c, x.g, thr);
    compare("xn", xn.c, xn.g, thr);
    compare("post", post.c, post.g, thr);
    compare("comb", comb.c, comb.g, thr);
done:
    check_end();
}

/* mhc_site refuses what it does not take (F32 rows here) with GLM53_ERR_UNSUPPORTED, and writes nothing. */
static void check_mhc_site_refuses(void) {
    const int64_t N = 2, S = 4, D = 64, n_mix = (2 + S) * S;
    check_begin("mhc_site refuses", "H:f32", "N 2 S 4 D 64");
    glm53_tensor *H = NULL, *x = NULL, *xn = NULL, *post = NULL, *comb = NULL, *fn = NULL, *base = NULL;
    glm53_tensor *norm = NULL, *scale = NULL;
    if (!gpu->ops->mhc_site) {
        fail_msg("the CUDA backend has no mhc_site (GLM53_CUDA_MHC_SITE=0?)");
        goto done;
    }
    float sc[3] = {0.8f, 1.1f, 1.3f};
    TRY(tensor_from(gpu, &H, F32, randn(N * S * D, 1.0f, false), SHAPE(N, S, D)));
    TRY(tensor_out(gpu, &x, F32, SHAPE(N, D)));
    TRY(tensor_out(gpu, &xn, F32, SHAPE(N, D)));
    TRY(tensor_out(gpu, &post, F32, SHAPE(N, S)));
    TRY(tensor_out(gpu, &comb, F32, SHAPE(N, S, S)));
    TRY(tensor_from(gpu, &fn, BF16, randn(n_mix * S * D, 0.1f, true), SHAPE(n_mix, S * D)));
    TRY(tensor_from(gpu, &base, F32, randn(n_mix, 0.5f, false), SHAPE(n_mix)));
    TRY(tensor_from(gpu, &norm, BF16, randn(D, 1.0f, true), SHAPE(D)));
    TRY(tensor_from(gpu, &scale, F32, sc, SHAPE(3)));
    const glm53_mhc_site site = {.x = x, .xn = xn, .post = post, .comb = comb, .H_in = H, .fn = fn, .base = base,
                                 .scale = scale, .norm = norm, .rms_eps = 1e-5f, .hc_eps = 1e-6f, .norm_eps = 1e-5f,
                                 .sinkhorn_iters = 20};
    glm53_status st = gpu->ops->mhc_site(gpu, &site);
    glm53_clear_error();
    float *xv = hmem((size_t)(N * D) * sizeof(float));
    TRY(fetch_f32(gpu, x, xv));
    int64_t written = 0;
    for (int64_t i = 0; i < N * D; i++) written += !isnan(xv[i]);
    record("status", st == GLM53_ERR_UNSUPPORTED ? 0.0 : 1.0, 0.0, st == GLM53_ERR_UNSUPPORTED && written == 0,
           st != GLM53_ERR_UNSUPPORTED ? "not GLM53_ERR_UNSUPPORTED" : written ? "wrote x" : "");
done:
    check_end();
}

static void check_mhc_mean(int64_t N, int64_t S, int64_t D, int dt) {
    check_begin("mhc_mean", dt_name(dt), "N %lld S %lld D %lld", (long long)N, (long long)S, (long long)D);
    tpair H = {0}, y = {0};
    NEED(mhc_mean);
    TRY(act_pair(&H, dt, randn(N * S * D, 1.0f, dt == BF16), SHAPE(N, S, D)));
    TRY(out_pair(&y, dt, SHAPE(N, D)));
    TRY(cpu->ops->mhc_mean(cpu, y.c, H.c));
    TRY(gpu->ops->mhc_mean(gpu, y.g, H.g));
    compare(NULL, y.c, y.g, THR(dt));
done:
    check_end();
}

/* --- KDA -------------------------------------------------------------------------------------------------- */
static void check_kda_gate(int64_t N, int64_t heads, int64_t dk, int dt, int lower_bound) {
    check_begin("kda_gate", dt_name(dt), "N %lld heads %lld dk %lld%s", (long long)N, (long long)heads, (long long)dk,
                lower_bound ? " lower bound" : " softplus");
    tpair f = {0}, A = {0}, dtb = {0}, g = {0};
    NEED(kda_gate);
    int64_t C = heads * dk;
    TRY(act_pair(&f, dt, randn(N * C, 3.0f, dt == BF16), SHAPE(N, C)));
    TRY(weight_pair(&A, F32, 1, 1, heads, 0.5f, 0.0f, 0, 0));
    TRY(weight_pair(&dtb, F32, 1, 1, C, 1.0f, 0.0f, 0, 0));
    TRY(out_pair(&g, F32, SHAPE(N, C)));
    TRY(cpu->ops->kda_gate(cpu, g.c, f.c, A.c, dtb.c, lower_bound, -5.0f));
    TRY(gpu->ops->kda_gate(gpu, g.g, f.g, A.g, dtb.g, lower_bound, -5.0f));
    compare(NULL, g.c, g.g, THR(dt));
    if (kda_rows_plain) {
        glm53_tensor *plain = NULL;
        TRY(gpu->ops->sync(gpu));
        TRY(tensor_out(kda_rows_plain, &plain, F32, SHAPE(N, C)));
        TRY(kda_rows_plain->ops->kda_gate(kda_rows_plain, plain, f.g, A.g, dtb.g, lower_bound, -5.0f));
        TRY(record_kda_rows_bits(g.g, plain));
    }
done:
    check_end();
}

/* The state ring [ring, H, dk, dv]: slot 0 holds the state the recurrence starts from. snap_every > 0: a snapshot
 * after every snap_every-th row (and the last) in slots 1, 2, ...; snap_last_is_state: the last row's state goes
 * back to slot 0, the slot it was read from (a ring of one; allowed by the contract). Without snapshots the last
 * row writes slot 0 too. */
/* q and k rows [rows, dk] as the model feeds the recurrence: L2-normalised per head, q also times dk^-1/2, rounded
 * to BF16 for BF16 cases (the test's host memory). */
static void kda_test_qk(int64_t rows, int64_t dk, int dt, float **q, float **k) {
    float *qv = randn(rows * dk, 1.0f, false), *kv = randn(rows * dk, 1.0f, false);
    for (int64_t r = 0; r < rows; r++) {
        double sq = 0, sk = 0;
        for (int64_t i = 0; i < dk; i++) sq += (double)qv[r * dk + i] * qv[r * dk + i], sk += (double)kv[r * dk + i] * kv[r * dk + i];
        for (int64_t i = 0; i < dk; i++) {
            qv[r * dk + i] = (float)(qv[r * dk + i] / sqrt(sq) / sqrt((double)dk));
            kv[r * dk + i] = (float)(kv[r * dk + i] / sqrt(sk));
            if (dt == BF16) qv[r * dk + i] = glm53_round_bf16(qv[r * dk + i]), kv[r * dk + i] = glm53_round_bf16(kv[r * dk + i]);
        }
    }
    *q = qv;
    *k = kv;
}

/* kda_recurrent's outputs on both backends compared: o, and every state the slots kept (the last row's as "state",
 * the others as "snapT"). */
static void kda_compare_recurrent(const tpair *o, const tpair *states, const int32_t *slot_of, int64_t T, double thr) {
    compare("o", o->c, o->g, thr);
    for (int64_t t = 0; t < T; t++) {
        if (slot_of[1 + t] < 0) continue;
        glm53_tensor sc = glm53_tensor_rows_view(states->c, slot_of[1 + t], 1);
        glm53_tensor sg = glm53_tensor_rows_view(states->g, slot_of[1 + t], 1);
        char what[24];
        snprintf(what, sizeof what, t == T - 1 ? "state" : "snap%lld", (long long)t);
        compare(what, &sc, &sg, thr);
    }
}

/* The recurrence over T rows in one call equals T one-row calls, bit for bit (CUDA only): a speculative
 * verification chunk must give a decode step's bits. err is the number of differing values (outputs and state). */
static void check_kda_rows_invariant(int64_t H, int64_t dk, int64_t dv, int64_t T, int dt) {
    check_begin("kda_recurrent rows invariant", dt_name(dt), "H %lld dk %lld dv %lld T %lld", (long long)H,
                (long long)dk, (long long)dv, (long long)T);
    tpair q = {0}, k = {0}, v = {0}, g = {0}, beta = {0}, o_all = {0}, o_one = {0}, s_all = {0}, s_one = {0};
    tpair slots_all = {0}, slots_one = {0};
    NEED(kda_recurrent);
    int64_t rows = T * H;
    float *qv = randn(rows * dk, 0.1f, dt == BF16), *kv = randn(rows * dk, 0.1f, dt == BF16);
    float *gv = randn(rows * dk, 1.0f, false), *bv = randn(rows, 1.0f, false), *sv = randn(H * dk * dv, 0.1f, false);
    for (int64_t i = 0; i < rows * dk; i++) gv[i] = -5.0f / (1.0f + expf(-gv[i]));
    for (int64_t i = 0; i < rows; i++) bv[i] = 1.0f / (1.0f + expf(-bv[i]));
    int32_t *all_slots = hmem((size_t)(T + 1) * sizeof(int32_t)), one_slots[2] = {0, 0};
    for (int64_t t = 0; t <= T; t++) all_slots[t] = t == 0 || t == T ? 0 : -1;
    TRY(act_pair(&q, dt, qv, SHAPE(T, H, dk)));
    TRY(act_pair(&k, dt, kv, SHAPE(T, H, dk)));
    TRY(act_pair(&v, dt, randn(rows * dv, 1.0f, dt == BF16), SHAPE(T, H, dv)));
    TRY(act_pair(&g, F32, gv, SHAPE(T, H, dk)));
    TRY(act_pair(&beta, F32, bv, SHAPE(T, H)));
    TRY(act_pair(&s_all, F32, sv, SHAPE(1, H, dk, dv)));
    TRY(act_pair(&s_one, F32, sv, SHAPE(1, H, dk, dv)));
    TRY(i32_pair(&slots_all, all_slots, SHAPE(T + 1)));
    TRY(i32_pair(&slots_one, one_slots, SHAPE(2)));
    TRY(out_pair(&o_all, dt, SHAPE(T, H, dv)));
    TRY(out_pair(&o_one, dt, SHAPE(T, H, dv)));
    TRY(gpu->ops->kda_recurrent(gpu, o_all.g, q.g, k.g, v.g, g.g, beta.g, s_all.g, slots_all.g));
    for (int64_t t = 0; t < T; t++) {
        glm53_tensor qt = glm53_tensor_rows_view(q.g, t, 1), kt = glm53_tensor_rows_view(k.g, t, 1);
        glm53_tensor vt = glm53_tensor_rows_view(v.g, t, 1), gt = glm53_tensor_rows_view(g.g, t, 1);
        glm53_tensor bt = glm53_tensor_rows_view(beta.g, t, 1), ot = glm53_tensor_rows_view(o_one.g, t, 1);
        TRY(gpu->ops->kda_recurrent(gpu, &ot, &qt, &kt, &vt, &gt, &bt, s_one.g, slots_one.g));
    }
    int64_t differing = 0;
    TRY(count_differing(o_all.g, o_one.g, &differing));
    TRY(count_differing(s_all.g, s_one.g, &differing));
    record_differing(differing, "values differ between one call and row-by-row calls");
done:
    check_end();
}

static void check_kda_recurrent(int64_t H, int64_t dk, int64_t dv, int64_t T, int dt, int snap_every,
                                bool snap_last_is_state) {
    check_begin("kda_recurrent", dt_name(dt), "H %lld dk %lld dv %lld T %lld%s", (long long)H, (long long)dk,
                (long long)dv, (long long)T, snap_every ? (snap_last_is_state ? " snaps(last=state)" : " snaps") : "");
    tpair q = {0}, k = {0}, v = {0}, g = {0}, beta = {0}, o = {0}, states = {0}, slots = {0};
    NEED(kda_recurrent);
    assert(T <= 512);   /* a prefill's stages; the CPU reference's time grows with T */
    int64_t rows = T * H;
    float *qv, *kv;
    kda_test_qk(rows, dk, dt, &qv, &kv);
    float *gv = randn(rows * dk, 1.0f, false), *bv = randn(rows, 1.0f, false);
    for (int64_t i = 0; i < rows * dk; i++) gv[i] = -5.0f / (1.0f + expf(-gv[i]));   /* the lower-bound gate */
    for (int64_t i = 0; i < rows; i++) bv[i] = 1.0f / (1.0f + expf(-bv[i]));
    int32_t *slot_of = hmem((size_t)(T + 1) * sizeof(int32_t));
    int64_t ring = 1;
    slot_of[0] = 0;
    for (int64_t t = 0; t < T; t++) {
        bool snap = snap_every && (t % snap_every == 0 || t == T - 1);
        if (t == T - 1 && (snap_last_is_state || !snap_every)) slot_of[1 + t] = 0;
        else slot_of[1 + t] = snap ? (int32_t)ring++ : -1;
    }
    TRY(act_pair(&q, dt, qv, SHAPE(T, H, dk)));
    TRY(act_pair(&k, dt, kv, SHAPE(T, H, dk)));
    TRY(act_pair(&v, dt, randn(rows * dv, 1.0f, dt == BF16), SHAPE(T, H, dv)));
    TRY(act_pair(&g, F32, gv, SHAPE(T, H, dk)));
    TRY(act_pair(&beta, F32, bv, SHAPE(T, H)));
    TRY(act_pair(&states, F32, randn(ring * H * dk * dv, 0.1f, false), SHAPE(ring, H, dk, dv)));
    TRY(i32_pair(&slots, slot_of, SHAPE(T + 1)));
    TRY(out_pair(&o, dt, SHAPE(T, H, dv)));
    TRY(cpu->ops->kda_recurrent(cpu, o.c, q.c, k.c, v.c, g.c, beta.c, states.c, slots.c));
    TRY(gpu->ops->kda_recurrent(gpu, o.g, q.g, k.g, v.g, g.g, beta.g, states.g, slots.g));
    kda_compare_recurrent(&o, &states, slot_of, T, THR(dt));
done:
    check_end();
}

/* kda_sequences (the fused per-sequence part of a KDA layer, optional on a backend) on a batch of sequences of every
 * kind a step has, against (a) the op-by-op chain of kda_forward's non-fused branch on the same backend, which it
 * must equal bit for bit (o, the state rings and the conv rings: a step gives the same tokens whichever runs), and
 * (b) the CPU backend's kda_sequences, within the usual thresholds. */
typedef struct {
    int64_t T, pos0, ring, conv_width;   /* new rows, length before them, state ring, conv ring rows */
} kda_seq_case;

/* kda_forward's loop body for one sequence on the `gpu` backend, op by op as it runs it: per q, k, v the conv
 * window over [zeros | ring rows | new rows] (fill, gather_rows, copy, conv1d_causal, SiLU, then the kept raw rows
 * into the ring by scatter_rows), the two l2norms, the recurrence. raw[j] [N, C_j], w[j] [C_j, K], o [N, H, dv]. */
static glm53_status kda_chain(glm53_tensor *o, glm53_tensor *const raw[3], glm53_tensor *const w[3],
                              const glm53_tensor *g, const glm53_tensor *beta, const glm53_kda_seq *s, int64_t H,
                              int64_t dk, int64_t dv, float q_scale) {
    const int64_t T = s->n_rows, K = w[0]->shape[1], n_zero = K - 1 - s->n_hist;
    glm53_tensor *cq[3];
    for (int j = 0; j < 3; j++) {
        const int64_t C = raw[j]->shape[1];
        glm53_tensor *xpad;
        GLM53_TRY(new_tensor(gpu, &xpad, raw[j]->dtype, SHAPE(T + K - 1, C)));
        GLM53_TRY(new_tensor(gpu, &cq[j], raw[j]->dtype, SHAPE(T, C)));
        if (n_zero > 0) {
            glm53_tensor zeros = glm53_tensor_rows_view(xpad, 0, n_zero);
            GLM53_TRY(gpu->ops->fill(gpu, &zeros, 0.0f));
        }
        if (s->n_hist > 0) {
            glm53_tensor hist = glm53_tensor_rows_view(xpad, n_zero, s->n_hist);
            GLM53_TRY(gpu->ops->gather_rows(gpu, &hist, s->conv[j], s->conv_hist));
        }
        glm53_tensor dst_new = glm53_tensor_rows_view(xpad, K - 1, T), src_new = glm53_tensor_rows_view(raw[j], s->row0, T);
        GLM53_TRY(gpu->ops->copy(gpu, &dst_new, &src_new));
        GLM53_TRY(gpu->ops->conv1d_causal(gpu, cq[j], xpad, w[j]));
        GLM53_TRY(gpu->ops->unary(gpu, cq[j], cq[j], GLM53_UNARY_SILU));
        glm53_tensor kept = glm53_tensor_rows_view(raw[j], s->row0 + T - s->n_write, s->n_write);
        GLM53_TRY(gpu->ops->scatter_rows(gpu, s->conv[j], &kept, s->conv_write));
    }
    glm53_tensor qh = glm53_tensor_reshape(cq[0], 2, T * H, dk, 0), kh = glm53_tensor_reshape(cq[1], 2, T * H, dk, 0);
    GLM53_TRY(gpu->ops->l2norm(gpu, &qh, &qh, 1e-6f, q_scale));
    GLM53_TRY(gpu->ops->l2norm(gpu, &kh, &kh, 1e-6f, 1.0f));
    glm53_tensor q3 = glm53_tensor_reshape(cq[0], 3, T, H, dk), k3 = glm53_tensor_reshape(cq[1], 3, T, H, dk);
    glm53_tensor v3 = glm53_tensor_reshape(cq[2], 3, T, H, dv), o3 = glm53_tensor_rows_view(o, s->row0, T);
    glm53_tensor g_rows = glm53_tensor_rows_view(g, s->row0, T), b_rows = glm53_tensor_rows_view(beta, s->row0, T);
    glm53_tensor g3 = glm53_tensor_reshape(&g_rows, 3, T, H, dk);
    return gpu->ops->kda_recurrent(gpu, &o3, &q3, &k3, &v3, &g3, &b_rows, s->states, s->slots);
}

/* Downloads tensors[0 .. n) of backend be as floats into one host array (their numels added up in *total). */
static float *fetch_all(glm53_backend *be, glm53_tensor *const *tensors, int n, int64_t *total) {
    *total = 0;
    for (int i = 0; i < n; i++) *total += glm53_tensor_numel(tensors[i]);
    float *all = hmem((size_t)*total * sizeof(float)), *at = all;
    for (int i = 0; i < n; i++) {
        if (!status_ok(fetch_f32(be, tensors[i], at), "download")) return NULL;
        at += glm53_tensor_numel(tensors[i]);
    }
    return all;
}

/* long_rows: a batch with prefills of 64 rows and more (the chunked recurrence's, where a backend has it on)
 * beside decode and short rows (the token kernel's), in one call. */
static void check_kda_sequences_rows(int64_t H, int64_t dk, int64_t dv, int64_t K, int dt, bool long_rows) {
    check_begin(long_rows ? "kda_sequences long" : "kda_sequences", dt_name(dt), "H %lld dk %lld dv %lld K %lld",
                (long long)H, (long long)dk, (long long)dv, (long long)K);
    /* In batch order, so that most sequences start past row 0 of the batch; the conv rings of width K - 1 (no
     * rollback) make a kept row take the slot of the history row just read. */
    const kda_seq_case short_cases[] = {
        {1, 9, 1, K - 1},    /* decode with the whole history (when K <= 10), a state ring of one */
        {20, 0, 3, K + 2},   /* a prefill from the start: the sequential recurrence, two blocks of conv rows */
        {1, 0, 1, K - 1},    /* a first token: no history */
        {2, 1, 2, K + 1},    /* a start with one history row */
        {4, 17, 2, K + 3},   /* a verification chunk whose first two states are not kept (slot -1) */
        {3, 5, 4, K + 3},    /* a verification chunk keeping every state */
        {1, 30, 6, K + 3},   /* decode with a rollback ring */
        {20, 7, 2, K - 1},   /* a prefill chunk after a few rows */
    };
    const kda_seq_case long_cases[] = {
        {64, 0, 1, K - 1},    /* a prefill from the start: two chunks, the last row's state in the ring of one */
        {1, 9, 1, K - 1},     /* decode beside it (the token kernel in the same call) */
        {200, 5, 3, K + 2},   /* a prefill chunk after 5 rows: 7 chunks, the last 3 states kept (inside a chunk) */
        {65, 17, 2, K + 3},   /* 3 chunks, the last of one row: the kept states on both sides of a chunk's end */
        {20, 7, 2, K - 1},    /* a short prefill chunk: the token kernel */
        {130, 0, 6, K + 3},   /* 5 chunks, a rollback ring of 6 */
    };
    const kda_seq_case *cases = long_rows ? long_cases : short_cases;
    enum { N_SEQ_MAX = 8 };
    const int N_SEQ = long_rows ? (int)(sizeof long_cases / sizeof long_cases[0])
                                : (int)(sizeof short_cases / sizeof short_cases[0]);
    assert(N_SEQ <= N_SEQ_MAX);
    const int64_t width[3] = {dk, dk, dv};
    const float q_scale = 1.0f / sqrtf((float)dk);
    const int w_dt[3] = {dt, F32, dt};
    tpair raw[3] = {{0}}, w[3] = {{0}}, g = {0}, beta = {0}, o = {0}, states[N_SEQ_MAX] = {{0}};
    tpair rings[N_SEQ_MAX][3] = {{{0}}}, slots[N_SEQ_MAX] = {{0}}, hist[N_SEQ_MAX] = {{0}}, write[N_SEQ_MAX] = {{0}};
    glm53_tensor *o_chain = NULL, *states_chain[N_SEQ_MAX], *rings_chain[N_SEQ_MAX][3];
    glm53_kda_seq seq_cpu[N_SEQ_MAX], seq_gpu[N_SEQ_MAX], seq_chain[N_SEQ_MAX];
    NEED(kda_sequences);
    int64_t N = 0;
    for (int i = 0; i < N_SEQ; i++) N += cases[i].T;
    for (int j = 0; j < 3; j++) {
        TRY(act_pair(&raw[j], dt, randn(N * H * width[j], 1.0f, dt == BF16), SHAPE(N, H * width[j])));
        TRY(weight_pair(&w[j], w_dt[j], 2, H * width[j], K, 0.5f, 0.0f, 0, 0));
    }
    float *gv = randn(N * H * dk, 1.0f, false), *bv = randn(N * H, 1.0f, false);
    for (int64_t i = 0; i < N * H * dk; i++) gv[i] = -5.0f / (1.0f + expf(-gv[i]));   /* the lower-bound gate */
    for (int64_t i = 0; i < N * H; i++) bv[i] = 1.0f / (1.0f + expf(-bv[i]));
    TRY(act_pair(&g, F32, gv, SHAPE(N, H * dk)));
    TRY(act_pair(&beta, F32, bv, SHAPE(N, H)));
    TRY(out_pair(&o, dt, SHAPE(N, H, dv)));
    TRY(tensor_out(gpu, &o_chain, gpu_dtype(dt), SHAPE(N, H, dv)));

    int64_t row0 = 0;
    for (int i = 0; i < N_SEQ; i++) {
        const kda_seq_case *c = &cases[i];
        const int64_t T = c->T, n_hist = c->pos0 < K - 1 ? c->pos0 : K - 1;
        const int64_t n_write = T < c->conv_width ? T : c->conv_width;
        /* the ring slots as step.c makes them */
        int32_t *sl = hmem((size_t)(T + 1) * sizeof(int32_t)), *hs = hmem((size_t)(n_hist + 1) * sizeof(int32_t));
        int32_t *wr = hmem((size_t)n_write * sizeof(int32_t));
        sl[0] = (int32_t)(c->pos0 % c->ring);
        for (int64_t t = 0; t < T; t++) sl[1 + t] = t >= T - c->ring ? (int32_t)((c->pos0 + t + 1) % c->ring) : -1;
        for (int64_t j = 0; j < n_hist; j++) hs[j] = (int32_t)((c->pos0 - n_hist + j) % c->conv_width);
        for (int64_t j = 0; j < n_write; j++) wr[j] = (int32_t)((c->pos0 + T - n_write + j) % c->conv_width);
        TRY(i32_pair(&slots[i], sl, SHAPE(T + 1)));
        if (n_hist > 0) TRY(i32_pair(&hist[i], hs, SHAPE(n_hist)));
        TRY(i32_pair(&write[i], wr, SHAPE(n_write)));
        /* the same state and conv rings three times: the CPU op's, the CUDA op's and the chain's */
        float *sv = randn(c->ring * H * dk * dv, 0.1f, false);
        TRY(act_pair(&states[i], F32, sv, SHAPE(c->ring, H, dk, dv)));
        TRY(tensor_from(gpu, &states_chain[i], F32, sv, SHAPE(c->ring, H, dk, dv)));
        for (int j = 0; j < 3; j++) {
            float *rv = randn(c->conv_width * H * width[j], 1.0f, dt == BF16);
            TRY(act_pair(&rings[i][j], dt, rv, SHAPE(c->conv_width, H * width[j])));
            TRY(tensor_from(gpu, &rings_chain[i][j], gpu_dtype(dt), rv, SHAPE(c->conv_width, H * width[j])));
        }
        seq_cpu[i] = (glm53_kda_seq){.row0 = row0, .n_rows = T, .n_hist = n_hist, .conv_hist = hist[i].c,
                                     .n_write = n_write, .conv_write = write[i].c,
                                     .conv = {rings[i][0].c, rings[i][1].c, rings[i][2].c}, .states = states[i].c,
                                     .slots = slots[i].c};
        seq_gpu[i] = seq_cpu[i];
        seq_gpu[i].conv_hist = hist[i].g, seq_gpu[i].conv_write = write[i].g, seq_gpu[i].slots = slots[i].g;
        for (int j = 0; j < 3; j++) seq_gpu[i].conv[j] = rings[i][j].g;
        seq_gpu[i].states = states[i].g;
        seq_chain[i] = seq_gpu[i];
        for (int j = 0; j < 3; j++) seq_chain[i].conv[j] = rings_chain[i][j];
        seq_chain[i].states = states_chain[i];
        row0 += T;
    }

    glm53_tensor *raw_g[3] = {raw[0].g, raw[1].g, raw[2].g}, *w_g[3] = {w[0].g, w[1].g, w[2].g};
    const glm53_tensor *raw_c[3] = {raw[0].c, raw[1].c, raw[2].c}, *w_c[3] = {w[0].c, w[1].c, w[2].c};
    const glm53_tensor *raw_gc[3] = {raw[0].g, raw[1].g, raw[2].g}, *w_gc[3] = {w[0].g, w[1].g, w[2].g};
    for (int i = 0; i < N_SEQ; i++) TRY(kda_chain(o_chain, raw_g, w_g, g.g, beta.g, &seq_chain[i], H, dk, dv, q_scale));
    TRY(gpu->ops->kda_sequences(gpu, o.g, raw_gc, w_gc, g.g, beta.g, seq_gpu, N_SEQ, 1e-6f, q_scale));
    TRY(cpu->ops->kda_sequences(cpu, o.c, raw_c, w_c, g.c, beta.c, seq_cpu, N_SEQ, 1e-6f, q_scale));

    /* (a) the chain's bits */
    int64_t differing = 0;
    TRY(count_differing(o_chain, o.g, &differing));
    for (int i = 0; i < N_SEQ; i++) {
        TRY(count_differing(states_chain[i], states[i].g, &differing));
        for (int j = 0; j < 3; j++) TRY(count_differing(rings_chain[i][j], rings[i][j].g, &differing));
    }
    char note[120] = "";
    if (differing) snprintf(note, sizeof note, "%lld values of o, states, conv rings differ from the chain", (long long)differing);
    record("chain bits", (double)differing, 0.0, differing == 0, note);

    /* (b) the CPU op: o and the state rings within the threshold, the conv rings (copies of raw rows) exactly */
    const double thr = THR(dt, w_dt[0], w_dt[1], w_dt[2]);
    compare("o", o.c, o.g, thr);
    glm53_tensor *st_c[N_SEQ_MAX], *st_g[N_SEQ_MAX], *rg_c[3 * N_SEQ_MAX], *rg_g[3 * N_SEQ_MAX];
    for (int i = 0; i < N_SEQ; i++) {
        st_c[i] = states[i].c, st_g[i] = states[i].g;
        for (int j = 0; j < 3; j++) rg_c[3 * i + j] = rings[i][j].c, rg_g[3 * i + j] = rings[i][j].g;
    }
    int64_t n_st, n_rg;
    float *sc = fetch_all(cpu, st_c, N_SEQ, &n_st), *sg = fetch_all(gpu, st_g, N_SEQ, &n_st);
    float *rc = fetch_all(cpu, rg_c, 3 * N_SEQ, &n_rg), *rgv = fetch_all(gpu, rg_g, 3 * N_SEQ, &n_rg);
    if (sc && sg) report_err("states", sg, sc, n_st, thr);
    if (rc && rgv) report_err("conv rings", rgv, rc, n_rg, 0.0);
done:
    check_end();
}

static void check_kda_sequences(int64_t H, int64_t dk, int64_t dv, int64_t K, int dt) {
    check_kda_sequences_rows(H, dk, dv, K, dt, false);
}

/* --- KDA, the chunked recurrence (GLM53_CUDA_KDA_CHUNKED, kda.cu's chunked form) ---------------------------- *
 * Run on two more CUDA backends made with the switch on (it is off by default until a GPU has run it): one with
 * the default pieces of scratch, one with pieces of KDA_TEST_PIECE chunk-heads (a state carried between launches
 * every few chunks). The checks below run with `gpu` pointed at one of them. */
enum { KDA_TEST_PIECE = 8 };
static glm53_backend *gpu_token;      /* the token kernel's backend (GLM53_CUDA_KDA_CHUNKED=0) in the chunked checks */
static glm53_backend *gpu_intra_f32;  /* the F32 intra kernel's backend while `gpu` has GLM53_CUDA_KDA_INTRA_MMA=1 */

typedef enum { KDA_GATE_MIXED, KDA_GATE_STRONG, KDA_GATE_WEAK } kda_gate;
static const char *const kda_gate_name[] = {"mixed", "strong", "weak"};

/* check_kda_chunked's "taken" rows: the same call (F32 outputs) on backend `other`, from its own copy of the
 * initial states sv [ring, H, dk, dv]; some value must differ in its bits from `gpu`'s output o [T, H, dv], or
 * `gpu`'s path did not run (`what`). */
static glm53_status kda_record_taken(glm53_backend *other, const glm53_tensor *o, const tpair *q, const tpair *k,
                                     const tpair *v, const tpair *g, const tpair *beta, const tpair *slots,
                                     const float *sv, int64_t ring, int64_t T, int64_t H, int64_t dk, int64_t dv,
                                     const char *what) {
    glm53_tensor *o_other = NULL, *states_other = NULL;
    GLM53_TRY(gpu->ops->sync(gpu));   /* the two backends run on different streams of the one device */
    GLM53_TRY(tensor_from(other, &states_other, F32, sv, SHAPE(ring, H, dk, dv)));
    GLM53_TRY(tensor_out(other, &o_other, F32, SHAPE(T, H, dv)));
    GLM53_TRY(other->ops->kda_recurrent(other, o_other, q->g, k->g, v->g, g->g, beta->g, states_other, slots->g));
    int64_t differing = 0;
    GLM53_TRY(count_differing_from(other, o, o_other, &differing));
    record_taken(differing, what);
    return GLM53_OK;
}

/* The chunked recurrence against the CPU op: gates mixed (the lower-bound gate -5 sigmoid(x)), strong (the bound
 * -5 itself on 40 of every 50 rows) or weak (in (-1e-3, 0]); states kept after every snap_every-th row from row 3
 * on (so inside chunks) and after the last. Then the same call on gpu_token (the token kernel): some value must
 * differ in its bits (the chunked sums are reordered), or the chunked path was not taken (F32 outputs). */
static void check_kda_chunked(int64_t H, int64_t dk, int64_t dv, int64_t T, int dt, kda_gate gate, int snap_every) {
    check_begin("kda_recurrent chunked", dt_name(dt), "H %lld dk %lld dv %lld T %lld %s%s", (long long)H,
                (long long)dk, (long long)dv, (long long)T, kda_gate_name[gate], snap_every ? " snaps" : "");
    tpair q = {0}, k = {0}, v = {0}, g = {0}, beta = {0}, o = {0}, states = {0}, slots = {0};
    NEED(kda_recurrent);
    const int64_t rows = T * H;
    float *qv, *kv;
    kda_test_qk(rows, dk, dt, &qv, &kv);
    float *gv = randn(rows * dk, 1.0f, false), *bv = randn(rows, 1.0f, false);
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = t * H * dk; e < (t + 1) * H * dk; e++)
            gv[e] = gate == KDA_GATE_WEAK                       ? -1e-3f * test_uniform()
                    : gate == KDA_GATE_STRONG && t % 50 < 40 ? -5.0f
                                                              : -5.0f / (1.0f + expf(-gv[e]));
    for (int64_t i = 0; i < rows; i++) bv[i] = 1.0f / (1.0f + expf(-bv[i]));
    int32_t *slot_of = hmem((size_t)(T + 1) * sizeof(int32_t));
    int64_t ring = 1;
    slot_of[0] = 0;
    for (int64_t t = 0; t < T; t++)
        slot_of[1 + t] = t == T - 1 ? 0 : snap_every && (t + 3) % snap_every == 0 ? (int32_t)ring++ : -1;
    float *sv = randn(ring * H * dk * dv, 0.1f, false);
    TRY(act_pair(&q, dt, qv, SHAPE(T, H, dk)));
    TRY(act_pair(&k, dt, kv, SHAPE(T, H, dk)));
    TRY(act_pair(&v, dt, randn(rows * dv, 1.0f, dt == BF16), SHAPE(T, H, dv)));
    TRY(act_pair(&g, F32, gv, SHAPE(T, H, dk)));
    TRY(act_pair(&beta, F32, bv, SHAPE(T, H)));
    TRY(act_pair(&states, F32, sv, SHAPE(ring, H, dk, dv)));
    TRY(i32_pair(&slots, slot_of, SHAPE(T + 1)));
    TRY(out_pair(&o, dt, SHAPE(T, H, dv)));
    TRY(cpu->ops->kda_recurrent(cpu, o.c, q.c, k.c, v.c, g.c, beta.c, states.c, slots.c));
    TRY(gpu->ops->kda_recurrent(gpu, o.g, q.g, k.g, v.g, g.g, beta.g, states.g, slots.g));
    kda_compare_recurrent(&o, &states, slot_of, T, THR(dt));
    /* the same call through the token kernel: other bits (F32 outputs only: BF16's rounding can hide the reordered
     * sums, as it did at T 64 on the H100) */
    if (!self_test && dt == F32) {
        TRY(kda_record_taken(gpu_token, o.g, &q, &k, &v, &g, &beta, &slots, sv, ring, T, H, dk, dv,
                             "every value equals the token kernel's: the chunked path did not run"));
        /* on the tensor-core intra kernel's backend, where it takes the widths (kda.cu's kda_intra_mma_fits): other
         * bits than the F32 intra kernel's (the products are 3xTF32 MMAs), or the MMA form did not run */
        if (gpu_intra_f32 && dk % 8 == 0 && dk <= 128 && dv % 8 == 0)
            TRY(kda_record_taken(gpu_intra_f32, o.g, &q, &k, &v, &g, &beta, &slots, sv, ring, T, H, dk, dv,
                                 "every value equals the F32 intra kernel's: the tensor-core intra form did not run"));
    }
done:
    check_end();
}

/* A CUDA backend (a CPU one under --self-test) made with the environment settings names[i] = values[i] (a NULL
 * value: unset), for checks that compare a kernel behind a switch with the one it replaces; the environment is put
 * back as it was. `op` names the check a failure is reported under. NULL when the backend cannot be made. */
enum { SWITCHES_MAX = 4 };
static glm53_backend *switched_backend(const char *op, int n, const char *const *names, const char *const *values) {
    char was[SWITCHES_MAX][64];
    bool had[SWITCHES_MAX];
    assert(n <= SWITCHES_MAX);
    for (int i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        had[i] = v != NULL;
        snprintf(was[i], sizeof was[i], "%s", v ? v : "");
        if (values[i]) setenv(names[i], values[i], 1);
        else unsetenv(names[i]);
    }
    glm53_backend *be = NULL;
    glm53_status st = self_test ? glm53_backend_cpu_create(0, &be) : glm53_backend_cuda_create(0, &be);
    for (int i = 0; i < n; i++)
        if (had[i]) setenv(names[i], was[i], 1);
        else unsetenv(names[i]);
    if (st != GLM53_OK) {
        check_begin(op, "-", "backend");
        fail_msg("cannot create a backend with %s=%s%s: %s", names[0], values[0] ? values[0] : "(unset)",
                 n > 1 ? " and more" : "", glm53_last_error());
        check_end();
        return NULL;
    }
    return be;
}

/* A backend with GLM53_CUDA_KDA_CHUNKED=`chunked` and GLM53_CUDA_KDA_INTRA_MMA=`intra_mma` ("1" or "0") and,
 * piece > 0, pieces of that many chunk-heads. */
static glm53_backend *kda_switch_backend(const char *chunked, int piece, const char *intra_mma) {
    char piece_s[24];
    snprintf(piece_s, sizeof piece_s, "%d", piece);
    const char *names[3] = {"GLM53_CUDA_KDA_CHUNKED", "GLM53_CUDA_KDA_CHUNK_PIECE", "GLM53_CUDA_KDA_INTRA_MMA"};
    const char *values[3] = {chunked, piece > 0 ? piece_s : NULL, intra_mma};
    return switched_backend("kda_recurrent chunked", 3, names, values);
}

/* The chunked checks on `gpu` (a backend with the chunked form on), with default pieces ... */
static void kda_chunked_cases(void) {
    for (int dt = F32; dt <= BF16; dt++) {
        check_kda_chunked(4, 16, 16, 64, dt, KDA_GATE_MIXED, 0);     /* two whole chunks */
        check_kda_chunked(4, 16, 16, 65, dt, KDA_GATE_STRONG, 7);    /* a last chunk of one row; states inside chunks */
        check_kda_chunked(4, 16, 16, 200, dt, KDA_GATE_WEAK, 23);
        check_kda_chunked(4, 16, 16, 1000, dt, KDA_GATE_STRONG, 0);
        check_kda_chunked(4, 16, 16, 1000, dt, KDA_GATE_MIXED, 61);
        check_kda_chunked(2, 128, 128, 200, dt, KDA_GATE_MIXED, 37);  /* the model's head */
        check_kda_chunked(2, 128, 128, 100, dt, KDA_GATE_STRONG, 0);
        check_kda_chunked(3, 20, 132, 70, dt, KDA_GATE_MIXED, 5);     /* dk 20: a part-empty row group; 3 column blocks */
        check_kda_chunked(3, 32, 72, 70, dt, KDA_GATE_MIXED, 5);      /* dk != dv, both multiples of 8: the MMA form's */
        check_kda_sequences_rows(4, 16, 16, 4, dt, true);              /* chunked and token sequences in one call */
        check_kda_sequences_rows(2, 128, 128, 4, dt, true);
    }
}

/* ... and with pieces of KDA_TEST_PIECE chunk-heads: 2 chunks a piece at 4 heads, states carried. */
static void kda_chunked_piece_cases(void) {
    check_kda_chunked(4, 16, 16, 200, F32, KDA_GATE_MIXED, 23);
    check_kda_chunked(4, 16, 16, 1000, BF16, KDA_GATE_STRONG, 61);
    check_kda_sequences_rows(4, 16, 16, 4, F32, true);              /* sequences cut across pieces */
}

/* --- KPool indexer ---------------------------------------------------------------------------------------- */
static void check_kpool_compress(int64_t G, int64_t P, int64_t dI, int dt, int ape_dt) {
    char dts[48];
    snprintf(dts, sizeof dts, "kappa:%s ape:%s", dt_name(dt), dt_name(ape_dt));
    check_begin("kpool_compress", dts, "G %lld P %lld dI %lld", (long long)G, (long long)P, (long long)dI);
    tpair kappa = {0}, sigma = {0}, ape = {0}, pooled = {0};
    NEED(kpool_compress);
    TRY(act_pair(&kappa, dt, randn(G * P * dI, 1.0f, dt == BF16), SHAPE(G * P, dI)));
    TRY(act_pair(&sigma, dt, randn(G * P * dI, 2.0f, dt == BF16), SHAPE(G * P, dI)));
    TRY(weight_pair(&ape, ape_dt, 2, P, dI, 1.0f, 0.0f, 0, 0));
    TRY(out_pair(&pooled, F32, SHAPE(G, dI)));
    TRY(cpu->ops->kpool_compress(cpu, pooled.c, kappa.c, sigma.c, ape.c));
    TRY(gpu->ops->kpool_compress(gpu, pooled.g, kappa.g, sigma.g, ape.g));
    compare(NULL, pooled.c, pooled.g, THR(dt, ape_dt));
done:
    check_end();
}

/* How check_kpool_score draws its inputs. KPOOL_RANDOM: normal Q, pooled and head weights; row 0 has all G pools
 * closed, row 1 none, the others a random count. KPOOL_CAUSAL: the same values, row t has (t + 1) / 4 pools closed
 * (a prefill of T tokens in pools of 4): rows with few closed pools, and past T / 4 pools that no row has closed.
 * KPOOL_ZEROS: random counts; every head of every row is near one direction u (u + noise / 2) and the pools come in
 * three kinds, -u + noise / 2 (every head's dot clearly negative: the score an exact zero, a ReLU tie), u + noise / 2
 * and noise / 2 alone (dots of either sign, some near zero). */
enum { KPOOL_RANDOM, KPOOL_CAUSAL, KPOOL_ZEROS };

/* The backend made with GLM53_CUDA_KPOOL_MMA=0 (the rows kernel for BF16 Q too), for the "switch" rows; group_indexer
 * makes it. */
static glm53_backend *kpool_plain;

/* The split-key MMA form's error in a scaled dot product, relative to scale * sum_c |q_c k_c|: kpool_indexer.cu's
 * contract (2^-16 for the keys' hi + lo, (dI / 8) 2^-22 for the MMAs' F32 sums), plus the CPU reference's own F32
 * products and sum and the scale's rounding on both sides ((dI + 2) 2^-24). */
static double kpool_split_eps(int64_t dI) {
    return ldexp(1.0, -16) + (double)dI / 8.0 * ldexp(1.0, -22) + (double)(dI + 2) * ldexp(1.0, -24);
}

/* The tensor-core form's checks (got: CUDA's scores, ref: the CPU's, both [T, G]; the inputs as host floats):
 * "split bound": |got - ref| against sum_h |w_h| scale sum_c |q_c k_c| eps (ReLU is 1-Lipschitz, so a dot near zero
 * that lands on the other side is covered) plus both sides' F32 head sums, 2 (Hi + 1) 2^-24 sum_h |w_h relu(dot_h)|;
 * the error column is the largest ratio to that bound. "relu zeros": every CPU exact zero whose heads' dots are all
 * below minus their bound must be an exact zero on CUDA (the count of those that are not). Closed pools only: the
 * -inf of the others is the plain comparison's. */
static void kpool_check_split(const float *got, const float *ref, const float *Qv, const float *wv, const float *kv,
                              const int32_t *nc, int64_t T, int64_t Hi, int64_t dI, int64_t G, float scale) {
    const double eps = kpool_split_eps(dI);
    double worst = 0.0;
    int64_t worst_i = -1, zeros = 0, clear = 0, clear_missed = 0, first_missed = -1;
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; g < (nc[t] < G ? nc[t] : G); g++) {
            double bound = 0.0, relu_sum = 0.0;
            bool all_clear = true;
            for (int64_t h = 0; h < Hi; h++) {
                const float *q = Qv + (t * Hi + h) * dI, *k = kv + g * dI;
                double dot = 0.0, mag = 0.0;
                for (int64_t c = 0; c < dI; c++) {
                    dot += (double)q[c] * k[c];
                    mag += fabs((double)q[c] * k[c]);
                }
                const double head_bound = scale * mag * eps, d = scale * dot, wa = fabs((double)wv[t * Hi + h]);
                bound += wa * head_bound;
                relu_sum += wa * (d > 0.0 ? d : 0.0);
                all_clear = all_clear && d < -head_bound;
            }
            bound += 2.0 * (double)(Hi + 1) * ldexp(1.0, -24) * relu_sum + DBL_MIN;
            const int64_t i = t * G + g;
            const double ratio = isfinite(got[i]) ? fabs((double)got[i] - ref[i]) / bound : INFINITY;
            if (worst_i < 0 || ratio > worst) {
                worst = ratio;
                worst_i = i;
            }
            if (ref[i] == 0.0f) {
                zeros++;
                if (all_clear) {
                    clear++;
                    if (got[i] != 0.0f && clear_missed++ == 0) first_missed = i;
                }
            }
        }
    char note[120] = "";
    if (!(worst <= 1.0) && worst_i >= 0)
        snprintf(note, sizeof note, "worst [%lld]: cuda %.9g, cpu %.9g", (long long)worst_i, got[worst_i],
                 ref[worst_i]);
    record("split bound", worst, 1.0, worst <= 1.0, note);
    if (clear_missed)
        snprintf(note, sizeof note, "%lld of %lld clear zeros not zero; first [%lld]: cuda %.9g",
                 (long long)clear_missed, (long long)clear, (long long)first_missed, got[first_missed]);
    else
        snprintf(note, sizeof note, "%lld exact zeros, %lld with every head clearly negative", (long long)zeros,
                 (long long)clear);
    record("relu zeros", (double)clear_missed, 0.0, clear_missed == 0, note);
}

/* With BF16 Q, T >= 17 and dI % 64 == 0 the CUDA backend takes the tensor-core form (kpool_score_mma_kernel), which
 * these cases check by the bound of its arithmetic too, and a backend made with GLM53_CUDA_KPOOL_MMA=0 must still
 * give the rows kernel's results ("switch", the plain tolerance); on a GPU with the switch on, "taken" fails when
 * every score has the rows kernel's bits (the tensor-core form did not run). */
static void check_kpool_score(int64_t T, int64_t Hi, int64_t dI, int64_t G, int dt, int draw) {
    check_begin("kpool_score", dt_name(dt), "T %lld Hi %lld dI %lld G %lld%s", (long long)T, (long long)Hi,
                (long long)dI, (long long)G, draw == KPOOL_CAUSAL ? " causal" : draw == KPOOL_ZEROS ? " zeros" : "");
    tpair Q = {0}, w = {0}, pooled = {0}, closed = {0}, scores = {0};
    NEED(kpool_score);
    float *Qv = randn(T * Hi * dI, 1.0f, dt == BF16), *kv = randn((G + 3) * dI, 1.0f, false);   /* more rows than G */
    if (draw == KPOOL_ZEROS) {
        const float *u = randn(dI, 1.0f, false);
        for (int64_t i = 0; i < T * Hi * dI; i++) {
            Qv[i] = u[i % dI] + 0.5f * test_normal();
            if (dt == BF16) Qv[i] = glm53_round_bf16(Qv[i]);
        }
        for (int64_t i = 0; i < (G + 3) * dI; i++) {
            const int64_t kind = (i / dI) % 3;   /* -u, u, noise alone */
            kv[i] = (kind == 0 ? -u[i % dI] : kind == 1 ? u[i % dI] : 0.0f) + 0.5f * kv[i];
        }
    }
    float *wv = randn(T * Hi, 1.0f / sqrtf((float)Hi), false);
    TRY(act_pair(&Q, dt, Qv, SHAPE(T, Hi, dI)));
    TRY(act_pair(&w, F32, wv, SHAPE(T, Hi)));
    TRY(act_pair(&pooled, F32, kv, SHAPE(G + 3, dI)));
    int32_t *nc = hmem((size_t)T * sizeof(int32_t));
    for (int64_t t = 0; t < T; t++)
        nc[t] = draw == KPOOL_CAUSAL ? (int32_t)((t + 1) / 4 < G ? (t + 1) / 4 : G)
                : t == 0             ? (int32_t)G
                : t == 1             ? 0
                                     : (int32_t)rand_below(G + 1);
    TRY(i32_pair(&closed, nc, SHAPE(T)));
    TRY(out_pair(&scores, F32, SHAPE(T, G)));
    float scale = 1.0f / sqrtf((float)dI);
    TRY(cpu->ops->kpool_score(cpu, scores.c, Q.c, w.c, pooled.c, closed.c, scale));
    TRY(gpu->ops->kpool_score(gpu, scores.g, Q.g, w.g, pooled.g, closed.g, scale));
    compare(NULL, scores.c, scores.g, THR(dt));
    if (dt == BF16 && T >= 17 && dI % 64 == 0) {
        float *ref = hmem((size_t)(T * G) * sizeof(float)), *got = hmem((size_t)(T * G) * sizeof(float));
        TRY(fetch_f32(cpu, scores.c, ref));
        TRY(fetch_f32(gpu, scores.g, got));
        kpool_check_split(got, ref, Qv, wv, kv, nc, T, Hi, dI, G, scale);
        if (kpool_plain) {
            glm53_tensor *plain = NULL;
            float *pv = hmem((size_t)(T * G) * sizeof(float));
            TRY(gpu->ops->sync(gpu));   /* the two backends run on different streams of the one device */
            TRY(tensor_out(kpool_plain, &plain, F32, SHAPE(T, G)));
            TRY(kpool_plain->ops->kpool_score(kpool_plain, plain, Q.g, w.g, pooled.g, closed.g, scale));
            TRY(kpool_plain->ops->sync(kpool_plain));
            TRY(fetch_f32(kpool_plain, plain, pv));
            report_err("switch", pv, ref, T * G, THR(dt));
            const char *env = getenv("GLM53_CUDA_KPOOL_MMA");
            if (!self_test && !(env && !strcmp(env, "0"))) {
                int64_t differing = 0;
                TRY(count_differing(scores.g, plain, &differing));
                record_taken(differing, "every score equals the rows kernel's: the tensor-core form did not run");
            }
        }
    }
done:
    check_end();
}

/* levels of check_kpool_select: scores as one index head makes them, w_t * relu(x - 1) with x ~ N(0, 1) and the
 * row's weight w_t of alternating sign. About 84% of them are exactly zero, -0.0 where w_t < 0 (it must tie +0.0:
 * a selection on the float bits would rank them apart); with w_t > 0 the budget mostly ends inside the zeros
 * after the few positive pools, with w_t < 0 the zeros are the best scores and it ends inside them. */
enum { RELU_ZEROS = -1 };

/* pos[] gives each row's absolute position; levels > 0 draws scores from that many values (ties); RELU_ZEROS as
 * above. */
static void check_kpool_select(int64_t T, const int32_t *pos, int64_t G, int32_t P, int32_t n_select, int with_tail,
                               int levels) {
    check_begin("kpool_select", "f32", "T %lld G %lld P %d n_sel %d%s%s", (long long)T, (long long)G, P, n_select,
                with_tail ? " tail" : "", levels == RELU_ZEROS ? " relu zeros" : levels ? " ties" : "");
    tpair scores = {0}, pp = {0}, idx = {0};
    NEED(kpool_select);
    int64_t W = (int64_t)n_select * P + (with_tail ? P - 1 : 0);
    float *sv = randn(T * G, 1.0f, false);
    if (levels > 0)
        for (int64_t i = 0; i < T * G; i++) sv[i] = (float)rand_below(levels);
    if (levels == RELU_ZEROS)
        for (int64_t t = 0; t < T; t++) {
            float w = (t % 2 ? -1.0f : 1.0f) * (0.5f + test_uniform());
            for (int64_t g = 0; g < G; g++) {
                float x = sv[t * G + g] - 1.0f;
                sv[t * G + g] = w * (x > 0.0f ? x : 0.0f);
            }
        }
    TRY(act_pair(&scores, F32, sv, SHAPE(T, G)));
    TRY(i32_pair(&pp, pos, SHAPE(T)));
    TRY(out_pair(&idx, I32, SHAPE(T, W)));
    TRY(cpu->ops->kpool_select(cpu, idx.c, scores.c, pp.c, P, n_select, with_tail));
    TRY(gpu->ops->kpool_select(gpu, idx.g, scores.g, pp.g, P, n_select, with_tail));
    compare_i32(NULL, idx.c, idx.g, W, true);
done:
    check_end();
}

/* --- sparse MLA ------------------------------------------------------------------------------------------- */
/* The flash form's 16-warp kernel (GLM53_CUDA_MLA_FLASH16, sparse_mla.cu's sparse_mla_flash16_kernel) stages a row's
 * ids in shared memory, up to this many; a longer list takes the 8-warp kernel. */
enum { MLA_FLASH16_MAX_W = 4096 };
static glm53_backend *mla_plain;         /* the 8-warp flash kernel's backend while `gpu` has GLM53_CUDA_MLA_FLASH16=1 */
static int64_t mla_flash16_differing;    /* outputs whose bits differ from mla_plain's where the 16-warp kernel ran */
static const char *mla_variant = "";     /* appended to the sparse_mla checks' dtype column: " flash16" on that backend */

/* holes: about a third of each row's ids -1, scattered over the whole list (instead of one). */
static void check_sparse_mla_ids(int64_t T, int64_t H, int64_t dk, int64_t dv, int64_t R, int64_t cap, int64_t W,
                                 int dt, int kv_dt, bool holes) {
    char dts[48];
    snprintf(dts, sizeof dts, "q:%s kv_b:%s%s", dt_name(dt), dt_name(kv_dt), mla_variant);
    check_begin("sparse_mla", dts, "T %lld H %lld dk %lld dv %lld R %lld W %lld%s", (long long)T, (long long)H,
                (long long)dk, (long long)dv, (long long)R, (long long)W, holes ? " holes" : "");
    tpair q = {0}, latent = {0}, idx = {0}, kv_b = {0}, o = {0};
    NEED(sparse_mla);
    /* Selected positions: distinct, random order, some -1 in the middle, -1 padding at the end; with T >= 3 the
     * last row has none at all (zeros). */
    int32_t *iv = hmem((size_t)(T * W) * sizeof(int32_t)), *scratch = hmem((size_t)cap * sizeof(int32_t));
    for (int64_t t = 0; t < T; t++) {
        int64_t n_valid = W - 3 < cap ? W - 3 : cap;
        rand_distinct(iv + t * W, n_valid, cap, scratch);
        for (int64_t j = n_valid; j < W; j++) iv[t * W + j] = -1;
        if (W > 5) iv[t * W + 2] = -1;
        if (holes)
            for (int64_t j = 0; j < n_valid; j++)
                if (rand_below(3) == 0) iv[t * W + j] = -1;
        if (T >= 3 && t == T - 1)
            for (int64_t j = 0; j < W; j++) iv[t * W + j] = -1;
    }
    TRY(act_pair(&q, dt, randn(T * H * dk, 1.0f, dt == BF16), SHAPE(T, H, dk)));
    TRY(act_pair(&latent, dt, randn(cap * R, 1.0f, dt == BF16), SHAPE(cap, R)));
    TRY(i32_pair(&idx, iv, SHAPE(T, W)));
    /* kv_b ~ 1.5 / sqrt(R): scores of a few units, so the softmax is neither flat nor one-hot */
    const int blk = kv_dt == FP8 ? 128 : 0;   /* the checkpoint's 128 x 128 blocks */
    TRY(weight_pair(&kv_b, kv_dt, 2, H * (dk + dv), R, 1.5f / sqrtf((float)R), 0.0f, blk, blk));
    TRY(out_pair(&o, dt, SHAPE(T, H, dv)));
    float scale = 1.0f / sqrtf((float)dk);
    TRY(cpu->ops->sparse_mla(cpu, o.c, q.c, latent.c, idx.c, kv_b.c, scale));
    TRY(gpu->ops->sparse_mla(gpu, o.g, q.g, latent.g, idx.g, kv_b.g, scale));
    compare(NULL, o.c, o.g, THR(dt, kv_dt));
    /* On GLM53_CUDA_MLA_FLASH16's backend, where the flash form runs (BF16, past 16 rows, 64-head groups, R 512): the
     * same call on the 8-warp kernel's backend. With the ids staged (W up to MLA_FLASH16_MAX_W) the bits differ
     * somewhere (the scores are summed in another order), counted for group_indexer's "taken" row; past it the call
     * falls back to the 8-warp kernel, so every bit must be the same ("fallback"). */
    if (mla_plain && dt == BF16 && T > 16 && H % 64 == 0 && R == 512) {
        glm53_tensor *plain = NULL;
        TRY(gpu->ops->sync(gpu));   /* the two backends run on different streams of the one device */
        TRY(tensor_out(mla_plain, &plain, o.g->dtype, SHAPE(T, H, dv)));
        TRY(mla_plain->ops->sparse_mla(mla_plain, plain, q.g, latent.g, idx.g, kv_b.g, scale));
        int64_t differing = 0;
        TRY(count_differing_from(mla_plain, o.g, plain, &differing));
        if (W <= MLA_FLASH16_MAX_W) {
            mla_flash16_differing += differing;
        } else {
            char note[120] = "";
            if (differing) snprintf(note, sizeof note, "%lld outputs differ from the 8-warp kernel's: no fallback",
                                    (long long)differing);
            record("fallback", (double)differing, 0.0, differing == 0, note);
        }
    }
done:
    check_end();
}

static void check_sparse_mla(int64_t T, int64_t H, int64_t dk, int64_t dv, int64_t R, int64_t cap, int64_t W, int dt,
                             int kv_dt) {
    check_sparse_mla_ids(T, H, dk, dv, R, cap, W, dt, kv_dt, false);
}

/* The flash form's cases (BF16, 64-head groups, R 512, past 16 rows). */
static void sparse_mla_flash_cases(void) {
    check_sparse_mla(20, 64, 256, 256, 512, 3000, 2051, BF16, FP8);   /* the flash form: BF16, 64 heads, R 512 */
    check_sparse_mla(18, 128, 32, 32, 512, 40, 12, BF16, BF16);       /* the flash form: two head groups, one short tile */
    check_sparse_mla(17, 64, 32, 32, 512, 96, 300, BF16, BF16);       /* the flash form: 96 of 300, tiles 3 .. 9 skipped */
    check_sparse_mla(17, 64, 32, 32, 512, 60, 50, BF16, BF16);        /* two tiles: the 16-warp kernel's ring not full */
    check_sparse_mla_ids(17, 64, 64, 64, 512, 5000, 2048, BF16, BF16, true);   /* 64 tiles: the ring wraps 21 times */
    check_sparse_mla_ids(17, 64, 32, 32, 512, 5000, 4100, BF16, BF16, true);   /* W past the 16-warp kernel's ids */
}

/* --- MoE -------------------------------------------------------------------------------------------------- */
static void check_moe_route(int64_t N, int64_t E, int64_t K, int32_t n_group, int32_t topk_group, int32_t norm,
                            float scaling) {
    check_begin("moe_route", "f32", "N %lld E %lld k %lld groups %d/%d%s", (long long)N, (long long)E, (long long)K,
                topk_group, n_group, norm ? " norm" : "");
    tpair logits = {0}, bias = {0}, ids = {0}, w = {0};
    NEED(moe_route);
    TRY(act_pair(&logits, F32, randn(N * E, 2.0f, false), SHAPE(N, E)));
    TRY(weight_pair(&bias, F32, 1, 1, E, 0.1f, 0.0f, 0, 0));
    TRY(out_pair(&ids, I32, SHAPE(N, K)));
    TRY(out_pair(&w, F32, SHAPE(N, K)));
    TRY(cpu->ops->moe_route(cpu, ids.c, w.c, logits.c, bias.c, n_group, topk_group, norm, scaling));
    TRY(gpu->ops->moe_route(gpu, ids.g, w.g, logits.g, bias.g, n_group, topk_group, norm, scaling));
    if (compare_i32("ids", ids.c, ids.g, K, false)) compare("weights", w.c, w.g, 1e-5);
done:
    check_end();
}

/* Appended to the moe_experts checks' dtype column: which backend variant runs them (group_moe sets it). */
static const char *moe_variant = "";

/* held_n > 0: the rank of an expert-parallel model that holds experts [held_first, held_first + held_n) (the
 * others' slots contribute nothing; their weights are absent). */
static void check_moe_experts_held(int64_t N, int64_t D, int64_t F, int32_t E, int64_t K, int dt, int w_dt, int blk,
                                   bool last_expert_unused, int32_t held_first, int32_t held_n) {
    char dts[64];
    snprintf(dts, sizeof dts, "x:%s w:%s", dt_name(dt), dt_name(w_dt));
    if (w_dt == FP8) snprintf(dts + strlen(dts), sizeof dts - strlen(dts), " %dx%d", blk, blk);
    if (held_n) snprintf(dts + strlen(dts), sizeof dts - strlen(dts), " held %d+%d", held_first, held_n);
    snprintf(dts + strlen(dts), sizeof dts - strlen(dts), "%s", moe_variant);
    check_begin("moe_experts", dts, "N %lld D %lld F %lld E %d k %lld", (long long)N, (long long)D, (long long)F, E,
                (long long)K);
    tpair x = {0}, ids = {0}, wts = {0}, y = {0};
    tpair gate[64] = {{0}}, up[64] = {{0}}, down[64] = {{0}};
    const glm53_tensor *gc[64] = {0}, *uc[64] = {0}, *dc[64] = {0}, *gg[64] = {0}, *ug[64] = {0}, *dg[64] = {0};
    NEED(moe_experts);
    assert(E <= 64);
    int32_t routable = last_expert_unused ? E - 1 : E;   /* the unused expert has no weights at all */
    assert(K <= routable);
    for (int32_t e = 0; e < routable; e++) {
        if (held_n && (e < held_first || e >= held_first + held_n)) continue;   /* another rank's expert */
        TRY(weight_pair(&gate[e], w_dt, 2, F, D, 1.5f / sqrtf((float)D), 0.0f, blk, blk));
        TRY(weight_pair(&up[e], w_dt, 2, F, D, 1.5f / sqrtf((float)D), 0.0f, blk, blk));
        TRY(weight_pair(&down[e], w_dt, 2, D, F, 1.0f / sqrtf((float)F), 0.0f, blk, blk));
        gc[e] = gate[e].c, uc[e] = up[e].c, dc[e] = down[e].c;
        gg[e] = gate[e].g, ug[e] = up[e].g, dg[e] = down[e].g;
    }
    int32_t *iv = hmem((size_t)(N * K) * sizeof(int32_t)), *scratch = hmem((size_t)routable * sizeof(int32_t));
    for (int64_t n = 0; n < N; n++) rand_distinct(iv + n * K, K, routable, scratch);
    TRY(act_pair(&x, dt, randn(N * D, 1.0f, dt == BF16), SHAPE(N, D)));
    TRY(i32_pair(&ids, iv, SHAPE(N, K)));
    TRY(act_pair(&wts, F32, randu(N * K, 0.1f, 1.0f, false), SHAPE(N, K)));
    TRY(out_pair(&y, dt, SHAPE(N, D)));
    glm53_expert_set set_c = {.n_experts = E, .gate = gc, .up = uc, .down = dc, .first_held = held_first,
                              .n_held = held_n};
    glm53_expert_set set_g = {.n_experts = E, .gate = gg, .up = ug, .down = dg, .first_held = held_first,
                              .n_held = held_n};
    if (gpu->ops->prepare_experts) TRY(gpu->ops->prepare_experts(gpu, &set_g));
    TRY(cpu->ops->moe_experts(cpu, y.c, x.c, ids.c, wts.c, &set_c, 10.0f));
    TRY(gpu->ops->moe_experts(gpu, y.g, x.g, ids.g, wts.g, &set_g, 10.0f));
    compare(NULL, y.c, y.g, THR(dt, w_dt));
done:
    if (set_g.device) gpu->ops->release_experts(gpu, &set_g);
    check_end();
}

/* moe_experts on N rows at once gives each row the bits it gets in calls of `split` rows: its slots' products do
 * not depend on the slots the other rows route to the same experts (the tensor-core paths compute an expert's
 * slots as the rows of one product). split 1: against single-row calls (the device path); split > 16: calls that
 * all take the device-grouped path, whose m-tiles then hold other rows, so N is a multiple of split (a tail of 16
 * rows or fewer would take the device path, whose arithmetic is the GEMV's, not the grouped tile's: docs/cuda.md).
 * Few experts for many rows, so experts are shared. */
static void check_moe_rows_invariant(int64_t N, int64_t D, int64_t F, int32_t E, int64_t K, int w_dt, int blk,
                                     int64_t split) {
    char dts[48];
    snprintf(dts, sizeof dts, "x:bf16 w:%s%s", dt_name(w_dt), moe_variant);
    check_begin("moe_experts rows invariant", dts, "N %lld D %lld F %lld E %d k %lld, calls of %lld rows",
                (long long)N, (long long)D, (long long)F, E, (long long)K, (long long)split);
    tpair x = {0}, ids = {0}, wts = {0}, y = {0}, y1 = {0};
    tpair gate[16] = {{0}}, up[16] = {{0}}, down[16] = {{0}};
    const glm53_tensor *gg[16] = {0}, *ug[16] = {0}, *dg[16] = {0};
    glm53_expert_set set = {0};
    NEED(moe_experts);
    assert(E <= 16 && K <= E && (split == 1 || N % split == 0));
    for (int32_t e = 0; e < E; e++) {
        TRY(weight_pair(&gate[e], w_dt, 2, F, D, 1.5f / sqrtf((float)D), 0.0f, blk, blk));
        TRY(weight_pair(&up[e], w_dt, 2, F, D, 1.5f / sqrtf((float)D), 0.0f, blk, blk));
        TRY(weight_pair(&down[e], w_dt, 2, D, F, 1.0f / sqrtf((float)F), 0.0f, blk, blk));
        gg[e] = gate[e].g, ug[e] = up[e].g, dg[e] = down[e].g;
    }
    int32_t *iv = hmem((size_t)(N * K) * sizeof(int32_t)), *scratch = hmem((size_t)E * sizeof(int32_t));
    for (int64_t n = 0; n < N; n++) rand_distinct(iv + n * K, K, E, scratch);
    TRY(act_pair(&x, BF16, randn(N * D, 1.0f, true), SHAPE(N, D)));
    TRY(i32_pair(&ids, iv, SHAPE(N, K)));
    TRY(act_pair(&wts, F32, randu(N * K, 0.1f, 1.0f, false), SHAPE(N, K)));
    TRY(out_pair(&y, BF16, SHAPE(N, D)));
    TRY(out_pair(&y1, BF16, SHAPE(N, D)));
    set = (glm53_expert_set){.n_experts = E, .gate = gg, .up = ug, .down = dg};
    if (gpu->ops->prepare_experts) TRY(gpu->ops->prepare_experts(gpu, &set));
    TRY(gpu->ops->moe_experts(gpu, y.g, x.g, ids.g, wts.g, &set, 10.0f));
    for (int64_t n = 0; n < N; n += split) {
        int64_t rows = N - n < split ? N - n : split;
        glm53_tensor xn = glm53_tensor_rows_view(x.g, n, rows), in = glm53_tensor_rows_view(ids.g, n, rows);
        glm53_tensor wn = glm53_tensor_rows_view(wts.g, n, rows), yn = glm53_tensor_rows_view(y1.g, n, rows);
        TRY(gpu->ops->moe_experts(gpu, &yn, &xn, &in, &wn, &set, 10.0f));
    }
    int64_t differing = 0;
    TRY(count_differing(y.g, y1.g, &differing));
    record_differing(differing, "values differ between one call and row-by-row calls");
done:
    if (set.device) gpu->ops->release_experts(gpu, &set);
    check_end();
}

static void check_moe_experts(int64_t N, int64_t D, int64_t F, int32_t E, int64_t K, int dt, int w_dt, int blk,
                              bool last_expert_unused) {
    check_moe_experts_held(N, D, F, E, K, dt, w_dt, blk, last_expert_unused, 0, 0);
}

/* ============================================================================================================
 * Groups
 * ==========================================================================================================*/
static void group_memory(void) {
    check_roundtrip(F32, 1000);
    check_roundtrip(BF16, 4097);
    check_copy(F32, BF16, 17, 130);
    check_copy(BF16, F32, 3, 4096);
    check_copy(F32, F32, 257, 33);
    check_copy(BF16, BF16, 1, 5);
    check_fill(F32, 3.5f, 1001);
    check_fill(BF16, -2.25f, 77);
    check_fill(I32, 7.0f, 5);
    check_allocator_reuse();
    check_bad_index(false);
    check_bad_index(true);
}

static void group_matmul(void) {
    static const int64_t shapes[][3] = {{1, 4096, 4096}, {17, 4096, 4096}, {257, 4096, 4096},
                                        {1, 300, 200},   {3, 300, 200},    {17, 300, 200}, {257, 300, 200}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], BF16, BF16, BF16, 0, 0);
    /* FP8: GEMV (M <= 16) with aligned rows, unaligned rows, sub-block and straddling scale blocks; GEMM path */
    check_matmul(1, 4096, 4096, BF16, FP8, BF16, 128, 128);
    check_matmul(3, 4096, 4096, BF16, FP8, BF16, 128, 128);
    check_matmul(16, 4096, 4096, BF16, FP8, BF16, 128, 128);
    check_matmul(17, 4096, 4096, BF16, FP8, BF16, 128, 128);
    check_matmul(257, 4096, 4096, BF16, FP8, BF16, 128, 128);
    check_matmul(1, 300, 200, BF16, FP8, BF16, 128, 128);
    check_matmul(17, 300, 200, BF16, FP8, BF16, 128, 128);
    check_matmul(3, 300, 208, BF16, FP8, BF16, 16, 32);
    check_matmul(2, 100, 256, BF16, FP8, BF16, 8, 24);
    /* the tensor-core GEMV (BF16 x, FP8 or BF16 w, M <= 16) with F32 outputs: x holds BF16 values on both
     * backends, so nothing is rounded to BF16 and its F32 sums are held to the F32 limit */
    check_matmul_thr(7, 1000, 4096, BF16, BF16, F32, 0, 0, 1e-5);
    check_matmul_thr(16, 96, 64, BF16, BF16, F32, 0, 0, 1e-5);
    check_matmul_thr(1, 4096, 4096, BF16, FP8, F32, 128, 128, 1e-5);
    check_matmul_thr(5, 1536, 4096, BF16, FP8, F32, 128, 128, 1e-5);
    check_matmul_thr(9, 512, 6144, BF16, FP8, F32, 128, 128, 1e-5);   /* x in two slabs (4096 + 2048 columns) */
    check_matmul_thr(16, 256, 16384, BF16, FP8, F32, 128, 128, 1e-5); /* four slabs */
    check_matmul_thr(16, 200, 320, BF16, FP8, F32, 8, 64, 1e-5);      /* N not a multiple of the tile rows */
    /* every FP8 code but NaN, then nothing but subnormal codes (which the tensor-core path turns into subnormal
     * BF16 values: a flush to zero would give zeros here) */
    fp8_exp_lo = 0, fp8_exp_count = 16;
    check_matmul_thr(3, 4096, 4096, BF16, FP8, F32, 128, 128, 1e-5);
    fp8_exp_lo = 0, fp8_exp_count = 1;
    check_matmul_thr(3, 4096, 4096, BF16, FP8, F32, 128, 128, 1e-5);
    check_matmul_thr(1, 300, 200, F32, FP8, F32, 128, 128, 1e-5);
    fp8_exp_lo = 4, fp8_exp_count = 6;
    check_matmul_rows_invariant(1536, 4096, BF16, FP8, 128, 128);
    check_matmul_rows_invariant(256, 16384, BF16, FP8, 128, 128);   /* x whole at M <= 8, in slabs above */
    check_matmul_rows_invariant(1000, 4096, BF16, BF16, 0, 0);
    check_matmul_rows_invariant(96, 64, BF16, BF16, 0, 0);          /* tiny-model sizes */
    check_matmul_rows_invariant(300, 200, F32, FP8, 128, 128);
    /* more than GEMV_MMA_FEW_ROWS weight rows: two n-tiles per warp up to 4 rows, four above (a partial last block) */
    check_matmul_thr(5, 4100, 1024, BF16, BF16, F32, 0, 0, 1e-5);
    check_matmul_rows_invariant(2056, 4096, BF16, FP8, 128, 128);
    check_matmul_rows_invariant(4100, 1024, BF16, BF16, 0, 0);
    /* F32 paths */
    check_matmul(1, 4096, 4096, F32, F32, F32, 0, 0);
    check_matmul(17, 300, 200, F32, F32, F32, 0, 0);
    check_matmul(257, 300, 200, F32, F32, F32, 0, 0);
    check_matmul(3, 288, 4096, BF16, F32, F32, 0, 0);   /* the router */
    check_matmul(1, 4096, 4096, F32, FP8, F32, 128, 128);
    check_matmul(17, 300, 200, F32, FP8, F32, 128, 128);
    check_matmul(3, 300, 200, F32, BF16, F32, 0, 0);
    check_matmul(17, 300, 200, F32, BF16, BF16, 0, 0);
    /* mixed */
    check_matmul(17, 4096, 4096, BF16, BF16, F32, 0, 0);
    check_matmul(5, 300, 200, BF16, F16, BF16, 0, 0);
    check_matmul(1, 300, 200, F32, F16, F32, 0, 0);
    check_swiglu_gate_up(1, 2048, 4096, BF16, FP8, 128);
    check_swiglu_gate_up(16, 96, 64, BF16, BF16, 0);
    check_swiglu_gate_up(3, 130, 200, F32, FP8, 16);
    check_swiglu_gate_up(2, 50, 70, BF16, F32, 0);    /* K not a multiple of 16: the element-wise lane walk */
    check_swiglu_gate_up(17, 96, 64, BF16, BF16, 0);  /* past the GEMV rows: the generic chain inside the op */
}

static void group_norm(void) {
    static const int64_t shapes[][2] = {{1, 4096}, {3, 5}, {17, 130}, {257, 33}, {257, 4096}};
    for (int kind = NORM_RMS; kind <= NORM_SOFTMAX; kind++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int dt = F32; dt <= BF16; dt++) {
                int w_dt = (kind == NORM_RMS || kind == NORM_LAYER) ? (i % 2 ? BF16 : F32) : -1;
                check_norm((enum norm_kind)kind, shapes[i][0], shapes[i][1], dt, w_dt, false);
            }
    check_norm(NORM_RMS, 17, 130, BF16, -1, false);
    check_norm(NORM_LAYER, 17, 130, F32, -1, false);
    check_norm(NORM_RMS, 257, 4096, BF16, BF16, true);
    check_norm(NORM_RMS, 1, 8192, BF16, BF16, false);   /* the register-row rmsnorm at its limit */
    check_norm(NORM_RMS, 2, 1536, F32, BF16, true);
    check_norm(NORM_RMS, 1, 8200, BF16, BF16, false);   /* past it: the element-wise kernel */
    check_norm(NORM_LAYER, 17, 130, F32, F32, true);
    check_norm(NORM_L2, 64, 128, BF16, -1, true);
    check_norm(NORM_SOFTMAX, 3, 154880, F32, -1, true);
    check_rmsnorm_gated(12, 16, F32, F32, false);
    check_rmsnorm_gated(64, 128, BF16, F32, false);
    check_rmsnorm_gated(64, 128, BF16, BF16, true);
    check_rmsnorm_gated(34, 130, F32, BF16, false);
    check_rmsnorm_gated(1003, 128, BF16, F32, false);   /* KDA's shape: many rows of dv, a last block part-empty */
    check_rmsnorm_gated(9, 520, F32, F32, false);       /* past GLM53_CUDA_KDA_ROWS's widths: the block kernel */
}

static void group_elementwise(void) {
    for (int op = GLM53_UNARY_SIGMOID; op <= GLM53_UNARY_RELU; op++) {
        check_unary((glm53_unary_op)op, 1, 1, F32);
        check_unary((glm53_unary_op)op, 17, 33, BF16);
        check_unary((glm53_unary_op)op, 257, 130, F32);
        check_unary((glm53_unary_op)op, 3, 4096, BF16);
    }
    for (int op = GLM53_BINARY_ADD; op <= GLM53_BINARY_MUL; op++) {
        check_binary((glm53_binary_op)op, 17, 130, BF16, false, false);
        check_binary((glm53_binary_op)op, 257, 33, F32, true, false);
        check_binary((glm53_binary_op)op, 3, 4096, BF16, true, true);
        check_binary((glm53_binary_op)op, 1, 5, F32, false, true);
    }
    check_axpby(17, 130, BF16, 0.7f, 0.0f, false);
    check_axpby(257, 33, F32, -1.5f, 0.5f, false);
    check_axpby(3, 4096, F32, 0.176f, 0.0f, true);
    check_axpby(1, 5, BF16, 2.0f, 1.0f, false);
    check_swiglu(17, 130, BF16, 10.0f);
    check_swiglu(257, 33, F32, 10.0f);
    check_swiglu(3, 4096, F32, 0.0f);
    check_swiglu(1, 5, BF16, 0.0f);
    check_conv1d(1, 24576, 4, BF16, F32);
    check_conv1d(7, 33, 4, F32, F32);
    check_conv1d(65, 130, 4, BF16, BF16);
    check_conv1d(3, 17, 2, F32, BF16);
}

static void group_index(void) {
    check_topk(1, 154880, 8, 0, 0, 0);
    check_topk(3, 154880, 64, 0, 0, 0);
    check_topk(17, 33, 5, 0, 0, 0);
    check_topk(2, 5, 5, 0, 0, 0);
    check_topk(4, 1000, 64, 8, 0, 0);
    check_topk(4, 1000, 64, 0, 50, 0);
    check_topk(2, 70, 64, 3, 2, 0);   /* more NaNs than numbers in places: NaNs must come last, by index */
    check_topk(8, 154880, 1, 0, 0, 154856);   /* greedy over GLM-5.3's tokenizer ids */
    check_topk(5, 1000, 4, 3, 0, 900);        /* ties, padding columns that would tie too */
    /* the two-stage form: slices of 2048 columns, then a merge of their candidates */
    check_topk(2, 154880, 64, 1000, 0, 0);    /* ties spread over many slices */
    check_topk(64, 154880, 1, 4, 0, 154856);  /* equal maxima in many slices, 64 rows */
    check_topk(3, 5000, 64, 2, 3, 4099);      /* n_valid cuts a slice; NaNs and ties */
    check_topk(2, 4099, 3, 0, 1, 0);          /* scalar loads (N % 4 != 0), every value NaN */
    check_topk(2, 2049, 64, 0, 0, 0);         /* k above the last slice's length */
    check_topk(2, 8192, 8, 0, 0, 6147);       /* float4 loads, n_valid % 4 != 0 */
    check_gather(1000, 130, 17, BF16, BF16);
    check_gather(1000, 130, 17, BF16, F32);
    check_gather(300, 4096, 3, FP8, BF16);
    check_gather(300, 4096, 3, FP8, F32);
    check_gather(5000, 33, 257, F32, F32);
    check_gather(100, 20, 5, F16, F32);
    check_scatter(1000, 130, 17, BF16);
    check_scatter(300, 33, 257, F32);
    check_scatter(4, 4096, 1, BF16);
}

static void group_mhc(void) {
    for (int dt = F32; dt <= BF16; dt++) {
        check_mhc_expand(1, 4, 4096, dt);
        check_mhc_expand(17, 4, 130, dt);
        check_mhc_pre(1, 4, 4096, dt, F32);
        check_mhc_pre(3, 4, 130, dt, BF16);
        check_mhc_pre(17, 4, 4096, dt, BF16);
        check_mhc_pre(5, 2, 33, dt, F32);
        check_mhc_post(1, 4, 4096, dt);
        check_mhc_post(17, 4, 130, dt);
        check_mhc_post(3, 3, 33, dt);
        check_mhc_mean(1, 4, 4096, dt);
        check_mhc_mean(17, 4, 130, dt);
    }
    check_mhc_pre_rows_invariant(5, 4, 4096);   /* 16-byte loads */
    check_mhc_pre_rows_invariant(19, 4, 4096);  /* three blocks of up to 8 rows a chunk */
    check_mhc_site(1, 4096, 1);                 /* a decode row at the real width */
    check_mhc_site(1, 4096, 0);
    check_mhc_site(17, 4096, 1);
    check_mhc_site(3, 136, 1);                  /* a last chunk of 32 elements, D not a multiple of 256 */
    check_mhc_site(5, 40, 0);                   /* every row in one chunk */
    check_mhc_site(64, 4096, 1);                /* from 64 rows the prefill form (rows kernel + tail kernel) */
    check_mhc_site(64, 4096, 0);
    check_mhc_site(100, 4096, 1);               /* rows shared unevenly among the rows kernel's blocks */
    check_mhc_site(300, 4096, 0);
    check_mhc_site(300, 4096, 1);
    check_mhc_site(100, 136, 1);                /* a last chunk of 32 elements, D not a multiple of 256 */
    check_mhc_site(300, 40, 0);                 /* every row in one chunk */
    check_mhc_site(2100, 136, 1);               /* two launch pairs (2,048 rows each) */
    check_mhc_site_refuses();
    check_mhc_pre_rows_invariant(3, 4, 130);    /* element loads */
}

static void group_kda(void) {
    for (int dt = F32; dt <= BF16; dt++) {
        check_kda_gate(1, 64, 128, dt, 1);
        check_kda_gate(17, 4, 16, dt, 0);
        check_kda_gate(37, 64, 128, dt, 1);   /* the model's width, rows not a multiple of the rows form's 16 */
        check_kda_gate(3, 3, 11, dt, 1);
        check_kda_recurrent(4, 16, 16, 1, dt, 1, false);
        check_kda_recurrent(4, 16, 16, 7, dt, 3, true);
        check_kda_recurrent(4, 16, 16, 65, dt, 16, false);
        check_kda_recurrent(2, 33, 20, 5, dt, 2, false);
    }
    check_kda_recurrent(64, 128, 128, 3, BF16, 0, false);
    check_kda_recurrent(64, 128, 128, 16, F32, 4, false);   /* two full stages of 8 rows */
    check_kda_recurrent(64, 128, 128, 17, F32, 4, false);   /* a stage of one row after them */
    check_kda_recurrent(64, 128, 128, 300, BF16, 37, false);   /* a prefill: 38 stages, snapshots inside stages */
    check_kda_recurrent(3, 20, 40, 29, F32, 5, false);      /* dk 20: quarters of 5 rows; dv 40: a part-empty block */
    check_kda_rows_invariant(64, 128, 128, 5, BF16);
    check_kda_rows_invariant(64, 128, 128, 41, F32);        /* past several stages: a prefill gives decode's bits */
    check_kda_rows_invariant(4, 16, 16, 7, F32);
    check_kda_recurrent(64, 128, 128, 3, F32, 1, false);
    for (int dt = F32; dt <= BF16; dt++) {
        check_kda_sequences(4, 16, 16, 4, dt);
        check_kda_sequences(3, 16, 24, 3, dt);    /* dv != dk: the v blocks are wider than the q, k ones */
        check_kda_sequences(2, 33, 20, 4, dt);    /* the l2norm over two warps; every recurrence sequential */
        check_kda_sequences(2, 16, 16, 16, dt);   /* the widest conv: history read up to row 14 */
        check_kda_sequences(8, 128, 128, 4, dt);  /* the model's head size */
    }

    /* The chunked recurrence, on backends made with it on, against the token kernel on one made with it off; then
     * all of it again with the intra kernel on tensor cores (GLM53_CUDA_KDA_INTRA_MMA=1, the same tolerances),
     * against the F32 intra kernel's bits ("taken"). */
    glm53_backend *const main_gpu = gpu;
    glm53_backend *chunked = kda_switch_backend("1", 0, "0"), *pieces = kda_switch_backend("1", KDA_TEST_PIECE, "0");
    glm53_backend *mma = kda_switch_backend("1", 0, "1"), *mma_pieces = kda_switch_backend("1", KDA_TEST_PIECE, "1");
    gpu_token = kda_switch_backend("0", 0, "0");
    if (!chunked || !pieces || !mma || !mma_pieces || !gpu_token) goto released;
    gpu = chunked;
    kda_chunked_cases();
    gpu = pieces;
    kda_chunked_piece_cases();
    gpu_intra_f32 = chunked;
    gpu = mma;
    kda_chunked_cases();
    gpu = mma_pieces;
    kda_chunked_piece_cases();
released:
    gpu = main_gpu;
    glm53_backend *const made[4] = {chunked, pieces, mma, mma_pieces};
    for (int i = 0; i < 4; i++)
        if (made[i]) made[i]->ops->destroy(made[i]);
    if (gpu_token) gpu_token->ops->destroy(gpu_token);
    gpu_token = gpu_intra_f32 = NULL;
}

static void group_indexer(void) {
    const char *mma_name[1] = {"GLM53_CUDA_KPOOL_MMA"}, *mma_off[1] = {"0"};
    kpool_plain = switched_backend("kpool_score", 1, mma_name, mma_off);
    for (int dt = F32; dt <= BF16; dt++) {
        check_kpool_compress(1, 4, 128, dt, F32);
        check_kpool_compress(5, 4, 33, dt, BF16);
        check_kpool_compress(300, 4, 128, dt, F32);
        check_kpool_compress(3, 16, 20, dt, F32);
        check_kpool_score(1, 32, 128, 3000, dt, KPOOL_RANDOM);
        check_kpool_score(5, 4, 32, 7, dt, KPOOL_RANDOM);
        check_kpool_score(3, 32, 128, 700, dt, KPOOL_RANDOM);
        check_kpool_score(2, 32, 128, 3000, dt, KPOOL_RANDOM);    /* 2 pools a warp */
        check_kpool_score(16, 32, 128, 3000, dt, KPOOL_RANDOM);   /* 4 pools a warp (the prefill grid) */
        /* from 17 rows the many-rows forms: F32 a lane a pool, BF16 on tensor cores (and the rows kernel switched) */
        check_kpool_score(17, 32, 128, 3000, dt, KPOOL_RANDOM);
        check_kpool_score(42, 8, 64, 130, dt, KPOOL_RANDOM);      /* rows and pools past whole blocks, 8 heads */
        check_kpool_score(300, 32, 128, 75, dt, KPOOL_CAUSAL);    /* a 300-token prefill at the real dims */
        check_kpool_score(600, 32, 128, 200, dt, KPOOL_CAUSAL);   /* blocks of pools no row of theirs has closed */
        check_kpool_score(256, 32, 128, 200, dt, KPOOL_ZEROS);    /* ReLU ties: many exact zeros */
        check_kpool_score(45, 8, 64, 140, dt, KPOOL_ZEROS);
        check_kpool_score(33, 5, 192, 260, dt, KPOOL_RANDOM);     /* dI 192, 5 heads, three pool blocks */
        check_kpool_score(20, 4, 30, 50, dt, KPOOL_RANDOM);       /* dI not a multiple of 4: the warp-sum form */
        check_kpool_score(3, 3, 33, 20, dt, KPOOL_RANDOM);        /* Q staged element by element, Hi % 8 != 0 */
        check_kpool_score(2, 9, 160, 40, dt, KPOOL_RANDOM);       /* dI > 128: the key not in registers */
    }
    if (kpool_plain) kpool_plain->ops->destroy(kpool_plain);
    kpool_plain = NULL;
    {
        const int32_t pos[] = {2, 20, 100, 119};   /* closed 0, 5, 25, 30 */
        check_kpool_select(4, pos, 30, 4, 8, 1, 0);
        check_kpool_select(4, pos, 30, 4, 8, 1, 3);
        check_kpool_select(4, pos, 30, 4, 8, 1, RELU_ZEROS);
    }
    {
        const int32_t pos[] = {1, 31, 35, 119};   /* closed 0 (no position at all), 8 (= n_select), 9, 30 */
        check_kpool_select(4, pos, 30, 4, 8, 0, 0);
        check_kpool_select(4, pos, 30, 4, 8, 0, 2);
    }
    {
        const int32_t pos[] = {2399, 2050, 100};   /* closed 600, 512, 25 */
        check_kpool_select(3, pos, 600, 4, 512, 1, 0);
        check_kpool_select(3, pos, 600, 4, 512, 1, 5);
        check_kpool_select(3, pos, 600, 4, 512, 1, RELU_ZEROS);
    }
    {
        const int32_t pos[] = {2052, 4099, 4103, 8191};   /* closed 513, 1025, 1026, 2048: decode at 2K-8K */
        check_kpool_select(4, pos, 2048, 4, 512, 1, 2);
        check_kpool_select(4, pos, 2048, 4, 512, 1, RELU_ZEROS);
    }
    {
        const int32_t pos[] = {999999, 400002};   /* closed 250000, 100000 */
        check_kpool_select(2, pos, 250000, 4, 512, 1, 0);
        check_kpool_select(2, pos, 250000, 4, 512, 1, RELU_ZEROS);
    }
    for (int dt = F32; dt <= BF16; dt++) {
        check_sparse_mla(1, 4, 32, 16, 32, 40, 12, dt, dt);
        check_sparse_mla(5, 4, 32, 16, 32, 40, 12, dt, F32);
        check_sparse_mla(3, 2, 8, 8, 16, 20, 7, dt, BF16);
    }
    check_sparse_mla(2, 64, 256, 256, 512, 3000, 2051, BF16, BF16);
    check_sparse_mla(3, 64, 256, 256, 512, 3000, 2051, F32, F32);
    /* past 16 rows: qh and the value product as batched GEMMs (the prefill form) */
    for (int dt = F32; dt <= BF16; dt++) {
        check_sparse_mla(40, 4, 32, 16, 32, 40, 12, dt, BF16);
        check_sparse_mla(17, 2, 8, 8, 16, 20, 7, dt, F32);
    }
    sparse_mla_flash_cases();
    check_sparse_mla(20, 64, 256, 256, 512, 3000, 2051, F32, FP8);    /* F32 activations: the split kernels */

    /* The flash cases once more on a backend made with GLM53_CUDA_MLA_FLASH16=1 (the 16-warp kernel, off by default
     * until a GPU has run it), at the same tolerances, each against the 8-warp kernel's bits on one made with it off:
     * "taken" fails if no output of the cases it takes differs (the 16-warp kernel did not run; one row for all of
     * them, since a case's BF16 outputs can all round alike), "fallback" if any differs where W is past its ids. */
    const char *f16_name[1] = {"GLM53_CUDA_MLA_FLASH16"}, *f16_on[1] = {"1"}, *f16_off[1] = {"0"};
    glm53_backend *const main_gpu = gpu, *flash16 = switched_backend("sparse_mla", 1, f16_name, f16_on);
    mla_plain = switched_backend("sparse_mla", 1, f16_name, f16_off);
    if (flash16 && mla_plain) {
        gpu = flash16;
        mla_variant = " flash16";
        mla_flash16_differing = 0;
        sparse_mla_flash_cases();
        mla_variant = "";
        gpu = main_gpu;
        if (!self_test) {   /* the CPU backends of --self-test give the same bits either way */
            check_begin("sparse_mla", "q:bf16 flash16", "the flash cases above");
            record_taken(mla_flash16_differing, "every output equals the 8-warp kernel's: the 16-warp kernel did not run");
            check_end();
        }
    }
    gpu = main_gpu;
    if (flash16) flash16->ops->destroy(flash16);
    if (mla_plain) mla_plain->ops->destroy(mla_plain);
    mla_plain = NULL;
}

static void group_moe(void) {
    check_moe_route(1, 288, 8, 1, 1, 1, 2.5f);
    check_moe_route(17, 288, 8, 1, 1, 1, 2.5f);
    check_moe_route(5, 64, 6, 8, 3, 0, 1.0f);
    check_moe_route(3, 16, 4, 4, 2, 1, 2.5f);
    check_moe_experts(1, 64, 32, 8, 2, BF16, BF16, 0, true);
    check_moe_experts(3, 130, 48, 6, 3, BF16, FP8, 16, false);   /* device path, K = 130: element-wise lanes */
    check_moe_experts(16, 4096, 2048, 12, 8, BF16, FP8, 128, false);   /* device path at its row limit */
    check_moe_rows_invariant(16, 4096, 512, 10, 8, FP8, 128, 1);    /* 128 slots on 10 experts: 12-13 rows each */
    check_moe_rows_invariant(5, 256, 128, 4, 3, BF16, 0, 1);
    check_moe_experts(5, 64, 32, 8, 2, F32, F32, 0, true);
    check_moe_experts(40, 130, 48, 6, 3, BF16, FP8, 16, false);
    check_moe_experts(40, 130, 48, 6, 3, F32, FP8, 16, false);
    check_moe_experts(700, 64, 32, 8, 2, BF16, BF16, 0, false);   /* more rows than one chunk */
    check_moe_experts(1, 4096, 2048, 12, 8, BF16, FP8, 128, false);
    check_moe_experts(33, 4096, 2048, 12, 8, BF16, FP8, 128, false);
    check_moe_experts_held(3, 130, 48, 8, 3, BF16, FP8, 16, false, 2, 3);    /* expert parallel, device path */
    check_moe_experts_held(40, 130, 48, 8, 3, F32, FP8, 16, false, 4, 4);    /* expert parallel, grouped path */
    /* The device-grouped path (GLM53_CUDA_GROUPED_EXPERTS, on here): BF16 x, D and F multiples of 64. FP8 experts
     * with 128 x 128 blocks take the folded wgmma tiles (GLM53_CUDA_GROUPED_FOLDED, on here): 128 rows, or 64
     * where a chunk's slots average fewer than 96 an expert; other experts the mma.sync tile (64 rows). */
    check_moe_experts(300, 256, 128, 16, 8, BF16, FP8, 128, true);   /* 160 rows an expert: 128-row m-tiles 128 + 32 */
    check_moe_experts(130, 256, 128, 8, 4, BF16, FP8, 64, false);    /* 64 x 64 scale blocks: a scale per K step */
    check_moe_experts(200, 320, 192, 6, 3, BF16, BF16, 0, false);    /* BF16 experts; D 320: down's last tile half past D */
    check_moe_experts(64, 4096, 2048, 16, 8, BF16, FP8, 128, false); /* the real D and width, 32 rows an expert: 64-row tile */
    check_moe_experts(100, 4096, 2048, 2, 2, BF16, FP8, 128, false); /* the real D and width, 100 rows an expert: 128-row tile */
    check_moe_experts(8192 + 300, 128, 128, 8, 2, BF16, FP8, 128, false);   /* two chunks of rows: 2,048 rows an expert
                                                                             * on the 128-row tile, then 75 on the 64 */
    /* the wgmma tile's code conversion on every FP8 code but NaN, then on nothing but subnormal codes (a flush to
     * zero anywhere would give zeros) */
    fp8_exp_lo = 0, fp8_exp_count = 16;
    check_moe_experts(64, 256, 128, 8, 4, BF16, FP8, 128, false);
    fp8_exp_lo = 0, fp8_exp_count = 1;
    check_moe_experts(64, 256, 128, 8, 4, BF16, FP8, 128, false);
    fp8_exp_lo = 4, fp8_exp_count = 6;
    check_moe_experts_held(40, 128, 64, 8, 3, BF16, FP8, 64, false, 2, 3);    /* expert parallel */
    check_moe_experts_held(200, 256, 128, 8, 4, BF16, FP8, 128, false, 2, 4); /* 100 rows a held expert: 128-row tile */
    check_moe_rows_invariant(72, 256, 128, 6, 4, FP8, 128, 24);
    check_moe_rows_invariant(288, 256, 128, 6, 4, FP8, 128, 24);   /* the 128-row folded tile against the 64-row one */
    check_moe_rows_invariant(72, 128, 192, 5, 3, BF16, 0, 24);

    /* The promoted wgmma tile (GLM53_CUDA_GROUPED_FOLDED=0) on the cases above that take a wgmma tile. */
    const char *folded_name[1] = {"GLM53_CUDA_GROUPED_FOLDED"}, *folded_off[1] = {"0"};
    glm53_backend *const main_gpu = gpu, *promoted = switched_backend("moe_experts", 1, folded_name, folded_off);
    if (!promoted) return;
    gpu = promoted;
    moe_variant = " promoted";
    check_moe_experts(300, 256, 128, 16, 8, BF16, FP8, 128, true);
    check_moe_experts(64, 4096, 2048, 16, 8, BF16, FP8, 128, false);
    check_moe_experts(100, 4096, 2048, 2, 2, BF16, FP8, 128, false);
    fp8_exp_lo = 0, fp8_exp_count = 16;
    check_moe_experts(64, 256, 128, 8, 4, BF16, FP8, 128, false);
    fp8_exp_lo = 0, fp8_exp_count = 1;
    check_moe_experts(64, 256, 128, 8, 4, BF16, FP8, 128, false);
    fp8_exp_lo = 4, fp8_exp_count = 6;
    check_moe_experts_held(200, 256, 128, 8, 4, BF16, FP8, 128, false, 2, 4);
    check_moe_rows_invariant(72, 256, 128, 6, 4, FP8, 128, 24);
    moe_variant = "";
    gpu = main_gpu;
    promoted->ops->destroy(promoted);
}

typedef struct {
    const char *name;
    void (*run)(void);
} group;

static const group groups[] = {
    {"memory", group_memory},   {"matmul", group_matmul}, {"norm", group_norm}, {"elementwise", group_elementwise},
    {"index", group_index},     {"mhc", group_mhc},       {"kda", group_kda},   {"indexer", group_indexer},
    {"moe", group_moe},
};

/* ============================================================================================================
 * Timing (informative): CUDA events on the backend's stream around `reps` launches after `warm` ones
 * ==========================================================================================================*/
typedef struct {
    char op[40], shape[64];
    double us, floor_us, bytes, flops;
} bench_row;

static bench_row benches[32];
static int n_benches;

enum { BENCH_WARM = 3, BENCH_REPS = 20 };
static const double HBM_BYTES_PER_S = 4.3e12, BF16_FLOPS_PER_S = 790e12;

typedef glm53_status (*bench_call)(void *ctx);

/* A weight [rows, cols] on the CUDA side only, constant (timings do not depend on the values): BF16 0.01, or
 * FP8 code 0x38 (1.0) with a 128x128 block scale of 0.01. */
static glm53_status bench_weight(glm53_tensor **out, int dtype, int64_t rows, int64_t cols) {
    if (dtype == BF16) {
        GLM53_TRY(new_tensor(gpu, out, BF16, SHAPE(rows, cols)));
        return gpu->ops->fill(gpu, *out, 0.01f);
    }
    assert(dtype == FP8);
    uint8_t *codes = hmem((size_t)(rows * cols));
    memset(codes, 0x38, (size_t)(rows * cols));
    glm53_tensor *scale;
    GLM53_TRY(new_tensor(gpu, &scale, F32, SHAPE((rows + 127) / 128, (cols + 127) / 128)));
    GLM53_TRY(gpu->ops->fill(gpu, scale, 0.01f));
    GLM53_TRY(tensor_raw(gpu, out, FP8, codes, SHAPE(rows, cols)));
    (*out)->scale = scale;
    (*out)->block_rows = (*out)->block_cols = 128;
    return GLM53_OK;
}

/* A failed timing run is printed, not tabled: timings are informative and the checks cover correctness. */
static void bench_end(void) {
    if (ck.failed) printf("timing %s %s failed: %s\n", ck.op, ck.shape, ck.msg);
    check_cleanup();
}

static void bench_record(const char *op, const char *shape, double us, double bytes, double flops) {
    if (n_benches == (int)(sizeof benches / sizeof benches[0])) return;
    bench_row *b = &benches[n_benches++];
    snprintf(b->op, sizeof b->op, "%s", op);
    snprintf(b->shape, sizeof b->shape, "%s", shape);
    b->us = us;
    b->bytes = bytes;
    b->flops = flops;
    double t_mem = bytes / HBM_BYTES_PER_S, t_flop = flops / BF16_FLOPS_PER_S;
    b->floor_us = 1e6 * (t_mem > t_flop ? t_mem : t_flop);
}

/* Mean microseconds per call, or a negative number when a call or an event failed (message printed). */
static double bench_time(bench_call call, void *ctx) {
    cudaStream_t stream = (cudaStream_t)gpu->stream;
    for (int i = 0; i < BENCH_WARM; i++)
        if (!status_ok(call(ctx), "bench warm-up")) return -1.0;
    if (!status_ok(gpu->ops->sync(gpu), "bench sync")) return -1.0;
    cudaEvent_t start, stop;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) return -1.0;
    float ms = -1.0f;
    bool ok = cudaEventRecord(start, stream) == cudaSuccess;
    for (int i = 0; ok && i < BENCH_REPS; i++) ok = status_ok(call(ctx), "bench call");
    ok = ok && cudaEventRecord(stop, stream) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ok ? 1000.0 * ms / BENCH_REPS : -1.0;
}

typedef struct {
    glm53_tensor *y, *x, *w;
} mm_ctx;
static glm53_status call_matmul(void *p) {
    mm_ctx *c = p;
    return gpu->ops->matmul(gpu, c->y, c->x, c->w);
}

static void bench_matmul(int64_t M, int64_t N, int64_t K, int w_dt) {
    char shape[64];
    snprintf(shape, sizeof shape, "%lldx%lldx%lld w:%s", (long long)M, (long long)N, (long long)K, dt_name(w_dt));
    check_begin("bench matmul", dt_name(w_dt), "%s", shape);
    mm_ctx c = {0};
    TRY(new_tensor(gpu, &c.x, BF16, SHAPE(M, K)));
    TRY(gpu->ops->fill(gpu, c.x, 0.5f));
    TRY(new_tensor(gpu, &c.y, BF16, SHAPE(M, N)));
    TRY(bench_weight(&c.w, w_dt, N, K));
    double us = bench_time(call_matmul, &c);
    double bytes = (double)N * K * glm53_dtype_size((glm53_dtype)w_dt) + 2.0 * (M * K + M * N);
    if (us >= 0) bench_record("matmul", shape, us, bytes, 2.0 * M * N * K);
done:
    bench_end();
}

typedef struct {
    glm53_mhc_site site;
} mhc_site_ctx;
static glm53_status call_mhc_site(void *p) {
    mhc_site_ctx *c = p;
    return gpu->ops->mhc_site(gpu, &c->site);
}

/* mhc_site with the post step at S 4, D 4096 (a site between two blocks): N 1 takes the one-launch kernel, N 64 and
 * up the prefill form. Repeated calls feed post and comb back in place, as the model does. */
static void bench_mhc_site(int64_t N) {
    const int64_t S = 4, D = 4096, n_mix = (2 + S) * S;
    char shape[64];
    snprintf(shape, sizeof shape, "N %lld S 4 D 4096", (long long)N);
    check_begin("bench mhc_site", "bf16", "%s", shape);
    if (!gpu->ops->mhc_site) goto done;
    mhc_site_ctx c = {0};
    glm53_tensor *H_out, *x, *xn, *post, *comb, *y, *H_in, *fn, *base, *scale, *norm;
    TRY(bench_weight(&fn, BF16, n_mix, S * D));
    TRY(new_tensor(gpu, &H_out, BF16, SHAPE(N, S, D)));
    TRY(new_tensor(gpu, &x, BF16, SHAPE(N, D)));
    TRY(new_tensor(gpu, &xn, BF16, SHAPE(N, D)));
    TRY(new_tensor(gpu, &post, F32, SHAPE(N, S)));
    TRY(new_tensor(gpu, &comb, F32, SHAPE(N, S, S)));
    TRY(new_tensor(gpu, &y, BF16, SHAPE(N, D)));
    TRY(new_tensor(gpu, &H_in, BF16, SHAPE(N, S, D)));
    TRY(new_tensor(gpu, &base, F32, SHAPE(n_mix)));
    TRY(new_tensor(gpu, &scale, F32, SHAPE(3)));
    TRY(new_tensor(gpu, &norm, BF16, SHAPE(D)));
    TRY(gpu->ops->fill(gpu, post, 1.0f));
    TRY(gpu->ops->fill(gpu, comb, 0.25f));
    TRY(gpu->ops->fill(gpu, y, 0.5f));
    TRY(gpu->ops->fill(gpu, H_in, 0.5f));
    TRY(gpu->ops->fill(gpu, base, 0.1f));
    TRY(gpu->ops->fill(gpu, scale, 1.0f));
    TRY(gpu->ops->fill(gpu, norm, 1.0f));
    c.site = (glm53_mhc_site){.H_out = H_out, .x = x, .xn = xn, .post = post, .comb = comb, .y = y, .H_in = H_in,
                              .fn = fn, .base = base, .scale = scale, .norm = norm, .rms_eps = 1e-5f, .hc_eps = 1e-6f,
                              .norm_eps = 1e-5f, .sinkhorn_iters = 20};
    double us = bench_time(call_mhc_site, &c);
    /* floor: H read and written, y read, x and xn written (BF16), and fn once */
    double bytes = 2.0 * (2.0 * N * S * D + 3.0 * N * D + (double)n_mix * S * D);
    if (us >= 0) bench_record("mhc_site", shape, us, bytes, 2.0 * N * S * D * (n_mix + 2 * S + 1));
done:
    bench_end();
}

typedef struct {
    glm53_tensor *o, *q, *k, *v, *g, *beta, *states, *slots;
} kda_ctx;
static glm53_status call_kda(void *p) {
    kda_ctx *c = p;
    return gpu->ops->kda_recurrent(gpu, c->o, c->q, c->k, c->v, c->g, c->beta, c->states, c->slots);
}

static void bench_kda(int64_t T) {
    char shape[64];
    snprintf(shape, sizeof shape, "H 64 dk 128 dv 128 T %lld", (long long)T);
    check_begin("bench kda_recurrent", "bf16", "%s", shape);
    kda_ctx c = {0};
    int64_t H = 64, d = 128;
    TRY(new_tensor(gpu, &c.q, BF16, SHAPE(T, H, d)));
    TRY(new_tensor(gpu, &c.k, BF16, SHAPE(T, H, d)));
    TRY(new_tensor(gpu, &c.v, BF16, SHAPE(T, H, d)));
    TRY(new_tensor(gpu, &c.o, BF16, SHAPE(T, H, d)));
    TRY(new_tensor(gpu, &c.g, F32, SHAPE(T, H, d)));
    TRY(new_tensor(gpu, &c.beta, F32, SHAPE(T, H)));
    /* A ring of one: start from slot 0, keep only the last row's state (a prefill without snapshots). */
    TRY(new_tensor(gpu, &c.states, F32, SHAPE(1, H, d, d)));
    int32_t *slot_ids = hmem((size_t)(T + 1) * sizeof(int32_t));
    for (int64_t t = 0; t <= T; t++) slot_ids[t] = t == 0 || t == T ? 0 : -1;
    TRY(tensor_raw(gpu, &c.slots, I32, slot_ids, SHAPE(T + 1)));
    TRY(gpu->ops->fill(gpu, c.q, 0.01f));
    TRY(gpu->ops->fill(gpu, c.k, 0.01f));
    TRY(gpu->ops->fill(gpu, c.v, 0.5f));
    TRY(gpu->ops->fill(gpu, c.g, -0.01f));
    TRY(gpu->ops->fill(gpu, c.beta, 0.5f));
    TRY(gpu->ops->fill(gpu, c.states, 0.0f));
    double us = bench_time(call_kda, &c);
    /* floor: the state read and written once, plus the token rows */
    double bytes = 2.0 * H * d * d * 4 + (double)T * H * (4 * d * 2 + d * 4 + 4);
    if (us >= 0) bench_record("kda_recurrent", shape, us, bytes, (double)T * H * d * d * 8);
done:
    bench_end();
}

typedef struct {
    glm53_tensor *o, *q, *latent, *idx, *kv_b;
} mla_ctx;
static glm53_status call_mla(void *p) {
    mla_ctx *c = p;
    return gpu->ops->sparse_mla(gpu, c->o, c->q, c->latent, c->idx, c->kv_b, 0.0625f);
}

static void bench_sparse_mla(int64_t T) {
    char shape[64];
    int64_t H = 64, dk = 256, dv = 256, R = 512, W = 2051, cap = 4096;
    snprintf(shape, sizeof shape, "T %lld H 64 dk 256 dv 256 R 512 W 2051", (long long)T);
    check_begin("bench sparse_mla", "bf16", "%s", shape);
    mla_ctx c = {0};
    int32_t *iv = hmem((size_t)(T * W) * sizeof(int32_t));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < W; j++) iv[t * W + j] = (int32_t)((j * 7 + t) % cap);
    TRY(new_tensor(gpu, &c.q, BF16, SHAPE(T, H, dk)));
    TRY(gpu->ops->fill(gpu, c.q, 0.1f));
    TRY(new_tensor(gpu, &c.latent, BF16, SHAPE(cap, R)));
    TRY(gpu->ops->fill(gpu, c.latent, 0.1f));
    TRY(tensor_raw(gpu, &c.idx, I32, iv, SHAPE(T, W)));
    TRY(bench_weight(&c.kv_b, BF16, H * (dk + dv), R));
    TRY(new_tensor(gpu, &c.o, BF16, SHAPE(T, H, dv)));
    double us = bench_time(call_mla, &c);
    double bytes = (double)H * (dk + dv) * R * 2 + (double)T * W * R * 2;
    double flops = (double)T * H * 2.0 * (dk * R + 2.0 * W * R + dv * R);
    if (us >= 0) bench_record("sparse_mla", shape, us, bytes, flops);
done:
    bench_end();
}

typedef struct {
    glm53_tensor *y, *x, *ids, *wts;
    const glm53_tensor *gate[16], *up[16], *down[16];
    glm53_expert_set set;
} moe_ctx;
static glm53_status call_moe(void *p) {
    moe_ctx *c = p;
    return gpu->ops->moe_experts(gpu, c->y, c->x, c->ids, c->wts, &c->set, 10.0f);
}

static void bench_moe(int64_t N) {
    char shape[64];
    int64_t D = 4096, F = 2048, K = 8;
    int32_t E = 16;
    snprintf(shape, sizeof shape, "N %lld D 4096 F 2048 k 8 of %d, fp8", (long long)N, E);
    check_begin("bench moe_experts", "bf16/fp8", "%s", shape);
    moe_ctx c = {0};
    c.set = (glm53_expert_set){.n_experts = E, .gate = c.gate, .up = c.up, .down = c.down};
    for (int32_t e = 0; e < E; e++) {
        glm53_tensor *w;
        TRY(bench_weight(&w, FP8, F, D));
        c.gate[e] = w;
        TRY(bench_weight(&w, FP8, F, D));
        c.up[e] = w;
        TRY(bench_weight(&w, FP8, D, F));
        c.down[e] = w;
    }
    int32_t *iv = hmem((size_t)(N * K) * sizeof(int32_t));
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) iv[n * K + k] = (int32_t)((n * 3 + k) % E);
    TRY(new_tensor(gpu, &c.x, BF16, SHAPE(N, D)));
    TRY(gpu->ops->fill(gpu, c.x, 0.1f));
    TRY(new_tensor(gpu, &c.y, BF16, SHAPE(N, D)));
    TRY(tensor_raw(gpu, &c.ids, I32, iv, SHAPE(N, K)));
    TRY(new_tensor(gpu, &c.wts, F32, SHAPE(N, K)));
    TRY(gpu->ops->fill(gpu, c.wts, 0.125f));
    TRY(gpu->ops->prepare_experts(gpu, &c.set));
    double us = bench_time(call_moe, &c);
    int64_t used = N * K < E ? N * K : E;
    double bytes = (double)used * 3 * F * D;   /* each used expert's FP8 weights read once */
    if (us >= 0) bench_record("moe_experts", shape, us, bytes, 2.0 * N * K * 3 * F * D);
done:
    if (c.set.device) gpu->ops->release_experts(gpu, &c.set);
    bench_end();
}

static void run_benches(void) {
    bench_matmul(1, 4096, 4096, BF16);
    bench_matmul(1, 4096, 4096, FP8);
    bench_matmul(16, 4096, 4096, FP8);
    bench_matmul(4096, 4096, 4096, BF16);
    bench_matmul(1, 154880, 4096, BF16);
    bench_kda(1);
    bench_kda(64);
    bench_kda(8192);   /* a long prefill: the chunked form's case under GLM53_CUDA_KDA_CHUNKED=1 */
    bench_mhc_site(1);
    bench_mhc_site(64);
    bench_mhc_site(8192);   /* a long prefill: 16 calls a step */
    bench_sparse_mla(1);
    bench_sparse_mla(16);
    bench_moe(1);
    bench_moe(64);

    printf("\n--- timing (informative; floor = max(bytes / 4.3 TB/s, flops / 790 TFLOP/s)) ---\n");
    printf("%-16s %-40s %10s %10s %10s %10s %9s\n", "op", "shape", "us", "floor us", "GB/s", "TFLOP/s",
           "floor/us");
    for (int i = 0; i < n_benches; i++) {
        const bench_row *b = &benches[i];
        printf("%-16s %-40s %10.2f %10.2f %10.1f %10.2f %8.1f%%\n", b->op, b->shape, b->us, b->floor_us,
               b->bytes / (b->us * 1e3), b->flops / (b->us * 1e6), 100.0 * b->floor_us / b->us);
    }
    fflush(stdout);
}

/* ============================================================================================================ */
static bool in_list(const char *name, const char *list) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    bool bench = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) {
            for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) printf("%s\n", groups[g].name);
            return 0;
        } else if (strcmp(argv[i], "--no-bench") == 0) {
            bench = false;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--self-test") == 0) {
            self_test = true;
            bench = false;
        } else {
            fprintf(stderr, "usage: %s [--only group[,group...]] [--no-bench] [--list] [--self-test]\n", argv[0]);
            return 2;
        }
    }

    /* The fused ops and the device-grouped experts behind performance switches (docs/cuda.md) are checked even
     * where a default leaves one off; GLM53_CUDA_<NAME>=0 in the environment still turns one off. */
    setenv("GLM53_CUDA_KDA_SEQUENCES", "1", 0);
    setenv("GLM53_CUDA_GROUPED_EXPERTS", "1", 0);
    setenv("GLM53_CUDA_GROUPED_WGMMA", "1", 0);
    setenv("GLM53_CUDA_MHC_SITE", "1", 0);
    setenv("GLM53_CUDA_KDA_CONV_ASYNC", "1", 0);
    setenv("GLM53_CUDA_KDA_ROWS", "1", 0);   /* off by default until a GPU has run it; "bits" holds it to the old kernels */
    glm53_status st = self_test ? glm53_backend_cpu_create(0, &gpu) : glm53_backend_cuda_create(0, &gpu);
    if (st != GLM53_OK) {
        printf("cannot create the CUDA backend: %s\ncuda ops: 0 passed, 1 failed\n", glm53_last_error());
        return 1;
    }
    if (glm53_backend_cpu_create(0, &cpu) != GLM53_OK) {
        printf("cannot create the CPU backend: %s\ncuda ops: 0 passed, 1 failed\n", glm53_last_error());
        return 1;
    }
    {
        const char *name[1] = {"GLM53_CUDA_KDA_ROWS"}, *off[1] = {"0"};
        kda_rows_plain = switched_backend("kda_gate", 1, name, off);
    }
    struct cudaDeviceProp prop;
    if (self_test) printf("self-test: the CPU backend on both sides\n");
    else if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("device: %s, %d SMs, %.1f GiB, compute capability %d.%d\n", prop.name, prop.multiProcessorCount,
               (double)prop.totalGlobalMem / (1u << 30), prop.major, prop.minor);

    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        if (only && !in_list(groups[g].name, only)) continue;
        if (self_test && strcmp(groups[g].name, "memory") == 0) continue;
        printf("=== %s\n", groups[g].name);
        fflush(stdout);
        groups[g].run();
    }
    if (bench && !only) run_benches();

    print_table();
    if (kda_rows_plain) kda_rows_plain->ops->destroy(kda_rows_plain);
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    return test_failures ? 1 : 0;
}
