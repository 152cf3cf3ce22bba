/*
 * test_cpu_ops.c - every op of the CPU backend against a float64 reference written here.
 *
 * The references are plain double loops that share nothing with kernels/cpu except the number-format decoders
 * of core/ (glm53_bf16_to_f32, glm53_f16_to_f32, glm53_fp8_e4m3_to_f32), and the FP8 decoder is itself checked
 * against a hand-derived formula for all 256 codes first. Each op runs on odd sizes, on backends with 1, 2 and
 * 3 threads, with fresh random inputs per run and NaN-poisoned outputs, so an element a kernel forgets to write
 * shows up as NaN. Errors are max|got - ref| / max|ref|; the largest per op group is printed at the end.
 *
 * Tolerance 1e-5 everywhere: every op accumulates in F32, and for these sizes (at most 300 terms, summed in 8
 * lanes) the accumulated rounding stays well below that; the printed maxima show the margin. One refinement for
 * the dot-product ops (matmul, conv1d): F32 summation error is bounded by a multiple of sum|terms|, not of
 * |sum terms|, and when a case has a single output (M = N = 1) a random dot product can cancel to far below its
 * typical size sqrt(K) * |term|, so max|ref| alone would measure the cancellation, not the kernel. Those ops are
 * checked against max(max|ref|, max over outputs of sum|terms| / sqrt(K)); the plain metric is printed beside it.
 */
#include "test_util.h"

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

#include <stdatomic.h>

#define TOL 1e-5

enum { N_BACKENDS = 3 };
static glm53_backend *backends[N_BACKENDS];   /* 1, 2 and 3 threads */

static const int64_t SIZES[] = {1, 5, 33, 130, 257, 300};
enum { N_SIZES = sizeof SIZES / sizeof SIZES[0] };
static const int64_t ROWS[] = {1, 3, 17, 40};   /* 40: more than one 32-row matmul tile */
enum { N_ROWS = sizeof ROWS / sizeof ROWS[0] };

/* ------------------------------------------------------------------------------------------------------------
 * Per-group error bookkeeping
 */
typedef struct rel_err {
    double plain;     /* max|got - ref| / max|ref| */
    double checked;   /* what the tolerance applies to; see the top comment */
} rel_err;

static rel_err plain_err(double e) { return (rel_err){e, e}; }

/* Error of n dot-product outputs; abs_sum[i] = sum over the n_terms terms of output i of |term|. */
static rel_err dot_err(const float *got, const double *ref, const double *abs_sum, int64_t n, int64_t n_terms) {
    double max_diff = 0, max_ref = 0, floor = 0;
    for (int64_t i = 0; i < n; i++) {
        if (got[i] != got[i]) return plain_err(INFINITY);
        max_diff = fmax(max_diff, fabs(got[i] - ref[i]));
        max_ref = fmax(max_ref, fabs(ref[i]));
        floor = fmax(floor, abs_sum[i] / sqrt((double)n_terms));
    }
    double denom = fmax(max_ref, floor);
    return (rel_err){max_ref > 0 ? max_diff / max_ref : max_diff, denom > 0 ? max_diff / denom : max_diff};
}

typedef struct err_group {
    const char *name;
    rel_err     max;
} err_group;

static err_group groups[32];
static int n_groups;

static void record_err(const char *group, rel_err err) {
    int g = 0;
    while (g < n_groups && strcmp(groups[g].name, group) != 0) g++;
    if (g == n_groups) groups[n_groups++] = (err_group){group, {0.0, 0.0}};
    if (!(err.plain <= groups[g].max.plain)) groups[g].max.plain = err.plain;   /* NaN/inf sticks */
    if (!(err.checked <= groups[g].max.checked)) groups[g].max.checked = err.checked;
}

#define CHECK_REL(group, err, ...)                     \
    do {                                               \
        rel_err e_ = (err);                            \
        record_err(group, e_);                         \
        CHECK(e_.checked <= TOL, __VA_ARGS__);         \
    } while (0)
#define CHECK_ERR(group, err, ...) CHECK_REL(group, plain_err(err), __VA_ARGS__)

/* ------------------------------------------------------------------------------------------------------------
 * Host tensors and random data
 */
static glm53_tensor new_tensor(glm53_dtype dtype, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    glm53_tensor t = {.dtype = dtype, .device = GLM53_DEVICE_CPU, .ndim = ndim};
    int64_t dims[3] = {d0, d1, d2};
    for (int i = 0; i < ndim; i++) t.shape[i] = dims[i];
    glm53_tensor_set_contiguous(&t);
    size_t nbytes = glm53_tensor_nbytes(&t);
    t.data = malloc(nbytes ? nbytes : 1);
    return t;
}
static glm53_tensor new_mat(glm53_dtype dtype, int64_t rows, int64_t cols) {
    return new_tensor(dtype, 2, rows, cols, 0);
}
static glm53_tensor new_vec(glm53_dtype dtype, int64_t n) { return new_tensor(dtype, 1, n, 0, 0); }

static float *f32(const glm53_tensor *t) { return (float *)t->data; }
static int64_t numel(const glm53_tensor *t) { return glm53_tensor_numel(t); }

static void fill_normal(glm53_tensor *t, float scale, float offset) {
    for (int64_t i = 0; i < numel(t); i++) f32(t)[i] = offset + scale * test_normal();
}
static void poison(glm53_tensor *t) {
    for (int64_t i = 0; i < numel(t); i++) f32(t)[i] = NAN;
}

/* Random F16 codes with exponents 10..20 (magnitudes 2^-5 .. 2^6): finite, normal, varied mantissas. */
static uint16_t random_f16(void) {
    uint16_t sign = (uint16_t)(test_next() & 1) << 15, exp = (uint16_t)(10 + test_next() % 11);
    return sign | (uint16_t)(exp << 10) | (uint16_t)(test_next() & 0x3ff);
}

static uint8_t random_fp8(void) {
    uint8_t c;
    do c = (uint8_t)test_next(); while ((c & 0x7f) == 0x7f);
    return c;
}

/* A [rows, cols] weight of `dtype` with random contents; FP8 gets a random positive F32 scale of blocks
 * block_rows x block_cols (stored in *scale) unless block_rows is 0. */
static glm53_tensor new_weight(glm53_dtype dtype, int64_t rows, int64_t cols, int32_t block_rows,
                               int32_t block_cols, glm53_tensor *scale) {
    glm53_tensor w = new_mat(dtype, rows, cols);
    int64_t n = rows * cols;
    for (int64_t i = 0; i < n; i++) {
        switch (dtype) {
        case GLM53_F32: f32(&w)[i] = test_normal(); break;
        case GLM53_BF16: ((uint16_t *)w.data)[i] = glm53_f32_to_bf16(test_normal()); break;
        case GLM53_F16: ((uint16_t *)w.data)[i] = random_f16(); break;
        case GLM53_F8_E4M3: ((uint8_t *)w.data)[i] = random_fp8(); break;
        default: break;
        }
    }
    if (dtype == GLM53_F8_E4M3 && block_rows > 0) {
        *scale = new_mat(GLM53_F32, (rows + block_rows - 1) / block_rows, (cols + block_cols - 1) / block_cols);
        for (int64_t i = 0; i < numel(scale); i++) f32(scale)[i] = 0.001f + 0.01f * test_uniform();
        w.scale = scale;
        w.block_rows = block_rows;
        w.block_cols = block_cols;
    }
    return w;
}

/* Element (r, c) of a 2-D weight, decoded independently of kernels/cpu. */
static double weight_ref(const glm53_tensor *w, int64_t r, int64_t c) {
    int64_t i = r * w->shape[1] + c;
    switch (w->dtype) {
    case GLM53_F32: return ((const float *)w->data)[i];
    case GLM53_BF16: return glm53_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case GLM53_F16: return glm53_f16_to_f32(((const uint16_t *)w->data)[i]);
    case GLM53_F8_E4M3: {
        double v = glm53_fp8_e4m3_to_f32(((const uint8_t *)w->data)[i]);
        if (w->scale) {
            const glm53_tensor *s = w->scale;
            v *= ((const float *)s->data)[(r / w->block_rows) * s->shape[1] + c / w->block_cols];
        }
        return v;
    }
    default: return NAN;
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Number formats and the thread pool
 */
static void test_fp8_decoder(void) {
    TEST_CASE("fp8 e4m3 decode, all 256 codes") {
        int bad = 0;
        for (int c = 0; c < 256; c++) {
            int sign = c >> 7, exponent = (c >> 3) & 15, mantissa = c & 7;
            double want;
            if (exponent == 15 && mantissa == 7) want = NAN;
            else if (exponent == 0) want = mantissa / 8.0 * pow(2.0, -6);          /* subnormal */
            else want = (1.0 + mantissa / 8.0) * pow(2.0, exponent - 7);          /* bias 7 */
            if (sign) want = -want;
            float got = glm53_fp8_e4m3_to_f32((uint8_t)c);
            bool ok = isnan(want) ? isnan(got) : (double)got == want;
            if (!ok) bad++;
            CHECK(ok, "code 0x%02x: got %.9g, want %.9g", c, got, want);
        }
        CHECK(glm53_fp8_e4m3_to_f32(0x7e) == 448.0f, "0x7e is 448");
        CHECK(glm53_fp8_e4m3_to_f32(0xfe) == -448.0f, "0xfe is -448");
        CHECK(isnan(glm53_fp8_e4m3_to_f32(0x7f)) && isnan(glm53_fp8_e4m3_to_f32(0xff)), "0x7f, 0xff are NaN");
        CHECK(glm53_fp8_e4m3_to_f32(0x01) == 0x1p-9f, "smallest subnormal 2^-9");
        CHECK(glm53_fp8_e4m3_to_f32(0x08) == 0x1p-6f, "smallest normal 2^-6");
        CHECK(bad == 0, "%d codes differ from the formula", bad);
    }
}

typedef struct pool_probe {
    atomic_int *hits;     /* [n_items] */
    atomic_int  calls;
} pool_probe;

static void pool_probe_fn(void *ctx, int64_t begin, int64_t end) {
    pool_probe *p = ctx;
    atomic_fetch_add(&p->calls, 1);
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&p->hits[i], 1);
}

static void test_threadpool(void) {
    TEST_CASE("thread pool: every item exactly once, in at most a few ranges per thread") {
        static const int64_t counts[] = {0, 1, 2, 3, 7, 1000};
        for (int32_t threads = 1; threads <= 4; threads++) {
            glm53_pool *pool;
            CHECK(glm53_pool_create(threads, &pool) == GLM53_OK, "create %d", threads);
            CHECK(glm53_pool_n_threads(pool) == threads, "n_threads %d", threads);
            for (int rep = 0; rep < 200; rep++) {
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                    int64_t n = counts[c];
                    atomic_int hits[1000];
                    for (int64_t i = 0; i < n; i++) atomic_init(&hits[i], 0);
                    pool_probe probe = {.hits = hits};
                    atomic_init(&probe.calls, 0);
                    glm53_pool_run(pool, n, pool_probe_fn, &probe);
                    int wrong = 0;
                    for (int64_t i = 0; i < n; i++) wrong += atomic_load(&hits[i]) != 1;
                    int calls = atomic_load(&probe.calls), max_calls = n < 4 * threads ? (int)n : 4 * threads;
                    if (wrong || calls > max_calls)
                        CHECK(0, "threads %d, n %lld: %d items not hit once, %d calls", threads, (long long)n,
                              wrong, calls);
                }
            }
            glm53_pool_free(pool);
        }
        glm53_pool *pool;
        CHECK(glm53_pool_create(0, &pool) == GLM53_OK && glm53_pool_n_threads(pool) >= 1, "0 = online cores");
        glm53_pool_free(pool);
    }
    TEST_CASE("thread pool: back-to-back runs of different sizes never mix (a late worker, the next run's arguments)") {
        /* A worker that wakes late must not take a chunk of a run under another run's arguments: the race the
         * pool's closed generation prevents showed as items hit twice about once in 10,000 runs here. */
        for (int32_t threads = 2; threads <= 3; threads++) {
            glm53_pool *pool;
            CHECK(glm53_pool_create(threads, &pool) == GLM53_OK, "create %d", threads);
            int bad = 0;
            for (int rep = 0; rep < 100000; rep++) {
                int64_t n = (rep % 5) * 3 + 1;
                atomic_int hits[16];
                for (int64_t i = 0; i < n; i++) atomic_init(&hits[i], 0);
                pool_probe probe = {.hits = hits};
                atomic_init(&probe.calls, 0);
                glm53_pool_run(pool, n, pool_probe_fn, &probe);
                for (int64_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
            }
            CHECK(bad == 0, "threads %d: %d items not hit exactly once in 100,000 runs", threads, bad);
            glm53_pool_free(pool);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Memory ops
 */
static void test_memory(void) {
    TEST_CASE("memory: alloc, upload, download, copy, fill") {
        glm53_backend *be = backends[0];
        CHECK(strcmp(be->ops->name, "cpu") == 0 && be->device == GLM53_DEVICE_CPU && be->act_dtype == GLM53_F32,
              "identity");
        glm53_tensor a = {.dtype = GLM53_F32, .ndim = 3, .shape = {3, 5, 7}};
        CHECK(be->ops->alloc(be, &a) == GLM53_OK, "alloc");
        CHECK(a.stride[0] == 35 && a.stride[1] == 7 && a.stride[2] == 1, "contiguous strides");
        CHECK(((uintptr_t)a.data & 63) == 0, "64-byte aligned");
        float host[105], back[105];
        for (int i = 0; i < 105; i++) host[i] = test_normal();
        CHECK(be->ops->upload(be, &a, host) == GLM53_OK, "upload");
        CHECK(be->ops->download(be, back, &a) == GLM53_OK && memcmp(host, back, sizeof host) == 0, "round trip");

        glm53_tensor h = {.dtype = GLM53_BF16, .ndim = 2, .shape = {15, 7}};
        CHECK(be->ops->alloc(be, &h) == GLM53_OK, "alloc bf16");
        CHECK(be->ops->copy(be, &h, &a) == GLM53_OK, "copy f32 -> bf16");
        int bad = 0;
        for (int i = 0; i < 105; i++) bad += ((uint16_t *)h.data)[i] != glm53_f32_to_bf16(host[i]);
        CHECK(bad == 0, "f32 -> bf16 rounds to nearest even (%d wrong)", bad);
        poison(&a);
        CHECK(be->ops->copy(be, &a, &h) == GLM53_OK, "copy bf16 -> f32");
        bad = 0;
        for (int i = 0; i < 105; i++) bad += f32(&a)[i] != glm53_round_bf16(host[i]);
        CHECK(bad == 0, "bf16 -> f32 exact (%d wrong)", bad);

        glm53_tensor i32 = {.dtype = GLM53_I32, .ndim = 1, .shape = {105}};
        CHECK(be->ops->alloc(be, &i32) == GLM53_OK, "alloc i32");
        CHECK(be->ops->copy(be, &i32, &a) == GLM53_ERR_UNSUPPORTED, "f32 -> i32 copy is refused");
        CHECK(be->ops->fill(be, &i32, 7.0f) == GLM53_OK && ((int32_t *)i32.data)[104] == 7, "fill i32");
        CHECK(be->ops->fill(be, &a, 0.1f) == GLM53_OK && f32(&a)[0] == 0.1f && f32(&a)[104] == 0.1f, "fill f32");
        CHECK(be->ops->fill(be, &h, 0.1f) == GLM53_OK && ((uint16_t *)h.data)[104] == glm53_f32_to_bf16(0.1f),
              "fill bf16");
        CHECK(be->ops->sync(be) == GLM53_OK, "sync");

        glm53_tensor empty = {.dtype = GLM53_F32, .ndim = 2, .shape = {0, 4}};
        CHECK(be->ops->alloc(be, &empty) == GLM53_OK && empty.data, "zero-size alloc gives a pointer");
        be->ops->release(be, &empty);
        be->ops->release(be, &a);
        be->ops->release(be, &h);
        be->ops->release(be, &i32);
        CHECK(a.data == NULL, "release clears data");
    }
    TEST_CASE("memory: large blocks are kept for reuse, within a bound") {
        glm53_backend *be = backends[0];
        glm53_tensor one = {.dtype = GLM53_F32, .ndim = 2, .shape = {1024, 256}};   /* 1 MiB, like a cache tensor */
        CHECK(be->ops->alloc(be, &one) == GLM53_OK && ((uintptr_t)one.data & 63) == 0, "alloc 1 MiB");
        void *first = one.data;
        be->ops->release(be, &one);
        CHECK(be->ops->alloc(be, &one) == GLM53_OK, "alloc 1 MiB again");
#if !defined(__SANITIZE_ADDRESS__)   /* under ASan every block comes from the heap */
        CHECK(one.data == first, "the released block of that size is reused");
#else
        (void)first;
#endif
        be->ops->release(be, &one);

        enum { N = 100 };
        glm53_tensor big[N];
        for (int i = 0; i < N; i++) {
            big[i] = (glm53_tensor){.dtype = GLM53_F32, .ndim = 2, .shape = {1024, 256}};
            CHECK(be->ops->alloc(be, &big[i]) == GLM53_OK, "alloc 1 MiB (%d)", i);
            ((float *)big[i].data)[1024 * 256 - 1] = (float)i;   /* the whole tensor is there */
            big[i].shape[0] = 1;   /* release does not go by the shape */
        }
        void *data[N];
        for (int i = 0; i < N; i++) data[i] = big[i].data;
        (void)data;   /* compared below, except under ASan (heap blocks are not kept) */
        for (int i = 0; i < N; i++) be->ops->release(be, &big[i]);
        cpu_backend *impl = cpu_impl(be);
        size_t bound = impl->peak_bytes > ((size_t)64 << 20) ? impl->peak_bytes : ((size_t)64 << 20);
        CHECK(impl->kept_bytes <= bound, "released blocks kept: %zu bytes, at most the peak in use (%zu) or 64 MiB",
              impl->kept_bytes, impl->peak_bytes);
#if !defined(__SANITIZE_ADDRESS__)
        /* A burst of the same sizes as the last one reuses every block of it (the peak in use was N of them). */
        CHECK(impl->kept_bytes >= (size_t)N << 20, "all %d released blocks kept (%zu bytes)", N, impl->kept_bytes);
        int reused = 0;
        for (int i = 0; i < N; i++) {
            big[i] = (glm53_tensor){.dtype = GLM53_F32, .ndim = 2, .shape = {1024, 256}};
            CHECK(be->ops->alloc(be, &big[i]) == GLM53_OK, "alloc 1 MiB again (%d)", i);
            for (int j = 0; j < N; j++) reused += big[i].data == data[j];
        }
        CHECK(reused == N, "the next burst reuses the %d kept blocks (%d reused)", N, reused);
        for (int i = 0; i < N; i++) be->ops->release(be, &big[i]);
        /* A different size: the kept ones stay within the bound, so some of the new blocks are not kept. */
        glm53_tensor other[N];
        for (int i = 0; i < N; i++) {
            other[i] = (glm53_tensor){.dtype = GLM53_F32, .ndim = 2, .shape = {1024, 512}};
            CHECK(be->ops->alloc(be, &other[i]) == GLM53_OK, "alloc 2 MiB (%d)", i);
        }
        for (int i = 0; i < N; i++) be->ops->release(be, &other[i]);
        bound = impl->peak_bytes > ((size_t)64 << 20) ? impl->peak_bytes : ((size_t)64 << 20);
        CHECK(impl->kept_bytes <= bound, "after another size: %zu bytes kept, at most the peak in use (%zu)",
              impl->kept_bytes, impl->peak_bytes);
        CHECK(impl->live_bytes == 0, "no mapped block in use after all were released (%zu bytes)", impl->live_bytes);
#endif
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * matmul
 */
static rel_err matmul_err(glm53_backend *be, const glm53_tensor *w, int64_t M) {
    int64_t N = w->shape[0], K = w->shape[1];
    glm53_tensor x = new_mat(GLM53_F32, M, K), y = new_mat(GLM53_F32, M, N);
    fill_normal(&x, 1.0f, 0.0f);
    poison(&y);
    double *ref = malloc(sizeof(double) * (size_t)(M * N)), *abs_sum = malloc(sizeof(double) * (size_t)(M * N));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < K; k++) {
                double term = (double)f32(&x)[m * K + k] * weight_ref(w, n, k);
                s += term, a += fabs(term);
            }
            ref[m * N + n] = s, abs_sum[m * N + n] = a;
        }
    glm53_status st = be->ops->matmul(be, &y, &x, w);
    rel_err err = st == GLM53_OK ? dot_err(f32(&y), ref, abs_sum, M * N, K) : plain_err(INFINITY);
    free(ref), free(abs_sum), free(x.data), free(y.data);
    return err;
}

static void test_matmul(void) {
    static const glm53_dtype dtypes[] = {GLM53_F32, GLM53_BF16, GLM53_F16, GLM53_F8_E4M3};
    static const char *groups_by_dtype[] = {"matmul F32", "matmul BF16", "matmul F16", "matmul F8_E4M3"};
    bool have_avx2 = cpu_impl(backends[0])->use_avx2;
    for (int variant = 0; variant < (have_avx2 ? 2 : 1); variant++) {
        /* variant 0: the build the machine picks; 1: the baseline build on an AVX2 machine */
        for (int b = 0; b < N_BACKENDS; b++) cpu_impl(backends[b])->use_avx2 = have_avx2 && variant == 0;
        TEST_CASE(variant == 0 ? "matmul" : "matmul (baseline build)") {
            for (int d = 0; d < 4; d++)
                for (int in = 0; in < N_SIZES; in++)
                    for (int ik = 0; ik < N_SIZES; ik++)
                        for (int im = 0; im < N_ROWS; im++)
                            for (int b = 0; b < N_BACKENDS; b++) {
                                int64_t N = SIZES[in], K = SIZES[ik], M = ROWS[im];
                                glm53_tensor scale = {0};
                                glm53_tensor w = new_weight(dtypes[d], N, K, 128, 128, &scale);
                                CHECK_REL(groups_by_dtype[d], matmul_err(backends[b], &w, M),
                                          "%s M %lld N %lld K %lld, %d threads", groups_by_dtype[d],
                                          (long long)M, (long long)N, (long long)K, b + 1);
                                free(w.data);
                                free(scale.data);
                            }

            /* FP8 scale layouts: partial 128 blocks in both directions, one block covering a small weight,
             * small odd blocks (many scale runs inside one K block), and no scale at all. */
            static const struct { int64_t n, k; int32_t br, bc; } fp8_cases[] = {
                {200, 300, 128, 128}, {5, 7, 128, 128}, {33, 300, 3, 5}, {130, 257, 0, 0},
            };
            for (size_t c = 0; c < sizeof fp8_cases / sizeof fp8_cases[0]; c++)
                for (int im = 0; im < N_ROWS; im++)
                    for (int b = 0; b < N_BACKENDS; b++) {
                        glm53_tensor scale = {0};
                        glm53_tensor w = new_weight(GLM53_F8_E4M3, fp8_cases[c].n, fp8_cases[c].k, fp8_cases[c].br,
                                                    fp8_cases[c].bc, &scale);
                        if (c == 0) CHECK(scale.shape[0] == 2 && scale.shape[1] == 3, "scale [2, 3]");
                        if (c == 1) CHECK(scale.shape[0] == 1 && scale.shape[1] == 1, "scale [1, 1]");
                        CHECK_REL("matmul F8_E4M3", matmul_err(backends[b], &w, ROWS[im]),
                                  "fp8 case %zu, M %lld, %d threads", c, (long long)ROWS[im], b + 1);
                        free(w.data);
                        free(scale.data);
                    }
        }
    }
    for (int b = 0; b < N_BACKENDS; b++) cpu_impl(backends[b])->use_avx2 = have_avx2;

    TEST_CASE("matmul: unsupported weight dtype is an error") {
        glm53_tensor w = new_mat(GLM53_I32, 4, 4), x = new_mat(GLM53_F32, 1, 4), y = new_mat(GLM53_F32, 1, 4);
        CHECK(backends[0]->ops->matmul(backends[0], &y, &x, &w) == GLM53_ERR_UNSUPPORTED, "I32 weight");
        free(w.data);
        free(x.data);
        free(y.data);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Norms
 */
/* A [D] parameter as F32, BF16 (rounded) or F16 (random codes), with its values as doubles in `ref`. */
static glm53_tensor new_param(glm53_dtype dtype, int64_t D, float offset, double *ref) {
    glm53_tensor p = new_vec(dtype, D);
    for (int64_t i = 0; i < D; i++) {
        float v = offset + 0.5f * test_normal();
        if (dtype == GLM53_F16) {
            ((uint16_t *)p.data)[i] = random_f16();
            ref[i] = glm53_f16_to_f32(((uint16_t *)p.data)[i]);
        } else if (dtype == GLM53_BF16) {
            ((uint16_t *)p.data)[i] = glm53_f32_to_bf16(v);
            ref[i] = glm53_round_bf16(v);
        } else {
            f32(&p)[i] = v;
            ref[i] = v;
        }
    }
    return p;
}

enum norm_kind { NORM_RMS, NORM_LAYER, NORM_L2, NORM_SOFTMAX };

/* One run of a norm kind on x[M,D]; weight_mode 0: none, 1: F32, 2: BF16, 3: F16 (rms/layer norm only). */
static double norm_err(glm53_backend *be, enum norm_kind kind, int64_t M, int64_t D, int weight_mode,
                       bool in_place) {
    const float eps = 1e-5f, l2_scale = 0.75f;
    glm53_tensor x = new_mat(GLM53_F32, M, D), y = new_mat(GLM53_F32, M, D);
    fill_normal(&x, kind == NORM_SOFTMAX ? 4.0f : 1.5f, kind == NORM_LAYER ? 3.0f : 0.0f);
    double *wref = malloc(sizeof(double) * (size_t)D), *bref = malloc(sizeof(double) * (size_t)D);
    double *ref = malloc(sizeof(double) * (size_t)(M * D));
    glm53_tensor w = {0}, b = {0};
    bool has_w = weight_mode != 0 && (kind == NORM_RMS || kind == NORM_LAYER);
    if (has_w) {
        glm53_dtype dt = weight_mode == 1 ? GLM53_F32 : weight_mode == 2 ? GLM53_BF16 : GLM53_F16;
        w = new_param(dt, D, 1.0f, wref);
        if (kind == NORM_LAYER) b = new_param(dt, D, 0.0f, bref);
    }
    for (int64_t m = 0; m < M; m++) {
        const float *xr = f32(&x) + m * D;
        double *r = ref + m * D;
        double sum = 0, sq = 0, mean = 0, var = 0, max = -INFINITY;
        for (int64_t i = 0; i < D; i++) sum += xr[i], sq += (double)xr[i] * xr[i], max = fmax(max, xr[i]);
        mean = sum / D;
        for (int64_t i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= D;
        double esum = 0;
        for (int64_t i = 0; i < D; i++) esum += exp(xr[i] - max);
        for (int64_t i = 0; i < D; i++) {
            switch (kind) {
            case NORM_RMS: r[i] = xr[i] / sqrt(sq / D + eps) * (has_w ? wref[i] : 1.0); break;
            case NORM_LAYER:
                r[i] = (xr[i] - mean) / sqrt(var + eps) * (has_w ? wref[i] : 1.0) + (has_w ? bref[i] : 0.0);
                break;
            case NORM_L2: r[i] = xr[i] / sqrt(sq + eps) * l2_scale; break;
            case NORM_SOFTMAX: r[i] = exp(xr[i] - max) / esum; break;
            }
        }
    }
    glm53_tensor *out = in_place ? &x : &y;
    if (!in_place) poison(&y);
    glm53_status st = GLM53_OK;
    switch (kind) {
    case NORM_RMS: st = be->ops->rmsnorm(be, out, &x, has_w ? &w : NULL, eps); break;
    case NORM_LAYER: st = be->ops->layernorm(be, out, &x, has_w ? &w : NULL, has_w ? &b : NULL, eps); break;
    case NORM_L2: st = be->ops->l2norm(be, out, &x, eps, l2_scale); break;
    case NORM_SOFTMAX: st = be->ops->softmax(be, out, &x); break;
    }
    double err = st == GLM53_OK ? test_rel_err_f32_f64(f32(out), ref, M * D) : INFINITY;
    free(x.data), free(y.data), free(w.data), free(b.data), free(wref), free(bref), free(ref);
    return err;
}

static void test_norms(void) {
    static const char *names[] = {"rmsnorm", "layernorm", "l2norm", "softmax"};
    static const int64_t rows[] = {1, 3, 17, 300};   /* 300 rows: enough work to go parallel */
    TEST_CASE("norms") {
        for (int kind = 0; kind < 4; kind++)
            for (int im = 0; im < 4; im++)
                for (int id = 0; id < N_SIZES; id++)
                    for (int b = 0; b < N_BACKENDS; b++)
                        for (int weight_mode = 0; weight_mode < (kind <= NORM_LAYER ? 4 : 1); weight_mode++)
                            for (int in_place = 0; in_place < 2; in_place++)
                                CHECK_ERR(names[kind],
                                          norm_err(backends[b], (enum norm_kind)kind, rows[im], SIZES[id],
                                                   weight_mode, in_place),
                                          "%s M %lld D %lld weights %d in_place %d, %d threads", names[kind],
                                          (long long)rows[im], (long long)SIZES[id], weight_mode, in_place, b + 1);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Elementwise
 */
static double unary_ref(glm53_unary_op op, double x) {
    switch (op) {
    case GLM53_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case GLM53_UNARY_SILU: return x / (1.0 + exp(-x));
    case GLM53_UNARY_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case GLM53_UNARY_SOFTPLUS: return x > 20.0 ? x : log1p(exp(x));
    case GLM53_UNARY_EXP: return exp(x);
    case GLM53_UNARY_RELU: return x > 0 ? x : 0.0;
    }
    return NAN;
}

static void test_unary(void) {
    static const char *names[] = {"unary sigmoid", "unary silu", "unary gelu", "unary softplus", "unary exp",
                                  "unary relu"};
    static const int64_t counts[] = {1, 5, 33, 130, 257, 300, 20000};
    TEST_CASE("unary") {
        for (int op = GLM53_UNARY_SIGMOID; op <= GLM53_UNARY_RELU; op++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                for (int b = 0; b < N_BACKENDS; b++)
                    for (int in_place = 0; in_place < 2; in_place++) {
                        int64_t n = counts[c];
                        glm53_tensor x = new_mat(GLM53_F32, 1, n), y = new_mat(GLM53_F32, 1, n);
                        /* exp: moderate inputs so max|ref| is not one huge outlier; softplus: straddle 20 */
                        fill_normal(&x, op == GLM53_UNARY_EXP ? 2.0f : 8.0f, 0.0f);
                        if (op == GLM53_UNARY_SOFTPLUS && n >= 5) {
                            f32(&x)[0] = 20.0f, f32(&x)[1] = 20.5f, f32(&x)[2] = 19.5f, f32(&x)[3] = -30.0f;
                            f32(&x)[4] = 25.0f;
                        }
                        double *ref = malloc(sizeof(double) * (size_t)n);
                        for (int64_t i = 0; i < n; i++) ref[i] = unary_ref((glm53_unary_op)op, f32(&x)[i]);
                        glm53_tensor *out = in_place ? &x : &y;
                        if (!in_place) poison(&y);
                        glm53_status st = backends[b]->ops->unary(backends[b], out, &x, (glm53_unary_op)op);
                        CHECK_ERR(names[op], st == GLM53_OK ? test_rel_err_f32_f64(f32(out), ref, n) : INFINITY,
                                  "%s n %lld in_place %d, %d threads", names[op], (long long)n, in_place, b + 1);
                        if (op == GLM53_UNARY_SOFTPLUS && n >= 5)
                            CHECK(f32(out)[1] == 20.5f && f32(out)[4] == 25.0f, "softplus(x > 20) == x");
                        free(x.data), free(y.data), free(ref);
                    }
    }
}

static void test_binary(void) {
    TEST_CASE("binary: add/mul, row broadcast and full, in place") {
        for (int op = GLM53_BINARY_ADD; op <= GLM53_BINARY_MUL; op++)
            for (int im = 0; im < N_ROWS; im++)
                for (int in = 0; in < N_SIZES; in++)
                    for (int b = 0; b < N_BACKENDS; b++)
                        for (int broadcast = 0; broadcast < 2; broadcast++)
                            for (int in_place = 0; in_place < 2; in_place++) {
                                int64_t M = ROWS[im] * 10, N = SIZES[in];   /* up to 400 x 300: parallel */
                                glm53_tensor a = new_mat(GLM53_F32, M, N), y = new_mat(GLM53_F32, M, N);
                                glm53_tensor bt = broadcast ? new_vec(GLM53_F32, N) : new_mat(GLM53_F32, M, N);
                                fill_normal(&a, 1.0f, 0.0f);
                                fill_normal(&bt, 1.0f, 0.0f);
                                double *ref = malloc(sizeof(double) * (size_t)(M * N));
                                for (int64_t m = 0; m < M; m++)
                                    for (int64_t n = 0; n < N; n++) {
                                        double av = f32(&a)[m * N + n], bv = f32(&bt)[broadcast ? n : m * N + n];
                                        ref[m * N + n] = op == GLM53_BINARY_ADD ? av + bv : av * bv;
                                    }
                                glm53_tensor *out = in_place ? &a : &y;
                                if (!in_place) poison(&y);
                                glm53_status st = backends[b]->ops->binary(backends[b], out, &a, &bt,
                                                                      (glm53_binary_op)op);
                                CHECK_ERR(op == GLM53_BINARY_ADD ? "binary add" : "binary mul",
                                          st == GLM53_OK ? test_rel_err_f32_f64(f32(out), ref, M * N) : INFINITY,
                                          "op %d M %lld N %lld broadcast %d in_place %d, %d threads", op,
                                          (long long)M, (long long)N, broadcast, in_place, b + 1);
                                free(a.data), free(y.data), free(bt.data), free(ref);
                            }
    }
}

static void test_axpby(void) {
    static const float betas[] = {0.0f, 1.0f, -0.5f};
    static const int64_t counts[] = {1, 5, 33, 300, 20000};
    TEST_CASE("axpby") {
        for (size_t ib = 0; ib < 3; ib++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                for (int b = 0; b < N_BACKENDS; b++) {
                    int64_t n = counts[c];
                    float alpha = 0.5f + test_uniform(), beta = betas[ib];
                    glm53_tensor x = new_vec(GLM53_F32, n), y = new_vec(GLM53_F32, n);
                    fill_normal(&x, 1.0f, 0.0f);
                    /* beta 0: y must not be read, so NaN there must not leak into the result */
                    if (beta == 0.0f) poison(&y);
                    else fill_normal(&y, 1.0f, 0.0f);
                    double *ref = malloc(sizeof(double) * (size_t)n);
                    for (int64_t i = 0; i < n; i++)
                        ref[i] = (double)alpha * f32(&x)[i] + (beta == 0.0f ? 0.0 : (double)beta * f32(&y)[i]);
                    glm53_status st = backends[b]->ops->axpby(backends[b], &y, &x, alpha, beta);
                    CHECK_ERR("axpby", st == GLM53_OK ? test_rel_err_f32_f64(f32(&y), ref, n) : INFINITY,
                              "n %lld beta %g, %d threads", (long long)n, beta, b + 1);
                    free(x.data), free(y.data), free(ref);
                }
    }
}

static void test_swiglu(void) {
    static const float limits[] = {10.0f, 0.5f, 0.0f};
    static const int64_t counts[] = {1, 5, 33, 300, 20000};
    TEST_CASE("swiglu") {
        for (int il = 0; il < 3; il++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                for (int b = 0; b < N_BACKENDS; b++) {
                    int64_t n = counts[c];
                    float limit = limits[il];
                    glm53_tensor g = new_mat(GLM53_F32, 1, n), u = new_mat(GLM53_F32, 1, n);
                    glm53_tensor y = new_mat(GLM53_F32, 1, n);
                    fill_normal(&g, 5.0f, 0.0f);
                    fill_normal(&u, 5.0f, 0.0f);
                    if (n >= 2) f32(&g)[0] = 15.0f, f32(&u)[0] = -15.0f, f32(&g)[1] = -15.0f, f32(&u)[1] = 15.0f;
                    poison(&y);
                    double *ref = malloc(sizeof(double) * (size_t)n);
                    for (int64_t i = 0; i < n; i++) {
                        double gv = f32(&g)[i], uv = f32(&u)[i];
                        if (limit > 0) {
                            gv = fmin(gv, limit);
                            uv = fmax(fmin(uv, limit), -limit);
                        }
                        ref[i] = gv / (1.0 + exp(-gv)) * uv;
                    }
                    glm53_status st = backends[b]->ops->swiglu(backends[b], &y, &g, &u, limit);
                    CHECK_ERR("swiglu", st == GLM53_OK ? test_rel_err_f32_f64(f32(&y), ref, n) : INFINITY,
                              "n %lld limit %g, %d threads", (long long)n, limit, b + 1);
                    free(g.data), free(u.data), free(y.data), free(ref);
                }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * conv1d_causal
 */
static void test_conv1d(void) {
    static const int64_t steps[] = {1, 3, 17, 64};
    static const int64_t channels[] = {1, 5, 33, 130, 300};
    TEST_CASE("conv1d_causal") {
        for (int64_t K = 2; K <= 4; K += 2)
            for (int wbf16 = 0; wbf16 < 2; wbf16++)
                for (int it = 0; it < 4; it++)
                    for (int ic = 0; ic < 5; ic++)
                        for (int b = 0; b < N_BACKENDS; b++) {
                            int64_t T = steps[it], C = channels[ic];
                            glm53_tensor x = new_mat(GLM53_F32, T + K - 1, C), y = new_mat(GLM53_F32, T, C);
                            /* the checkpoint's [C, 1, K] layout, as the loader hands it over */
                            glm53_tensor w = new_tensor(wbf16 ? GLM53_BF16 : GLM53_F32, 3, C, 1, K);
                            fill_normal(&x, 1.0f, 0.0f);
                            for (int64_t i = 0; i < C * K; i++) {
                                float v = 0.5f * test_normal();
                                if (wbf16) ((uint16_t *)w.data)[i] = glm53_f32_to_bf16(v);
                                else f32(&w)[i] = v;
                            }
                            poison(&y);
                            double *ref = malloc(sizeof(double) * (size_t)(T * C));
                            double *abs_sum = malloc(sizeof(double) * (size_t)(T * C));
                            for (int64_t t = 0; t < T; t++)
                                for (int64_t c = 0; c < C; c++) {
                                    double s = 0, a = 0;
                                    for (int64_t i = 0; i < K; i++) {
                                        double wv = wbf16 ? glm53_bf16_to_f32(((uint16_t *)w.data)[c * K + i])
                                                          : f32(&w)[c * K + i];
                                        s += wv * f32(&x)[(t + i) * C + c];
                                        a += fabs(wv * f32(&x)[(t + i) * C + c]);
                                    }
                                    ref[t * C + c] = s, abs_sum[t * C + c] = a;
                                }
                            glm53_status st = backends[b]->ops->conv1d_causal(backends[b], &y, &x, &w);
                            CHECK_REL("conv1d_causal",
                                      st == GLM53_OK ? dot_err(f32(&y), ref, abs_sum, T * C, K) : plain_err(INFINITY),
                                      "K %lld bf16 %d T %lld C %lld, %d threads", (long long)K, wbf16,
                                      (long long)T, (long long)C, b + 1);
                            free(x.data), free(y.data), free(w.data), free(ref), free(abs_sum);
                        }
        glm53_tensor x = new_mat(GLM53_F32, 4, 3), y = new_mat(GLM53_F32, 1, 3), w = new_mat(GLM53_I32, 3, 4);
        CHECK(backends[0]->ops->conv1d_causal(backends[0], &y, &x, &w) == GLM53_ERR_UNSUPPORTED, "I32 conv weight");
        free(x.data), free(y.data), free(w.data);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Selection and indexing
 */
/* a ranks before b: larger value, then lower index; NaN after every number. */
static bool ranks_before(float va, int64_t ia, float vb, int64_t ib) {
    if (isnan(va) != isnan(vb)) return !isnan(va);
    if (isnan(va)) return ia < ib;
    return va > vb || (va == vb && ia < ib);
}

static void test_topk(void) {
    static const int64_t widths[] = {1, 5, 33, 130, 300};
    TEST_CASE("topk: descending, ties to the lower index, NaN never wins, columns past n_valid never compete") {
        for (int im = 0; im < 3; im++)
            for (int in = 0; in < 5; in++)
                for (int ik = 0; ik < 4; ik++)
                    for (int iv = 0; iv < 2; iv++)
                        for (int b = 0; b < N_BACKENDS; b++) {
                            int64_t M = ROWS[im] * 7, N = widths[in];
                            /* iv 1: the last two columns are padding (they hold the planted maximum) */
                            int64_t nv = iv && N >= 5 ? N - 2 : N;
                            int32_t ks[] = {1, 2, 8, (int32_t)nv};
                            int32_t k = ks[ik] < nv ? ks[ik] : (int32_t)nv;
                            glm53_tensor x = new_mat(GLM53_F32, M, N);
                            glm53_tensor vals = new_mat(GLM53_F32, M, k), idx = new_mat(GLM53_I32, M, k);
                            for (int64_t m = 0; m < M; m++) {
                                float *xr = f32(&x) + m * N;
                                for (int64_t i = 0; i < N; i++) xr[i] = test_normal();
                                /* planted: duplicates of the row maximum and of a middle value, and NaNs */
                                if (N >= 5) {
                                    float top = 10.0f + (float)(test_next() % 3);
                                    xr[N - 1] = top, xr[N / 2] = top, xr[1] = top;
                                    xr[N / 3] = xr[N - 2] = 0.25f;
                                    xr[0] = NAN;
                                    xr[N / 4 + 1] = NAN;
                                }
                            }
                            poison(&vals);
                            for (int64_t i = 0; i < M * k; i++) ((int32_t *)idx.data)[i] = -1;
                            glm53_status st = backends[b]->ops->topk(backends[b], &vals, &idx, &x, k, iv ? nv : 0);
                            int wrong = st != GLM53_OK;
                            for (int64_t m = 0; m < M && !wrong; m++) {
                                const float *xr = f32(&x) + m * N;
                                bool *taken = calloc((size_t)N, 1);
                                for (int32_t j = 0; j < k; j++) {
                                    int64_t best = -1;
                                    for (int64_t i = 0; i < nv; i++)
                                        if (!taken[i] && (best < 0 || ranks_before(xr[i], i, xr[best], best))) best = i;
                                    taken[best] = true;
                                    int32_t gi = ((int32_t *)idx.data)[m * k + j];
                                    float gv = f32(&vals)[m * k + j];
                                    bool same_val = isnan(xr[best]) ? isnan(gv) : gv == xr[best];
                                    if (gi != best || !same_val) wrong++;
                                    if (N >= 5 && j < nv - 2 && isnan(gv)) wrong++;   /* NaN chosen over a number */
                                }
                                free(taken);
                            }
                            CHECK(!wrong, "M %lld N %lld n_valid %lld k %d, %d threads", (long long)M, (long long)N,
                                  (long long)nv, k, b + 1);
                            free(x.data), free(vals.data), free(idx.data);
                        }
    }
}

static void test_gather_scatter(void) {
    static const glm53_dtype dtypes[] = {GLM53_F32, GLM53_BF16, GLM53_F8_E4M3};
    static const int64_t dims[] = {5, 130, 300};
    TEST_CASE("gather_rows from F32, BF16 and FP8 (block-scaled) tables") {
        for (int d = 0; d < 3; d++)
            for (int id = 0; id < 3; id++)
                for (int im = 0; im < N_ROWS; im++)
                    for (int b = 0; b < N_BACKENDS; b++) {
                        int64_t V = 150, D = dims[id], M = ROWS[im];
                        glm53_tensor scale = {0};
                        glm53_tensor table = new_weight(dtypes[d], V, D, 128, 128, &scale);
                        glm53_tensor ids = new_vec(GLM53_I32, M), y = new_mat(GLM53_F32, M, D);
                        for (int64_t m = 0; m < M; m++) ((int32_t *)ids.data)[m] = (int32_t)(test_next() % V);
                        if (M > 2) ((int32_t *)ids.data)[M - 1] = ((int32_t *)ids.data)[0];   /* repeated id */
                        poison(&y);
                        double *ref = malloc(sizeof(double) * (size_t)(M * D));
                        for (int64_t m = 0; m < M; m++)
                            for (int64_t i = 0; i < D; i++)
                                ref[m * D + i] = weight_ref(&table, ((int32_t *)ids.data)[m], i);
                        glm53_status st = backends[b]->ops->gather_rows(backends[b], &y, &table, &ids);
                        CHECK_ERR("gather_rows", st == GLM53_OK ? test_rel_err_f32_f64(f32(&y), ref, M * D)
                                                                : INFINITY,
                                  "%s D %lld M %lld, %d threads", glm53_dtype_name(dtypes[d]), (long long)D,
                                  (long long)M, b + 1);
                        ((int32_t *)ids.data)[0] = (int32_t)V;
                        CHECK(backends[b]->ops->gather_rows(backends[b], &y, &table, &ids) == GLM53_ERR_OUT_OF_RANGE,
                              "id == V is out of range");
                        ((int32_t *)ids.data)[0] = -1;
                        CHECK(backends[b]->ops->gather_rows(backends[b], &y, &table, &ids) == GLM53_ERR_OUT_OF_RANGE,
                              "id -1 is out of range");
                        free(table.data), free(scale.data), free(ids.data), free(y.data), free(ref);
                    }
    }

    TEST_CASE("scatter_rows") {
        for (int id = 0; id < 3; id++)
            for (int im = 0; im < N_ROWS; im++)
                for (int b = 0; b < N_BACKENDS; b++) {
                    int64_t V = 60, D = dims[id], M = ROWS[im];
                    glm53_tensor y = new_mat(GLM53_F32, V, D), before = new_mat(GLM53_F32, V, D);
                    glm53_tensor x = new_mat(GLM53_F32, M, D), ids = new_vec(GLM53_I32, M);
                    fill_normal(&y, 1.0f, 0.0f);
                    fill_normal(&x, 1.0f, 0.0f);
                    memcpy(before.data, y.data, glm53_tensor_nbytes(&y));
                    /* distinct ids: a random prefix of a shuffled 0..V-1 */
                    int32_t perm[60];
                    for (int i = 0; i < V; i++) perm[i] = i;
                    for (int i = (int)V - 1; i > 0; i--) {
                        int j = (int)(test_next() % (uint64_t)(i + 1));
                        int32_t t = perm[i];
                        perm[i] = perm[j], perm[j] = t;
                    }
                    memcpy(ids.data, perm, sizeof(int32_t) * (size_t)M);
                    glm53_status st = backends[b]->ops->scatter_rows(backends[b], &y, &x, &ids);
                    int wrong = st != GLM53_OK;
                    for (int64_t v = 0; v < V; v++) {
                        int64_t m = -1;
                        for (int64_t j = 0; j < M; j++)
                            if (perm[j] == v) m = j;
                        const float *want = m >= 0 ? f32(&x) + m * D : f32(&before) + v * D;
                        wrong += memcmp(f32(&y) + v * D, want, sizeof(float) * (size_t)D) != 0;
                    }
                    CHECK(!wrong, "D %lld M %lld, %d threads: %d rows wrong", (long long)D, (long long)M, b + 1,
                          wrong);
                    ((int32_t *)ids.data)[0] = (int32_t)V;
                    CHECK(backends[b]->ops->scatter_rows(backends[b], &y, &x, &ids) == GLM53_ERR_OUT_OF_RANGE,
                          "id == V is out of range");
                    free(y.data), free(before.data), free(x.data), free(ids.data);
                }
    }
}

int main(void) {
    test_seed(20250917);
    for (int b = 0; b < N_BACKENDS; b++)
        if (glm53_backend_cpu_create(b + 1, &backends[b]) != GLM53_OK) {
            fprintf(stderr, "cpu backend with %d threads: %s\n", b + 1, glm53_last_error());
            return 1;
        }
    printf("matmul build: %s\n", cpu_impl(backends[0])->use_avx512 ? "AVX-512 (baseline also tested)"
                                  : cpu_impl(backends[0])->use_avx2 ? "AVX2+FMA (baseline also tested)" : "baseline");

    test_fp8_decoder();
    test_threadpool();
    test_memory();
    test_matmul();
    test_norms();
    test_unary();
    test_binary();
    test_axpby();
    test_swiglu();
    test_conv1d();
    test_topk();
    test_gather_scatter();

    printf("  %-16s %-12s %s\n", "op", "max rel err", "(checked, dot-product ops)");
    for (int g = 0; g < n_groups; g++)
        if (groups[g].max.checked == groups[g].max.plain)
            printf("  %-16s %-12.3g\n", groups[g].name, groups[g].max.plain);
        else
            printf("  %-16s %-12.3g %.3g\n", groups[g].name, groups[g].max.plain, groups[g].max.checked);
    for (int b = 0; b < N_BACKENDS; b++) backends[b]->ops->destroy(backends[b]);
    return test_finish("test_cpu_ops");
}
