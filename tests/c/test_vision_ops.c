/*
 * test_vision_ops.c - the CPU vision ops (kernels/cpu/ops_vision.c: rope_2d, attention_segments) against float64
 * references written here from the contract in kernels/backend.h.
 *
 * rope_2d: the reference takes the angles from the F32 inverse frequencies the contract prescribes (their exact
 * values matter: an angle of row * inv_freq is F32 in transformers too) and does the rotation in double. Inputs are
 * several head dims, positions up to 500 (angles far from zero, where sin/cos argument reduction matters) and
 * 1-3 threads. attention_segments: random q, k, v over segments of lengths 1 .. 70, including empty segments and
 * one row per segment; the reference is the two-pass softmax in double. Tolerance 1e-5 relative (F32 dots over
 * at most 128 terms; softmax and the weighted sums in F32).
 */
#include "test_util.h"

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

#include <string.h>

static glm53_backend *backends[3];

static glm53_tensor make(glm53_backend *be, int dtype, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    glm53_tensor t = {.dtype = dtype, .device = GLM53_DEVICE_CPU, .ndim = ndim, .shape = {d0, d1, d2}};
    if (be->ops->alloc(be, &t) != GLM53_OK) {
        fprintf(stderr, "alloc failed\n");
        exit(2);
    }
    return t;
}

static void fill_normal(float *p, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) p[i] = scale * test_normal();
}

static double test_rope(glm53_backend *be, int64_t M, int64_t H, int64_t d, float theta, bool in_place) {
    glm53_tensor x = make(be, GLM53_F32, 3, M, H, d), y = make(be, GLM53_F32, 3, M, H, d);
    glm53_tensor pos = make(be, GLM53_I32, 2, M, 2, 0);
    float *xs = x.data;
    fill_normal(xs, M * H * d, 1.0f);
    int32_t *p = pos.data;
    for (int64_t i = 0; i < 2 * M; i++) p[i] = (int32_t)(test_next() % 500);
    float *x_copy = malloc((size_t)(M * H * d) * sizeof *x_copy);
    memcpy(x_copy, xs, (size_t)(M * H * d) * sizeof *x_copy);
    for (int64_t i = 0; i < M * H * d; i++) ((float *)y.data)[i] = NAN;
    glm53_tensor *out = in_place ? &x : &y;
    CHECK(be->ops->rope_2d(be, out, &x, &pos, theta) == GLM53_OK, "rope_2d failed: %s", glm53_last_error());
    const int64_t half = d / 2, q = d / 4;
    double *ref = malloc((size_t)(M * H * d) * sizeof *ref);
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < half; j++) {
            const int64_t i = j < q ? j : j - q;
            const float inv = 1.0f / powf(theta, (float)(2 * i) / (float)half);
            const float angle = (float)p[2 * m + (j < q ? 0 : 1)] * inv;   /* F32 product, as the contract says */
            for (int64_t h = 0; h < H; h++) {
                const double x1 = x_copy[(m * H + h) * d + j], x2 = x_copy[(m * H + h) * d + j + half];
                ref[(m * H + h) * d + j] = x1 * cos((double)angle) - x2 * sin((double)angle);
                ref[(m * H + h) * d + j + half] = x2 * cos((double)angle) + x1 * sin((double)angle);
            }
        }
    double err = test_rel_err_f32_f64(out->data, ref, M * H * d);
    free(ref);
    free(x_copy);
    be->ops->release(be, &x);
    be->ops->release(be, &y);
    be->ops->release(be, &pos);
    return err;
}

static double test_attention(glm53_backend *be, const int32_t *lens, int n_seg, int64_t H, int64_t d, float scale) {
    int64_t M = 0;
    for (int s = 0; s < n_seg; s++) M += lens[s];
    glm53_tensor q = make(be, GLM53_F32, 3, M, H, d), k = make(be, GLM53_F32, 3, M, H, d);
    glm53_tensor v = make(be, GLM53_F32, 3, M, H, d), o = make(be, GLM53_F32, 3, M, H, d);
    glm53_tensor cu = make(be, GLM53_I32, 1, n_seg + 1, 0, 0);
    fill_normal(q.data, M * H * d, 1.0f);
    fill_normal(k.data, M * H * d, 1.0f);
    fill_normal(v.data, M * H * d, 1.0f);
    for (int64_t i = 0; i < M * H * d; i++) ((float *)o.data)[i] = NAN;
    int32_t *c = cu.data;
    c[0] = 0;
    for (int s = 0; s < n_seg; s++) c[s + 1] = c[s] + lens[s];
    CHECK(be->ops->attention_segments(be, &o, &q, &k, &v, &cu, scale) == GLM53_OK, "attention failed: %s",
          glm53_last_error());
    const float *Q = q.data, *K = k.data, *V = v.data;
    double *ref = calloc((size_t)(M * H * d), sizeof *ref), *p = malloc((size_t)(M > 0 ? M : 1) * sizeof *p);
    for (int s = 0; s < n_seg; s++)
        for (int64_t i = c[s]; i < c[s + 1]; i++)
            for (int64_t h = 0; h < H; h++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = c[s]; j < c[s + 1]; j++) {
                    double dot = 0;
                    for (int64_t e = 0; e < d; e++) dot += (double)Q[(i * H + h) * d + e] * K[(j * H + h) * d + e];
                    p[j] = scale * dot;
                    if (p[j] > mx) mx = p[j];
                }
                for (int64_t j = c[s]; j < c[s + 1]; j++) sum += (p[j] = exp(p[j] - mx));
                for (int64_t j = c[s]; j < c[s + 1]; j++)
                    for (int64_t e = 0; e < d; e++) ref[(i * H + h) * d + e] += p[j] / sum * V[(j * H + h) * d + e];
            }
    double err = test_rel_err_f32_f64(o.data, ref, M * H * d);
    free(ref);
    free(p);
    glm53_tensor *ts[] = {&q, &k, &v, &o, &cu};
    for (int i = 0; i < 5; i++) be->ops->release(be, ts[i]);
    return err;
}

int main(void) {
    for (int i = 0; i < 3; i++)
        if (glm53_backend_cpu_create(i + 1, &backends[i]) != GLM53_OK) {
            fprintf(stderr, "cpu backend: %s\n", glm53_last_error());
            return 2;
        }
    double worst_rope = 0, worst_attn = 0;
    TEST_CASE("rope_2d") {
        const int64_t dims[][3] = {{1, 1, 4}, {7, 2, 16}, {33, 3, 32}, {64, 16, 64}, {5, 1, 128}};
        for (int b = 0; b < 3; b++)
            for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++)
                for (int ip = 0; ip < 2; ip++) {
                    double e = test_rope(backends[b], dims[c][0], dims[c][1], dims[c][2], 10000.0f, ip);
                    CHECK(e <= 1e-5, "rope_2d M %lld H %lld d %lld: rel err %.3g", (long long)dims[c][0],
                          (long long)dims[c][1], (long long)dims[c][2], e);
                    if (e > worst_rope) worst_rope = e;
                }
        /* A head dim that is not a multiple of 4 is refused, not mangled. */
        glm53_backend *be = backends[0];
        glm53_tensor x = make(be, GLM53_F32, 3, 2, 1, 6), pos = make(be, GLM53_I32, 2, 2, 2, 0);
        memset(pos.data, 0, 16);
        CHECK(be->ops->rope_2d(be, &x, &x, &pos, 10000.0f) == GLM53_ERR_UNSUPPORTED, "d = 6 accepted");
        be->ops->release(be, &x);
        be->ops->release(be, &pos);
    }
    TEST_CASE("attention_segments") {
        const int32_t a[] = {1}, b[] = {5, 1, 17}, c[] = {0, 9, 0, 70, 3}, d[] = {1, 1, 1, 1};
        struct { const int32_t *lens; int n; int64_t H, d; } cases[] = {
            {a, 1, 1, 16}, {b, 3, 2, 32}, {c, 5, 3, 64}, {d, 4, 4, 8}, {b, 3, 1, 128}};
        for (int be_i = 0; be_i < 3; be_i++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                double e = test_attention(backends[be_i], cases[i].lens, cases[i].n, cases[i].H, cases[i].d,
                                          1.0f / sqrtf((float)cases[i].d));
                CHECK(e <= 1e-5, "attention case %zu: rel err %.3g", i, e);
                if (e > worst_attn) worst_attn = e;
            }
        /* cu_seqlens that do not cover the rows are an error. */
        glm53_backend *be = backends[0];
        glm53_tensor q = make(be, GLM53_F32, 3, 4, 1, 8), o = make(be, GLM53_F32, 3, 4, 1, 8);
        glm53_tensor cu = make(be, GLM53_I32, 1, 2, 0, 0);
        ((int32_t *)cu.data)[0] = 0;
        ((int32_t *)cu.data)[1] = 3;
        fill_normal(q.data, 32, 1.0f);
        CHECK(be->ops->attention_segments(be, &o, &q, &q, &q, &cu, 1.0f) == GLM53_ERR_INVALID_ARG, "bad cu accepted");
        be->ops->release(be, &q);
        be->ops->release(be, &o);
        be->ops->release(be, &cu);
    }
    printf("largest relative errors: rope_2d %.3g, attention_segments %.3g (tolerance 1e-5)\n", worst_rope, worst_attn);
    for (int i = 0; i < 3; i++) backends[i]->ops->destroy(backends[i]);
    return test_finish("test_vision_ops");
}
