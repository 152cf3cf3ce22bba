/*
 * test_util.h - the tiny harness every C test uses (tests/c, tests/cuda).
 *
 * A test program is a main() that calls TEST_CASE blocks; CHECK records a failure with file:line and goes on,
 * so one run reports every broken case. test_finish() prints "<program>: N checks, M failed" and returns the
 * exit status ctest reads.
 */
#ifndef GLM53_TEST_UTIL_H
#define GLM53_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int test_checks, test_failures;
static const char *test_current = "";

#define TEST_CASE(name) for (int test_once_ = (test_current = (name), 1); test_once_; test_once_ = 0)

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        test_checks++;                                                            \
        if (!(cond)) {                                                            \
            test_failures++;                                                      \
            fprintf(stderr, "FAIL %s:%d [%s]: ", __FILE__, __LINE__, test_current); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)

/* Deterministic random numbers for test inputs (xorshift64*), independent of libc. */
static uint64_t test_rng_state = 0x9e3779b97f4a7c15ull;
static inline void test_seed(uint64_t s) { test_rng_state = s ? s : 1; }
static inline uint64_t test_next(void) {
    test_rng_state ^= test_rng_state >> 12;
    test_rng_state ^= test_rng_state << 25;
    test_rng_state ^= test_rng_state >> 27;
    return test_rng_state * 2685821657736338717ull;
}
static inline float test_uniform(void) { return (float)((test_next() >> 40) * (1.0 / 16777216.0)); }
static inline float test_normal(void) {
    float u1 = test_uniform() + 1e-7f, u2 = test_uniform();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* max|got - ref| / max|ref| (0 when both are all zero); NaN in got gives +inf. The reference is ref32 (float) or,
 * when that is NULL, ref64 (double); the wrappers below name which. */
static inline double test_rel_err_of(const float *got, const float *ref32, const double *ref64, int64_t n) {
    double maxd = 0, maxr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (got[i] != got[i]) return INFINITY;
        const double r = ref32 ? (double)ref32[i] : ref64[i];
        double d = fabs((double)got[i] - r);
        if (d > maxd) maxd = d;
        if (fabs(r) > maxr) maxr = fabs(r);
    }
    return maxr > 0 ? maxd / maxr : maxd;
}
static inline double test_rel_err_f32(const float *got, const float *ref, int64_t n) {
    return test_rel_err_of(got, ref, NULL, n);
}
static inline double test_rel_err_f32_f64(const float *got, const double *ref, int64_t n) {
    return test_rel_err_of(got, NULL, ref, n);
}

static inline int test_finish(const char *program) {
    printf("%s: %d checks, %d failed\n", program, test_checks, test_failures);
    return test_failures ? 1 : 0;
}

#endif /* GLM53_TEST_UTIL_H */
