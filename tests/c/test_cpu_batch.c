/*
 * test_cpu_batch.c - the CPU kernels that batched decode leans on, checked bit for bit.
 *
 * The CPU backend is the numerical reference, and speculative decoding and the server rely on it being
 * batch-invariant: a row's result may not depend on what else is in the batch, on the thread count, or on which
 * build of a kernel (baseline, AVX2, AVX-512) the machine picks where their arithmetic is meant to be the same.
 * test_cpu_ops checks accuracy against float64; this file checks exact equality:
 *
 *   matmul       every row of an M-row product equals that row computed alone, for every build, dtype, thread
 *                count and odd size; the AVX-512 build equals the AVX2+FMA build; and each build equals a scalar
 *                model of its arithmetic written here (per K block of 256, 8 lane accumulators from 0, v8f_sum's
 *                order, the block's tail columns one by one; fmaf in the FMA builds);
 *   mhc_pre, mhc_post, kda_recurrent, sparse_mla
 *                equal the plain scalar loops of the formula (the kernels these replaced, copied here), for the
 *                baseline and the AVX2 build, and a row's results do not depend on the rows beside it;
 *   kda_sequences (the fused per-sequence part of a KDA layer) equals the chain of ops it replaces, with its
 *                outputs, states and conv rings.
 *
 * The references are compiled with the project's flags (no FMA at -march=x86-64-v2), so "a * b + c" below is a
 * multiply and an add, as in the baseline and AVX2 builds of the model ops.
 */
#include "test_util.h"

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

#include <string.h>

enum { N_THREADS = 2 };
static glm53_backend *backends[N_THREADS];   /* 1 and 2 threads */

static glm53_tensor tensor(glm53_dtype dtype, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    glm53_tensor t = {.dtype = dtype, .ndim = ndim, .shape = {a, b, c, d}};
    glm53_tensor_set_contiguous(&t);
    size_t n = glm53_tensor_nbytes(&t);
    t.data = calloc(1, n ? n : 1);
    return t;
}
static float *f32(const glm53_tensor *t) { return (float *)t->data; }
static void fill(glm53_tensor *t, float scale) {
    int64_t n = glm53_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        float v = scale * test_normal();
        if (t->dtype == GLM53_F32) f32(t)[i] = v;
        else if (t->dtype == GLM53_BF16) ((uint16_t *)t->data)[i] = glm53_f32_to_bf16(v);
        else if (t->dtype == GLM53_F16)   /* finite normal codes, exponents 10..20 */
            ((uint16_t *)t->data)[i] = (uint16_t)((test_next() & 1) << 15 | (10 + test_next() % 11) << 10 |
                                                  (test_next() & 0x3ff));
        else if (t->dtype == GLM53_F8_E4M3) {
            uint8_t c;
            do c = (uint8_t)test_next(); while ((c & 0x7f) == 0x7f);
            ((uint8_t *)t->data)[i] = c;
        }
    }
}
static float weight_at(const glm53_tensor *w, int64_t r, int64_t c, const float *fp8_table) {
    float out;
    cpu_weight_row_to_f32(w, fp8_table, r, c, 1, &out);
    return out;
}
static int differing(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0 ? 0 : 1;
}

/* The builds a machine can run; each test sets them on every backend. */
typedef struct { const char *name; bool avx2, avx512, fused; } build;
static build builds[3];
static int n_builds;
static void use_build(const build *b) {
    for (int t = 0; t < N_THREADS; t++) {
        cpu_impl(backends[t])->use_avx2 = b->avx2;
        cpu_impl(backends[t])->use_avx512 = b->avx512;
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * matmul
 */
static float lane_sum(const float v[8]) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

/* The arithmetic every matmul build promises, one element at a time. */
static float matmul_model(const float *x, const glm53_tensor *w, int64_t n, int64_t K, bool fused,
                          const float *fp8_table) {
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += 256) {
        int64_t kb = K - k0 < 256 ? K - k0 : 256, c = 0;
        float lanes[8] = {0};
        for (; c + 8 <= kb; c += 8)
            for (int l = 0; l < 8; l++) {
                float a = x[k0 + c + l], b = weight_at(w, n, k0 + c + l, fp8_table);
                lanes[l] = fused ? fmaf(a, b, lanes[l]) : lanes[l] + a * b;
            }
        float s = lane_sum(lanes);
        for (; c < kb; c++) {
            float a = x[k0 + c], b = weight_at(w, n, k0 + c, fp8_table);
            s = fused ? fmaf(a, b, s) : s + a * b;
        }
        acc += s;
    }
    return acc;
}

static void test_matmul(void) {
    static const glm53_dtype dtypes[] = {GLM53_F32, GLM53_BF16, GLM53_F16, GLM53_F8_E4M3};
    static const int64_t Ns[] = {1, 5, 17, 34, 130}, Ks[] = {1, 7, 64, 257, 300};
    static const int64_t Ms[] = {1, 2, 3, 5, 6, 7, 13, 16, 17, 40};
    const float *fp8_table = cpu_impl(backends[0])->fp8_table;
    TEST_CASE("matmul: each build is its arithmetic model, every row as if alone, AVX-512 == AVX2") {
        for (size_t d = 0; d < 4; d++)
            for (size_t in = 0; in < sizeof Ns / sizeof *Ns; in++)
                for (size_t ik = 0; ik < sizeof Ks / sizeof *Ks; ik++) {
                    int64_t N = Ns[in], K = Ks[ik], M_max = 40;
                    glm53_tensor w = tensor(dtypes[d], 2, N, K, 0, 0), scale = {0};
                    fill(&w, 1.0f);
                    if (dtypes[d] == GLM53_F8_E4M3) {
                        scale = tensor(GLM53_F32, 2, (N + 127) / 128, (K + 127) / 128, 0, 0);
                        for (int64_t i = 0; i < glm53_tensor_numel(&scale); i++) f32(&scale)[i] = 0.01f;
                        w.scale = &scale, w.block_rows = w.block_cols = 128;
                    }
                    glm53_tensor x = tensor(GLM53_F32, 2, M_max, K, 0, 0);
                    fill(&x, 1.0f);
                    float *per_build[3];
                    for (int bi = 0; bi < n_builds; bi++) {
                        use_build(&builds[bi]);
                        per_build[bi] = malloc(sizeof(float) * (size_t)(M_max * N));
                        /* the model, from the 40-row product */
                        glm53_tensor y = tensor(GLM53_F32, 2, M_max, N, 0, 0);
                        CHECK(cpu_matmul(backends[1], &y, &x, &w) == GLM53_OK, "matmul");
                        int bad = 0;
                        for (int64_t m = 0; m < M_max; m++)
                            for (int64_t n = 0; n < N; n++) {
                                float want = matmul_model(f32(&x) + m * K, &w, n, K, builds[bi].fused, fp8_table);
                                bad += memcmp(&want, &f32(&y)[m * N + n], sizeof want) != 0;
                            }
                        CHECK(bad == 0, "%s %s N %lld K %lld: %d elements differ from the model", builds[bi].name,
                              glm53_dtype_name(dtypes[d]), (long long)N, (long long)K, bad);
                        memcpy(per_build[bi], y.data, sizeof(float) * (size_t)(M_max * N));
                        /* any M, any thread count: the rows of the 40-row product */
                        for (size_t im = 0; im < sizeof Ms / sizeof *Ms; im++)
                            for (int t = 0; t < N_THREADS; t++) {
                                int64_t M = Ms[im], m0 = (im * 7) % (M_max - M + 1);
                                glm53_tensor xs = {.dtype = GLM53_F32, .ndim = 2, .shape = {M, K},
                                                   .data = f32(&x) + m0 * K};
                                glm53_tensor_set_contiguous(&xs);
                                glm53_tensor ys = tensor(GLM53_F32, 2, M, N, 0, 0);
                                CHECK(cpu_matmul(backends[t], &ys, &xs, &w) == GLM53_OK, "matmul");
                                CHECK(!differing(f32(&ys), per_build[bi] + m0 * N, M * N),
                                      "%s %s N %lld K %lld M %lld, %d threads: rows differ from the same rows in a "
                                      "40-row batch", builds[bi].name, glm53_dtype_name(dtypes[d]), (long long)N,
                                      (long long)K, (long long)M, t + 1);
                                free(ys.data);
                            }
                        free(y.data);
                    }
                    for (int bi = 1; bi < n_builds; bi++)
                        if (builds[bi].fused && builds[0].fused)
                            CHECK(!differing(per_build[0], per_build[bi], M_max * N), "%s vs %s: %s N %lld K %lld",
                                  builds[0].name, builds[bi].name, glm53_dtype_name(dtypes[d]), (long long)N,
                                  (long long)K);
                    for (int bi = 0; bi < n_builds; bi++) free(per_build[bi]);
                    free(w.data), free(x.data), free(scale.data);
                }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * mhc_pre / mhc_post: the plain loops, one row at a time
 */
static float sigmoid_ref(float x) { return 1.0f / (1.0f + expf(-x)); }

static float dot_ref(const float *a, const float *b, int64_t n) {   /* cpu_dot's arithmetic, no FMA */
    float lanes[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lanes[l] = lanes[l] + a[i + l] * b[i + l];
    float s = lane_sum(lanes);
    for (; i < n; i++) s = s + a[i] * b[i];
    return s;
}

static void mhc_pre_ref(float *x, float *post, float *comb, const float *h, const float *fn, const float *base,
                        const float *scale, int64_t S, int64_t D, float rms_eps, float hc_eps, int iters) {
    int64_t SD = S * D, n_mix = (2 + S) * S;
    float m[(2 + 16) * 16], pre[16];
    double sumsq = 0.0;
    for (int64_t i = 0; i < SD; i++) sumsq += (double)h[i] * h[i];
    float r = 1.0f / sqrtf((float)(sumsq / (double)SD) + rms_eps);
    for (int64_t j = 0; j < n_mix; j++) m[j] = dot_ref(h, fn + j * SD, SD) * r;
    for (int64_t k = 0; k < S; k++) {
        pre[k] = sigmoid_ref(m[k] * scale[0] + base[k]) + hc_eps;
        post[k] = 2.0f * sigmoid_ref(m[S + k] * scale[1] + base[S + k]);
    }
    for (int64_t j = 0; j < S; j++) {
        float *row = comb + j * S, mx = -INFINITY, sum = 0.0f;
        for (int64_t k = 0; k < S; k++) {
            row[k] = m[2 * S + j * S + k] * scale[2] + base[2 * S + j * S + k];
            if (row[k] > mx) mx = row[k];
        }
        for (int64_t k = 0; k < S; k++) sum += (row[k] = expf(row[k] - mx));
        for (int64_t k = 0; k < S; k++) row[k] = row[k] / sum + hc_eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int64_t j = 0; j < S; j++) {
                float sum = 0.0f;
                for (int64_t k = 0; k < S; k++) sum += comb[j * S + k];
                for (int64_t k = 0; k < S; k++) comb[j * S + k] /= sum + hc_eps;
            }
        for (int64_t k = 0; k < S; k++) {
            float sum = 0.0f;
            for (int64_t j = 0; j < S; j++) sum += comb[j * S + k];
            for (int64_t j = 0; j < S; j++) comb[j * S + k] /= sum + hc_eps;
        }
    }
    for (int64_t d = 0; d < D; d++) {
        float acc = 0.0f;
        for (int64_t k = 0; k < S; k++) acc += pre[k] * h[k * D + d];
        x[d] = acc;
    }
}

static void test_mhc(void) {
    TEST_CASE("mhc_pre and mhc_post: the plain loops, bit for bit, any batch, both builds") {
        static const struct { int64_t S, D; glm53_dtype fn_dtype; } shapes[] = {
            {4, 64, GLM53_BF16}, {4, 37, GLM53_F32}, {3, 16, GLM53_BF16}, {2, 9, GLM53_F32},
        };
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            int64_t S = shapes[si].S, D = shapes[si].D, N = 19, mix = (2 + S) * S;
            glm53_tensor H = tensor(GLM53_F32, 3, N, S, D, 0), fn = tensor(shapes[si].fn_dtype, 2, mix, S * D, 0, 0);
            glm53_tensor base = tensor(GLM53_BF16, 1, mix, 0, 0, 0), scale = tensor(GLM53_F32, 1, 3, 0, 0, 0);
            fill(&H, 1.0f), fill(&fn, 0.05f), fill(&base, 0.5f), fill(&scale, 1.0f);
            glm53_tensor y = tensor(GLM53_F32, 2, N, D, 0, 0);
            fill(&y, 1.0f);
            /* references, row by row */
            float *fn32 = cpu_weight_to_f32(backends[0], &fn), base32[(2 + 16) * 16], s32[3];
            for (int64_t j = 0; j < mix; j++) base32[j] = glm53_bf16_to_f32(((uint16_t *)base.data)[j]);
            memcpy(s32, scale.data, sizeof s32);
            float *x_ref = calloc((size_t)(N * D), 4), *post_ref = calloc((size_t)(N * S), 4);
            float *comb_ref = calloc((size_t)(N * S * S), 4), *out_ref = calloc((size_t)(N * S * D), 4);
            for (int64_t n = 0; n < N; n++)
                mhc_pre_ref(x_ref + n * D, post_ref + n * S, comb_ref + n * S * S, f32(&H) + n * S * D, fn32, base32,
                            s32, S, D, 1e-6f, 1e-6f, 20);
            for (int64_t n = 0; n < N; n++)
                for (int64_t k = 0; k < S; k++)
                    for (int64_t d = 0; d < D; d++) {
                        float acc = post_ref[n * S + k] * f32(&y)[n * D + d];
                        for (int64_t j = 0; j < S; j++)
                            acc += comb_ref[(n * S + j) * S + k] * f32(&H)[(n * S + j) * D + d];
                        out_ref[(n * S + k) * D + d] = acc;
                    }
            for (int bi = 0; bi < n_builds; bi++) {
                if (builds[bi].avx512) continue;   /* the model ops have no AVX-512 build */
                use_build(&builds[bi]);
                for (int64_t n0 = 0; n0 < N; n0 += 6)
                    for (int t = 0; t < N_THREADS; t++) {
                        int64_t rows = n0 == 0 ? N : (N - n0 < 3 ? N - n0 : 3);   /* the whole batch, then slices */
                        glm53_tensor Hs = {.dtype = GLM53_F32, .ndim = 3, .shape = {rows, S, D},
                                           .data = f32(&H) + n0 * S * D};
                        glm53_tensor ys = {.dtype = GLM53_F32, .ndim = 2, .shape = {rows, D},
                                           .data = f32(&y) + n0 * D};
                        glm53_tensor_set_contiguous(&Hs), glm53_tensor_set_contiguous(&ys);
                        glm53_tensor x = tensor(GLM53_F32, 2, rows, D, 0, 0), post = tensor(GLM53_F32, 2, rows, S, 0, 0);
                        glm53_tensor comb = tensor(GLM53_F32, 3, rows, S, S, 0);
                        glm53_tensor out = tensor(GLM53_F32, 3, rows, S, D, 0);
                        CHECK(cpu_mhc_pre(backends[t], &x, &post, &comb, &Hs, &fn, &base, &scale, 1e-6f, 1e-6f, 20) ==
                              GLM53_OK, "mhc_pre");
                        CHECK(cpu_mhc_post(backends[t], &out, &ys, &Hs, &post, &comb) == GLM53_OK, "mhc_post");
                        const char *what = shapes[si].fn_dtype == GLM53_BF16 ? "BF16 fn" : "F32 fn";
                        CHECK(!differing(f32(&x), x_ref + n0 * D, rows * D) &&
                              !differing(f32(&post), post_ref + n0 * S, rows * S) &&
                              !differing(f32(&comb), comb_ref + n0 * S * S, rows * S * S),
                              "%s build, S %lld D %lld %s, rows %lld.., %lld rows, %d threads: mhc_pre differs from "
                              "the plain loops", builds[bi].name, (long long)S, (long long)D, what, (long long)n0,
                              (long long)rows, t + 1);
                        CHECK(!differing(f32(&out), out_ref + n0 * S * D, rows * S * D),
                              "%s build, S %lld D %lld, rows %lld..: mhc_post differs from the plain loops",
                              builds[bi].name, (long long)S, (long long)D, (long long)n0);
                        free(x.data), free(post.data), free(comb.data), free(out.data);
                    }
            }
            free(fn32), free(x_ref), free(post_ref), free(comb_ref), free(out_ref);
            free(H.data), free(fn.data), free(base.data), free(scale.data), free(y.data);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * kda_recurrent: the plain loops on a private copy of the state
 */
static void kda_ref(float *o, const float *q, const float *k, const float *v, const float *g, const float *beta,
                    float *states, const int32_t *slots, int64_t T, int64_t H, int64_t dk, int64_t dv) {
    float *S = malloc(sizeof(float) * (size_t)(dk * dv)), *u = malloc(sizeof(float) * (size_t)dv);
    int64_t slot_size = H * dk * dv;
    for (int64_t h = 0; h < H; h++) {
        memcpy(S, states + slots[0] * slot_size + h * dk * dv, sizeof(float) * (size_t)(dk * dv));
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + (t * H + h) * dk, *kt = k + (t * H + h) * dk;
            const float *vt = v + (t * H + h) * dv, *gt = g + (t * H + h) * dk;
            float b = beta[t * H + h];
            for (int64_t i = 0; i < dk; i++) {
                float decay = expf(gt[i]);
                for (int64_t j = 0; j < dv; j++) S[i * dv + j] *= decay;
            }
            for (int64_t j = 0; j < dv; j++) u[j] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) u[j] += S[i * dv + j] * kt[i];
            for (int64_t j = 0; j < dv; j++) u[j] = b * (vt[j] - u[j]);
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) S[i * dv + j] += kt[i] * u[j];
            float *ot = o + (t * H + h) * dv;
            for (int64_t j = 0; j < dv; j++) ot[j] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) ot[j] += S[i * dv + j] * qt[i];
            if (slots[1 + t] >= 0)
                memcpy(states + slots[1 + t] * slot_size + h * dk * dv, S, sizeof(float) * (size_t)(dk * dv));
        }
    }
    free(S), free(u);
}

static void test_kda(void) {
    TEST_CASE("kda_recurrent: the plain loops, bit for bit, in place or through the ring, both builds") {
        static const struct { int64_t T, H, dk, dv, ring; int32_t slots[8]; } cases[] = {
            {1, 4, 64, 64, 1, {0, 0}},                 /* decode, no rollback: in place */
            {1, 4, 16, 16, 6, {3, 4}},                 /* decode through the ring */
            {5, 2, 16, 13, 3, {1, -1, -1, 2, 0, 1}},   /* prefill keeping the last rows; odd dv */
            {3, 3, 8, 24, 4, {2, 3, 2, 1}},            /* a row written to the slot read */
        };
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            int64_t T = cases[ci].T, H = cases[ci].H, dk = cases[ci].dk, dv = cases[ci].dv, R = cases[ci].ring;
            glm53_tensor q = tensor(GLM53_F32, 3, T, H, dk, 0), k = tensor(GLM53_F32, 3, T, H, dk, 0);
            glm53_tensor v = tensor(GLM53_F32, 3, T, H, dv, 0), g = tensor(GLM53_F32, 3, T, H, dk, 0);
            glm53_tensor beta = tensor(GLM53_F32, 2, T, H, 0, 0), st0 = tensor(GLM53_F32, 4, R, H, dk, dv);
            glm53_tensor slots = tensor(GLM53_I32, 1, T + 1, 0, 0, 0);
            fill(&q, 0.2f), fill(&k, 0.2f), fill(&v, 1.0f), fill(&g, 0.1f), fill(&beta, 0.3f), fill(&st0, 1.0f);
            for (int64_t i = 0; i < glm53_tensor_numel(&g); i++) f32(&g)[i] = -fabsf(f32(&g)[i]);
            memcpy(slots.data, cases[ci].slots, sizeof(int32_t) * (size_t)(T + 1));
            size_t st_bytes = glm53_tensor_nbytes(&st0), o_bytes = sizeof(float) * (size_t)(T * H * dv);
            float *st_ref = malloc(st_bytes), *o_ref = malloc(o_bytes);
            memcpy(st_ref, st0.data, st_bytes);
            kda_ref(o_ref, f32(&q), f32(&k), f32(&v), f32(&g), f32(&beta), st_ref, cases[ci].slots, T, H, dk, dv);
            for (int bi = 0; bi < n_builds; bi++) {
                if (builds[bi].avx512) continue;
                use_build(&builds[bi]);
                for (int t = 0; t < N_THREADS; t++) {
                    glm53_tensor st = tensor(GLM53_F32, 4, R, H, dk, dv), o = tensor(GLM53_F32, 3, T, H, dv, 0);
                    memcpy(st.data, st0.data, st_bytes);
                    CHECK(cpu_kda_recurrent(backends[t], &o, &q, &k, &v, &g, &beta, &st, &slots) == GLM53_OK, "kda");
                    CHECK(memcmp(o.data, o_ref, o_bytes) == 0 && memcmp(st.data, st_ref, st_bytes) == 0,
                          "%s build, case %zu, %d threads: outputs or states differ from the plain loops",
                          builds[bi].name, ci, t + 1);
                    free(st.data), free(o.data);
                }
            }
            free(st_ref), free(o_ref);
            free(q.data), free(k.data), free(v.data), free(g.data), free(beta.data), free(st0.data), free(slots.data);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * kda_sequences: the fused per-sequence part of a KDA layer against the chain of ops it replaces (kda_forward's
 * loop: conv window, SiLU, ring write, L2 norms, recurrence), sequence by sequence
 */
typedef struct {
    int64_t T, pos0, ring, conv_width;
} kda_seq_case;

static void kda_chain(glm53_backend *be, glm53_tensor *o, glm53_tensor *raw[3], glm53_tensor *w[3],
                      const glm53_tensor *g, const glm53_tensor *beta, const glm53_kda_seq *sq, int64_t H, int64_t dk,
                      float q_scale) {
    int64_t T = sq->n_rows, K = w[0]->shape[1], C = H * dk, n_zero = K - 1 - sq->n_hist;
    glm53_tensor cq[3];
    for (int j = 0; j < 3; j++) {
        glm53_tensor xpad = tensor(GLM53_F32, 2, T + K - 1, C, 0, 0);   /* calloc: the zero rows */
        if (sq->n_hist > 0) {
            glm53_tensor hist = glm53_tensor_rows_view(&xpad, n_zero, sq->n_hist);
            CHECK(cpu_gather_rows(be, &hist, sq->conv[j], sq->conv_hist) == GLM53_OK, "gather");
        }
        memcpy(f32(&xpad) + (K - 1) * C, f32(raw[j]) + sq->row0 * C, sizeof(float) * (size_t)(T * C));
        cq[j] = tensor(GLM53_F32, 2, T, C, 0, 0);
        CHECK(cpu_conv1d_causal(be, &cq[j], &xpad, w[j]) == GLM53_OK, "conv");
        CHECK(cpu_unary(be, &cq[j], &cq[j], GLM53_UNARY_SILU) == GLM53_OK, "silu");
        glm53_tensor kept = glm53_tensor_rows_view(raw[j], sq->row0 + T - sq->n_write, sq->n_write);
        CHECK(cpu_scatter_rows(be, sq->conv[j], &kept, sq->conv_write) == GLM53_OK, "scatter");
        free(xpad.data);
    }
    glm53_tensor qh = glm53_tensor_reshape(&cq[0], 2, T * H, dk, 0), kh = glm53_tensor_reshape(&cq[1], 2, T * H, dk, 0);
    CHECK(cpu_l2norm(be, &qh, &qh, 1e-6f, q_scale) == GLM53_OK && cpu_l2norm(be, &kh, &kh, 1e-6f, 1.0f) == GLM53_OK,
          "l2norm");
    glm53_tensor q3 = glm53_tensor_reshape(&cq[0], 3, T, H, dk), k3 = glm53_tensor_reshape(&cq[1], 3, T, H, dk);
    glm53_tensor v3 = glm53_tensor_reshape(&cq[2], 3, T, H, dk), o3 = glm53_tensor_rows_view(o, sq->row0, T);
    glm53_tensor g_rows = glm53_tensor_rows_view(g, sq->row0, T), b_rows = glm53_tensor_rows_view(beta, sq->row0, T);
    glm53_tensor g3 = glm53_tensor_reshape(&g_rows, 3, T, H, dk);
    CHECK(cpu_kda_recurrent(be, &o3, &q3, &k3, &v3, &g3, &b_rows, sq->states, sq->slots) == GLM53_OK, "recurrent");
    for (int j = 0; j < 3; j++) free(cq[j].data);
}

static void test_kda_sequences(void) {
    TEST_CASE("kda_sequences: the op-by-op chain of kda_forward, bit for bit (decode, prefill, sequence starts)") {
        /* rows per sequence, its position, state ring and conv ring width (K - 1 + rollback) */
        static const kda_seq_case cases[] = {
            {1, 9, 1, 3}, {1, 0, 1, 3}, {1, 1, 6, 8}, {5, 0, 3, 5}, {4, 17, 2, 4}, {1, 2, 6, 8}, {7, 3, 6, 8},
        };
        const int n = sizeof cases / sizeof *cases;
        const int64_t H = 4, dk = 16, K = 4, C = H * dk;
        const float q_scale = 0.25f;
        glm53_dtype w_dtypes[3] = {GLM53_BF16, GLM53_F32, GLM53_BF16};
        int64_t N = 0;
        for (int i = 0; i < n; i++) N += cases[i].T;
        glm53_tensor raw[3], w[3], *rawp[3], *wp[3];
        for (int j = 0; j < 3; j++) {
            raw[j] = tensor(GLM53_F32, 2, N, C, 0, 0), w[j] = tensor(w_dtypes[j], 2, C, K, 0, 0);
            fill(&raw[j], 1.0f), fill(&w[j], 0.5f);
            rawp[j] = &raw[j], wp[j] = &w[j];
        }
        glm53_tensor g = tensor(GLM53_F32, 2, N, C, 0, 0), beta = tensor(GLM53_F32, 2, N, H, 0, 0);
        fill(&g, 0.1f), fill(&beta, 0.3f);
        for (int64_t i = 0; i < N * C; i++) f32(&g)[i] = -fabsf(f32(&g)[i]);
        /* two copies of every sequence's rings: one for the fused op, one for the chain */
        glm53_kda_seq seqs[2][16];
        glm53_tensor rings[2][16][3], states[2][16], meta[16][3];
        int64_t row = 0;
        for (int i = 0; i < n; i++) {
            const kda_seq_case *k = &cases[i];
            int64_t n_hist = k->pos0 < K - 1 ? k->pos0 : K - 1, n_write = k->T < k->conv_width ? k->T : k->conv_width;
            meta[i][0] = tensor(GLM53_I32, 1, k->T + 1, 0, 0, 0);   /* state slots, as step.c makes them */
            int32_t *sl = meta[i][0].data;
            sl[0] = (int32_t)(k->pos0 % k->ring);
            for (int64_t t = 0; t < k->T; t++) sl[1 + t] = t >= k->T - k->ring ? (int32_t)((k->pos0 + t + 1) % k->ring) : -1;
            meta[i][1] = tensor(GLM53_I32, 1, n_hist > 0 ? n_hist : 1, 0, 0, 0);
            for (int64_t j = 0; j < n_hist; j++)
                ((int32_t *)meta[i][1].data)[j] = (int32_t)((k->pos0 - n_hist + j) % k->conv_width);
            meta[i][2] = tensor(GLM53_I32, 1, n_write, 0, 0, 0);
            for (int64_t j = 0; j < n_write; j++)
                ((int32_t *)meta[i][2].data)[j] = (int32_t)((k->pos0 + k->T - n_write + j) % k->conv_width);
            for (int c = 0; c < 2; c++) {
                states[c][i] = tensor(GLM53_F32, 4, k->ring, H, dk, dk);
                for (int j = 0; j < 3; j++) rings[c][i][j] = tensor(GLM53_F32, 2, k->conv_width, C, 0, 0);
            }
            fill(&states[0][i], 1.0f);
            for (int j = 0; j < 3; j++) fill(&rings[0][i][j], 1.0f);
            memcpy(states[1][i].data, states[0][i].data, glm53_tensor_nbytes(&states[0][i]));
            for (int j = 0; j < 3; j++) memcpy(rings[1][i][j].data, rings[0][i][j].data, glm53_tensor_nbytes(&rings[0][i][j]));
            for (int c = 0; c < 2; c++)
                seqs[c][i] = (glm53_kda_seq){.row0 = row, .n_rows = k->T, .n_hist = n_hist, .conv_hist = &meta[i][1],
                                             .n_write = n_write, .conv_write = &meta[i][2],
                                             .conv = {&rings[c][i][0], &rings[c][i][1], &rings[c][i][2]},
                                             .states = &states[c][i], .slots = &meta[i][0]};
            row += k->T;
        }
        glm53_tensor o_chain = tensor(GLM53_F32, 3, N, H, dk, 0);
        for (int i = 0; i < n; i++) kda_chain(backends[0], &o_chain, rawp, wp, &g, &beta, &seqs[1][i], H, dk, q_scale);
        for (int bi = 0; bi < n_builds; bi++) {
            if (builds[bi].avx512) continue;
            use_build(&builds[bi]);
            for (int t = 0; t < N_THREADS; t++) {
                glm53_tensor o = tensor(GLM53_F32, 3, N, H, dk, 0);
                /* fresh copies of the rings and states for each run: the op updates them */
                glm53_tensor st[16], rg[16][3];
                glm53_kda_seq run[16];
                for (int i = 0; i < n; i++) {
                    run[i] = seqs[0][i];
                    st[i] = tensor(GLM53_F32, 4, cases[i].ring, H, dk, dk);
                    memcpy(st[i].data, states[0][i].data, glm53_tensor_nbytes(&st[i]));
                    run[i].states = &st[i];
                    for (int j = 0; j < 3; j++) {
                        rg[i][j] = tensor(GLM53_F32, 2, cases[i].conv_width, C, 0, 0);
                        memcpy(rg[i][j].data, rings[0][i][j].data, glm53_tensor_nbytes(&rg[i][j]));
                        run[i].conv[j] = &rg[i][j];
                    }
                }
                const glm53_tensor *craw[3] = {&raw[0], &raw[1], &raw[2]}, *cw[3] = {&w[0], &w[1], &w[2]};
                CHECK(cpu_kda_sequences(backends[t], &o, craw, cw, &g, &beta, run, n, 1e-6f, q_scale) == GLM53_OK,
                      "kda_sequences");
                int bad = differing(f32(&o), f32(&o_chain), N * H * dk);
                for (int i = 0; i < n; i++) {
                    bad += memcmp(st[i].data, states[1][i].data, glm53_tensor_nbytes(&st[i])) != 0;
                    for (int j = 0; j < 3; j++)
                        bad += memcmp(rg[i][j].data, rings[1][i][j].data, glm53_tensor_nbytes(&rg[i][j])) != 0;
                }
                CHECK(bad == 0, "%s build, %d threads: %d of the outputs, states and conv rings differ from the chain",
                      builds[bi].name, t + 1, bad);
                free(o.data);
                for (int i = 0; i < n; i++) {
                    free(st[i].data);
                    for (int j = 0; j < 3; j++) free(rg[i][j].data);
                }
            }
        }
        free(o_chain.data), free(g.data), free(beta.data);
        for (int j = 0; j < 3; j++) free(raw[j].data), free(w[j].data);
        for (int i = 0; i < n; i++) {
            for (int c = 0; c < 2; c++) {
                free(states[c][i].data);
                for (int j = 0; j < 3; j++) free(rings[c][i][j].data);
            }
            for (int j = 0; j < 3; j++) free(meta[i][j].data);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * sparse_mla: the plain loops over kv_b decoded to F32
 */
static void mla_ref(float *o, const float *q, const float *latent, const int32_t *idx, const float *wkv, int64_t T,
                    int64_t H, int64_t dk, int64_t dv, int64_t R, int64_t W, float scale) {
    float *qh = malloc(4 * (size_t)R), *acc = malloc(4 * (size_t)R), *s = malloc(4 * (size_t)W);
    for (int64_t h = 0; h < H; h++) {
        const float *Wk = wkv + h * (dk + dv) * R, *Wv = Wk + dk * R;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + (t * H + h) * dk;
            const int32_t *sel = idx + t * W;
            for (int64_t r = 0; r < R; r++) qh[r] = 0.0f;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t r = 0; r < R; r++) qh[r] += qt[i] * Wk[i * R + r];
            float mx = -INFINITY;
            for (int64_t j = 0; j < W; j++) {
                if (sel[j] < 0) { s[j] = -INFINITY; continue; }
                s[j] = dot_ref(qh, latent + (int64_t)sel[j] * R, R) * scale;
                if (s[j] > mx) mx = s[j];
            }
            float *ot = o + (t * H + h) * dv, sum = 0.0f;
            for (int64_t j = 0; j < W; j++) sum += (s[j] = sel[j] < 0 ? 0.0f : expf(s[j] - mx));
            for (int64_t r = 0; r < R; r++) acc[r] = 0.0f;
            for (int64_t j = 0; j < W; j++) {
                if (sel[j] < 0) continue;
                float p = s[j] / sum;
                for (int64_t r = 0; r < R; r++) acc[r] += p * latent[(int64_t)sel[j] * R + r];
            }
            for (int64_t i = 0; i < dv; i++) ot[i] = dot_ref(Wv + i * R, acc, R);
        }
    }
    free(qh), free(acc), free(s);
}

static void test_sparse_mla(void) {
    TEST_CASE("sparse_mla: the plain loops, bit for bit, kv_b in place (F32, BF16) or decoded (FP8), both builds") {
        static const glm53_dtype dtypes[] = {GLM53_F32, GLM53_BF16, GLM53_F8_E4M3};
        int64_t T = 3, H = 4, dk = 16, dv = 12, R = 37, W = 11, cap = 20;
        for (size_t d = 0; d < 3; d++) {
            glm53_tensor q = tensor(GLM53_F32, 3, T, H, dk, 0), lat = tensor(GLM53_F32, 2, cap, R, 0, 0);
            glm53_tensor idx = tensor(GLM53_I32, 2, T, W, 0, 0), kv_b = tensor(dtypes[d], 2, H * (dk + dv), R, 0, 0);
            fill(&q, 1.0f), fill(&lat, 1.0f), fill(&kv_b, 0.3f);
            for (int64_t i = 0; i < T * W; i++)
                ((int32_t *)idx.data)[i] = i % 5 == 4 ? -1 : (int32_t)(test_next() % (uint64_t)cap);
            float *wkv = cpu_weight_to_f32(backends[0], &kv_b), *o_ref = malloc(4 * (size_t)(T * H * dv));
            mla_ref(o_ref, f32(&q), f32(&lat), idx.data, wkv, T, H, dk, dv, R, W, 0.25f);
            for (int bi = 0; bi < n_builds; bi++) {
                if (builds[bi].avx512) continue;
                use_build(&builds[bi]);
                for (int t = 0; t < N_THREADS; t++) {
                    glm53_tensor o = tensor(GLM53_F32, 3, T, H, dv, 0);
                    CHECK(cpu_sparse_mla(backends[t], &o, &q, &lat, &idx, &kv_b, 0.25f) == GLM53_OK, "sparse_mla");
                    CHECK(memcmp(o.data, o_ref, 4 * (size_t)(T * H * dv)) == 0,
                          "%s build, kv_b %s, %d threads: differs from the plain loops", builds[bi].name,
                          glm53_dtype_name(dtypes[d]), t + 1);
                    free(o.data);
                }
            }
            free(wkv), free(o_ref), free(q.data), free(lat.data), free(idx.data), free(kv_b.data);
        }
    }
}

int main(void) {
    test_seed(20261205);
    for (int t = 0; t < N_THREADS; t++)
        if (glm53_backend_cpu_create(t + 1, &backends[t]) != GLM53_OK) {
            fprintf(stderr, "cpu backend with %d threads: %s\n", t + 1, glm53_last_error());
            return 1;
        }
    cpu_backend *impl = cpu_impl(backends[0]);
    builds[n_builds++] = (build){"baseline", false, false, false};
    if (impl->use_avx2) builds[n_builds++] = (build){"AVX2", true, false, true};
    if (impl->use_avx512) builds[n_builds++] = (build){"AVX-512", true, true, true};
    printf("builds tested:");
    for (int bi = 0; bi < n_builds; bi++) printf(" %s", builds[bi].name);
    printf("\n");
    /* The AVX2 build first where there is one: the AVX-512 comparison is made against it. */
    if (n_builds > 1) {
        build first = builds[0];
        memmove(builds, builds + 1, sizeof(build) * (size_t)(n_builds - 1));
        builds[n_builds - 1] = first;
    }

    test_matmul();
    test_mhc();
    test_kda();
    test_kda_sequences();
    test_sparse_mla();

    for (int t = 0; t < N_THREADS; t++) backends[t]->ops->destroy(backends[t]);
    return test_finish("test_cpu_batch");
}
