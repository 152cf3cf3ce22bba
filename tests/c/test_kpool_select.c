/*
 * test_kpool_select.c - the CPU backend's KPool selection on exact ties (and the exact zeros kpool_score gives),
 * against positions written out by hand.
 *
 * Indexer scores are sums of ReLUs (kernels/backend.h, kpool_score), so many pools score exactly 0 and the budget
 * of index_topk / P pools often ends inside a run of equal scores. The engine's policy (docs/model.md) is that
 * equal scores go to the lower pool; the float64 references pin torch.topk to the same rule
 * (tests/fixtures/make_fixtures.py, the tiny-ties fixture), and the CUDA kpool_select is checked against this CPU
 * op (tests/cuda/test_cuda_ops.c). So the rows below are what every backend must return. Each small case can be
 * checked by eye: a row of scores, the budget, and the positions that must come out (the chosen pools in
 * ascending order, each expanded to its P positions, then the open pool's positions, then -1 padding).
 *
 * The scores come in the two shapes one index head gives, w * relu(q . K): with w > 0 the few positive pools
 * lead and the budget ends in the zeros; with w < 0 the zeros are the best scores and the budget ends inside
 * them. Some zeros are -0.0 (what w * 0 gives for w < 0): -0.0 and +0.0 are equal scores, so the lower pool wins
 * between them too (a selection on the float bits would rank them apart).
 */
#include "test_util.h"

#include "kernels/backend.h"

enum { N_BACKENDS = 2 };
static glm53_backend *backends[N_BACKENDS];   /* 1 and 3 threads (kpool_score splits rows over threads) */
static const int THREADS[N_BACKENDS] = {1, 3};

/* A host tensor over `data` (not owned). */
static glm53_tensor host(glm53_dtype dtype, void *data, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    glm53_tensor t = {.dtype = dtype, .device = GLM53_DEVICE_CPU, .ndim = ndim, .data = data};
    int64_t dims[3] = {d0, d1, d2};
    for (int i = 0; i < ndim; i++) t.shape[i] = dims[i];
    glm53_tensor_set_contiguous(&t);
    return t;
}

/* Width of a selection row: n_select pools of P positions, and up to P - 1 open-pool positions. */
static int64_t select_width(int32_t P, int32_t n_select, int32_t with_tail) {
    return (int64_t)n_select * P + (with_tail ? P - 1 : 0);
}

/* Runs kpool_select on every backend and compares each row with `expect` [T, W], element for element. */
static void check_select(const char *what, const float *scores, int64_t T, int64_t G, const int32_t *pos, int32_t P,
                         int32_t n_select, int32_t with_tail, const int32_t *expect) {
    int64_t W = select_width(P, n_select, with_tail);
    int32_t *got = malloc((size_t)(T * W) * sizeof(int32_t));
    glm53_tensor st = host(GLM53_F32, (void *)scores, 2, T, G, 0), pt = host(GLM53_I32, (void *)pos, 1, T, 0, 0);
    glm53_tensor it = host(GLM53_I32, got, 2, T, W, 0);
    for (int b = 0; b < N_BACKENDS; b++) {
        for (int64_t i = 0; i < T * W; i++) got[i] = -12345;   /* poison: an unwritten slot shows */
        glm53_status s = backends[b]->ops->kpool_select(backends[b], &it, &st, &pt, P, n_select, with_tail);
        CHECK(s == GLM53_OK, "%s: status %d", what, s);
        for (int64_t t = 0; t < T; t++) {
            int64_t j = 0;   /* the first differing slot */
            while (j < W && got[t * W + j] == expect[t * W + j]) j++;
            CHECK(j == W, "%s, row %lld, %d threads: slot %lld is %d, want %d", what, (long long)t, THREADS[b],
                  (long long)j, j < W ? got[t * W + j] : 0, j < W ? expect[t * W + j] : 0);
        }
    }
    free(got);
}

static void test_small_rows(void) {
    TEST_CASE("w > 0: the positive pools, then the lowest zero pools") {
        /* P 2, budget 3, 6 closed pools (L 13: position 12 is the open pool). Pools 1 and 4 are positive, the
         * third place is a tie of four zeros: pool 0 takes it. */
        const float scores[] = {0.0f, 0.5f, 0.0f, 0.0f, 0.25f, 0.0f};
        const int32_t pos[] = {12}, expect[] = {0, 1, 2, 3, 8, 9, 12};
        check_select("w > 0", scores, 1, 6, pos, 2, 3, 1, expect);
    }
    TEST_CASE("w < 0: the zeros are the best scores, -0.0 ties +0.0") {
        /* P 2, budget 2, 6 closed pools (L 12: no open pool, so the tail slot is -1). Zeros at pools 1 (-0.0),
         * 3 and 4: the two lowest, 1 and 3, win. */
        const float scores[] = {-0.5f, -0.0f, -1.0f, 0.0f, 0.0f, -0.25f};
        const int32_t pos[] = {11}, expect[] = {2, 3, 6, 7, -1};
        check_select("w < 0", scores, 1, 6, pos, 2, 2, 1, expect);
    }
    TEST_CASE("every pool equal: the first pools, then the open pool") {
        /* P 4, budget 2, 5 closed pools (L 22: positions 20 and 21 are open). */
        const float scores[] = {0.0f, 0.0f, -0.0f, 0.0f, 0.0f};
        const int32_t pos[] = {21}, expect[] = {0, 1, 2, 3, 4, 5, 6, 7, 20, 21, -1};
        check_select("all equal", scores, 1, 5, pos, 4, 2, 1, expect);
    }
    TEST_CASE("a tie at a positive score, without a tail") {
        /* P 1, budget 2: pools 1, 2 and 3 score 2; 1 and 2 win. */
        const float scores[] = {1.0f, 2.0f, 2.0f, 2.0f, 1.0f};
        const int32_t pos[] = {4}, expect[] = {1, 2};
        check_select("positive tie", scores, 1, 5, pos, 1, 2, 0, expect);
    }
    TEST_CASE("rows of one step: each ranks only its own closed pools") {
        /* P 2, budget 3, scores [3, 6]. Row 0 (L 6) has 3 closed pools, all within the budget. Row 1 (L 9) has
         * 4: its zeros at 0..3 tie and 0, 1, 2 win; pools 4 and 5 are not closed for it, whatever they hold.
         * Row 2 (L 12) has 6: pools 5 and 3 are positive, and pool 0 wins the zeros (pool 1's -0.0 included). */
        const float scores[] = {
            0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
            0.0f, 0.0f, 0.0f, 0.0f, 9.0f, 9.0f,
            0.0f, -0.0f, 0.0f, 3.0f, 0.0f, 7.0f,
        };
        const int32_t pos[] = {5, 8, 11};
        const int32_t expect[] = {
            0, 1, 2, 3, 4, 5, -1,
            0, 1, 2, 3, 4, 5, 8,
            0, 1, 6, 7, 10, 11, -1,
        };
        check_select("three rows", scores, 3, 6, pos, 2, 3, 1, expect);
    }
}

/* The real budget (512 pools of 4) over 600 closed pools, with the tie run far longer than the budget's last
 * place: every seventh pool (g % 7 == 3, 86 pools) scores sign * (g + 1) / 1000, the other 514 score 0. The
 * expected rows follow from the policy by counting, not by ranking: sign > 0 takes the 86 positive pools and the
 * lowest 426 zero pools; sign < 0 takes the lowest 512 zero pools. */
static void test_long_tie_run(void) {
    enum { P = 4, N_SELECT = 512, G = 600, W = N_SELECT * P + P - 1 };
    float *scores = malloc(2 * G * sizeof(float));
    int32_t *expect = malloc(2 * W * sizeof(int32_t));
    const int32_t pos[] = {G * P + 1, G * P + 1};   /* L = 2402: 600 closed pools, positions 2400 and 2401 open */
    for (int row = 0; row < 2; row++) {
        float sign = row == 0 ? 1.0f : -1.0f;
        int n_positive = 0;
        for (int g = 0; g < G; g++) {
            bool marked = g % 7 == 3;
            scores[row * G + g] = marked ? sign * (float)(g + 1) / 1000.0f : sign * 0.0f;
            n_positive += marked && sign > 0;
        }
        int zeros_wanted = N_SELECT - n_positive, w = 0;
        for (int g = 0; g < G; g++) {
            bool take = scores[row * G + g] > 0 || (scores[row * G + g] == 0 && zeros_wanted-- > 0);
            for (int i = 0; take && i < P; i++) expect[row * W + w++] = g * P + i;
        }
        CHECK(w == N_SELECT * P, "the expected row %d has %d positions", row, w);
        expect[row * W + w++] = G * P;
        expect[row * W + w++] = G * P + 1;
        while (w < W) expect[row * W + w++] = -1;
    }
    TEST_CASE("600 pools, budget 512, a tie run of 514 zeros") {
        check_select("long tie run", scores, 2, G, pos, P, N_SELECT, 1, expect);
    }
    free(scores);
    free(expect);
}

/* kpool_score then kpool_select, one index head: the ReLU makes exact zeros (q . K <= 0, including exactly 0),
 * and the selection breaks the tie among them. Q = (1, 0) for both rows; the pooled keys give dots -1, 2, 0,
 * -0.5, 0.75. Row 0 has w = -1: scores 0, -2, 0, 0, -0.75, so the zeros at pools 0, 2, 3 are the best; a budget
 * of 2 takes pools 0 and 2. Row 1 has w = +1: scores 0, 2, 0, 0, 0.75, so pools 1 and 4 lead, and a budget of 3
 * adds pool 0, the lowest of the zeros. P 2, L 11: position 10 is the open pool. */
static void test_scores_to_selection(void) {
    float Q[] = {1.0f, 0.0f, 1.0f, 0.0f};                                        /* [T 2, Hi 1, dI 2] */
    float w[] = {-1.0f, 1.0f};                                                   /* [T 2, Hi 1] */
    float pooled[] = {-1.0f, 0.0f, 2.0f, 0.0f, 0.0f, 5.0f, -0.5f, 3.0f, 0.75f, -1.0f};   /* [G 5, dI 2] */
    int32_t n_closed[] = {5, 5}, pos[] = {10, 10};
    const float want_scores[] = {0.0f, -2.0f, 0.0f, 0.0f, -0.75f, 0.0f, 2.0f, 0.0f, 0.0f, 0.75f};
    float scores[10];
    glm53_tensor qt = host(GLM53_F32, Q, 3, 2, 1, 2), wt = host(GLM53_F32, w, 2, 2, 1, 0);
    glm53_tensor kt = host(GLM53_F32, pooled, 2, 5, 2, 0), ct = host(GLM53_I32, n_closed, 1, 2, 0, 0);
    glm53_tensor st = host(GLM53_F32, scores, 2, 2, 5, 0);
    TEST_CASE("kpool_score: the ReLU gives exact zeros, and the selection breaks their tie to the lower pool") {
        for (int b = 0; b < N_BACKENDS; b++) {
            for (int i = 0; i < 10; i++) scores[i] = NAN;
            CHECK(backends[b]->ops->kpool_score(backends[b], &st, &qt, &wt, &kt, &ct, 1.0f) == GLM53_OK, "status");
            for (int i = 0; i < 10; i++)
                CHECK(scores[i] == want_scores[i], "score %d: got %g, want %g (%d threads)", i, scores[i],
                      want_scores[i], THREADS[b]);
        }
        const int32_t budget2[] = {0, 1, 4, 5, 10, 2, 3, 8, 9, 10};   /* rows 0 and 1, budget 2 */
        check_select("scored, budget 2", scores, 2, 5, pos, 2, 2, 1, budget2);
        const int32_t budget3[] = {0, 1, 4, 5, 6, 7, 10, 0, 1, 2, 3, 8, 9, 10};   /* budget 3 */
        check_select("scored, budget 3", scores, 2, 5, pos, 2, 3, 1, budget3);
    }
}

int main(void) {
    for (int b = 0; b < N_BACKENDS; b++)
        if (glm53_backend_cpu_create(THREADS[b], &backends[b]) != GLM53_OK) {
            fprintf(stderr, "cpu backend with %d threads: %s\n", THREADS[b], glm53_last_error());
            return 1;
        }
    test_small_rows();
    test_long_tie_run();
    test_scores_to_selection();
    for (int b = 0; b < N_BACKENDS; b++) backends[b]->ops->destroy(backends[b]);
    return test_finish("test_kpool_select");
}
