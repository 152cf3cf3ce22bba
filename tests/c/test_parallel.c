/*
 * test_parallel.c - tensor and expert parallelism on the threads communicator (kernels/comm_threads.c): every
 * sharding decision of the engine, checked in CI without a GPU (docs/multi-gpu.md).
 *
 * The reference is the same model on one rank. For each fixture and each layout (TP 2, TP 4, EP 2, EP 4,
 * TP 2 x EP 2), the logits of each mode of parallel_modes.h (prefill, decode, chunked, batch, mtp) must be within
 * 1e-5 relative (max |a - b| / max |ref|) of one rank's. The sequences are the fixtures' own, grown to keep
 * every router and pool choice 2e-2 from a tie: the partial sums of N ranks add in another order than one
 * rank's sum (~1e-7), which must not flip a top-k. A layout the
 * fixture's dimensions do not split into must be refused at load with the reason. Then the machinery: each rank
 * holds less than the whole model; a rank that fails inside a step makes the step fail with its message, while
 * the other ranks, waiting for it in a collective, give up instead of hanging.
 */
#include "parallel_modes.h"

#include "core/engine/model.h"
#include "core/engine/ranks.h"

static const struct { int32_t tp, ep; } LAYOUTS[] = {{2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}};
static const double TOLERANCE = 1e-5;

/* ------------------------------------------------------------------------------------------------------------
 * Layouts against one rank
 */
/* Whether the fixture's dimensions split into the layout (the engine's rule, restated for the test). */
static bool splits(const glm53_text_config *c, int32_t tp, int32_t ep) {
    return c->linear_num_heads % tp == 0 && c->num_attention_heads % tp == 0 && c->intermediate_size % tp == 0 &&
           c->moe_intermediate_size % tp == 0 && c->n_routed_experts % ep == 0;
}

static glm53_model *load(const fixture *fx, int32_t tp, int32_t ep, int32_t step_rows) {
    glm53_model_params p = glm53_model_default_params();
    p.n_threads = 1;
    p.tp = tp;
    p.ep = ep;
    return load_with(fx, p, step_rows);
}

static void test_layouts(void) {
    print_mode_header(8);
    for (size_t f = 0; f < sizeof FIXTURES / sizeof FIXTURES[0]; f++) {
        TEST_CASE(FIXTURES[f]) {
            fixture fx;
            if (!fixture_open(FIXTURES[f], &fx)) continue;
            glm53_model *ref = load(&fx, 1, 1, 0), *ref_chunked = load(&fx, 1, 1, CHUNK_PASS_ROWS);
            if (!ref || !ref_chunked) continue;
            floats want[MODES];
            run_modes(ref, ref_chunked, &fx, want);
            const glm53_text_config *c = &glm53_model_config_get(ref)->text;
            for (size_t l = 0; l < sizeof LAYOUTS / sizeof LAYOUTS[0]; l++) {
                int32_t tp = LAYOUTS[l].tp, ep = LAYOUTS[l].ep;
                char layout[32];
                snprintf(layout, sizeof layout, "tp%d ep%d", tp, ep);
                if (!splits(c, tp, ep)) {
                    glm53_model_params p = glm53_model_default_params();
                    p.tp = tp;
                    p.ep = ep;
                    glm53_model *m = NULL;
                    glm53_status st = glm53_model_load(fx.dir, &p, &m);
                    CHECK(st == GLM53_ERR_INVALID_ARG && strstr(glm53_last_error(), "does not split"),
                          "%s %s: a layout the dimensions do not split into must be refused (%s)", fx.dir, layout,
                          st == GLM53_OK ? "loaded" : glm53_last_error());
                    glm53_model_free(m);
                    printf("%-18s %-8s %10s\n", FIXTURES[f], layout, "refused");
                    continue;
                }
                glm53_model *m = load(&fx, tp, ep, 0), *mc = load(&fx, tp, ep, CHUNK_PASS_ROWS);
                if (m && mc) {
                    CHECK(glm53_model_n_ranks(m) == tp * ep, "%s: %d ranks", layout, glm53_model_n_ranks(m));
                    /* tiny-fp8's slices start inside its 128x128 scale blocks, so ranks past 0 hold F32 copies */
                    bool fp8 = strcmp(FIXTURES[f], "tiny-fp8") == 0;
                    for (int32_t r = 0; r < tp * ep; r++) {
                        glm53_rank_info info;
                        CHECK(glm53_model_rank_info(m, r, &info) == GLM53_OK, "rank_info: %s", glm53_last_error());
                        CHECK((fp8 || info.weight_bytes < glm53_model_weight_bytes(ref)) && info.tp_rank == r % tp &&
                                  info.ep_rank == r / tp && info.n_experts == c->n_routed_experts / ep &&
                                  info.first_expert == info.ep_rank * info.n_experts,
                              "%s rank %d: holds %lld of the whole %lld bytes, tp_rank %d, ep_rank %d, experts %d+%d",
                              layout, r, (long long)info.weight_bytes, (long long)glm53_model_weight_bytes(ref),
                              info.tp_rank, info.ep_rank, info.first_expert, info.n_experts);
                    }
                    floats got[MODES];
                    run_modes(m, mc, &fx, got);
                    printf("%-18s %-8s", FIXTURES[f], layout);
                    for (int k = 0; k < MODES; k++) {
                        if (want[k].n == 0) {
                            printf(" %10s", "-");
                            continue;
                        }
                        double rel = got[k].n == want[k].n ? rel_diff(&got[k], &want[k]) : INFINITY;
                        printf(" %10.2e", rel);
                        CHECK(rel <= TOLERANCE, "%s %s %s: logits %.3e relative from one rank's (%lld of %lld values)",
                              FIXTURES[f], layout, MODE_NAMES[k], rel, (long long)got[k].n, (long long)want[k].n);
                    }
                    printf("\n");
                    for (int k = 0; k < MODES; k++) free(got[k].v);
                }
                glm53_model_free(m);
                glm53_model_free(mc);
            }
            for (int k = 0; k < MODES; k++) free(want[k].v);
            glm53_model_free(ref);
            glm53_model_free(ref_chunked);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * A rank that fails
 */
/* Rank 2 fails at once; every other rank then waits in a WORLD all-reduce for it. */
static glm53_status fail_on_rank_2(glm53_rank *rk, void *arg) {
    (void)arg;
    if (rk->index == 2) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "rank 2 ran out of memory (on purpose)");
    float x[4] = {1, 2, 3, 4};
    glm53_tensor t = {.dtype = GLM53_F32, .device = GLM53_DEVICE_CPU, .ndim = 1, .shape = {4}, .data = x};
    glm53_tensor_set_contiguous(&t);
    return rk->comm->ops->all_reduce(rk->comm, rk->be, &t, GLM53_COMM_WORLD);
}

/* Every rank sums its index + 1 over WORLD and over its TP group; all must see the same sums. */
static glm53_status sum_ranks(glm53_rank *rk, void *arg) {
    float *sums = arg;
    float world = (float)(rk->index + 1), group = world;
    glm53_tensor t = {.dtype = GLM53_F32, .device = GLM53_DEVICE_CPU, .ndim = 1, .shape = {1}, .data = &world};
    glm53_tensor_set_contiguous(&t);
    GLM53_TRY(rk->comm->ops->all_reduce(rk->comm, rk->be, &t, GLM53_COMM_WORLD));
    t.data = &group;
    GLM53_TRY(rk->comm->ops->all_reduce(rk->comm, rk->be, &t, GLM53_COMM_TP));
    sums[2 * rk->index] = world;
    sums[2 * rk->index + 1] = group;
    return GLM53_OK;
}

static void test_failures_and_groups(void) {
    TEST_CASE("a failing rank fails the run with its message; the others stop waiting") {
        fixture fx;
        if (!fixture_open("tiny-f32", &fx)) return;
        glm53_model *m = load(&fx, 2, 2, 0);
        if (!m) return;
        glm53_status st = glm53_ranks_run(m, fail_on_rank_2, NULL);
        CHECK(st == GLM53_ERR_OUT_OF_MEMORY && strstr(glm53_last_error(), "rank 2") &&
                  strstr(glm53_last_error(), "on purpose"),
              "the first failure is reported (status %d: %s)", st, glm53_last_error());
        /* The communicator was reset: the next run's collectives work, in both groups. */
        float sums[8];
        st = glm53_ranks_run(m, sum_ranks, sums);
        CHECK(st == GLM53_OK, "collectives after a failed run: %s", glm53_last_error());
        for (int r = 0; st == GLM53_OK && r < 4; r++) {
            float group = r < 2 ? 1 + 2 : 3 + 4;   /* ranks {0, 1} and {2, 3} */
            CHECK(sums[2 * r] == 10 && sums[2 * r + 1] == group, "rank %d: world %g (want 10), tp group %g (want %g)",
                  r, sums[2 * r], sums[2 * r + 1], group);
        }
        /* And a whole step still runs after it. */
        glm53_seq *s = new_seq(m);
        float *logits = calloc(4096, sizeof(float));
        CHECK(s && step_rows(m, s, fx.tokens, 3, logits, NULL), "a step after the failed run");
        free(logits);
        glm53_seq_free(s);
        glm53_model_free(m);
    }
    TEST_CASE("bad layouts are refused") {
        fixture fx;
        if (!fixture_open("tiny-f32", &fx)) return;
        glm53_model_params p = glm53_model_default_params();
        glm53_model *m = NULL;
        p.tp = -1;
        CHECK(glm53_model_load(fx.dir, &p, &m) == GLM53_ERR_INVALID_ARG && !m, "tp -1 is refused");
        p.tp = 8;
        p.ep = 16;
        CHECK(glm53_model_load(fx.dir, &p, &m) == GLM53_ERR_INVALID_ARG && !m, "128 ranks are refused");
        p.tp = 2;
        p.ep = 1;
        p.communicator = GLM53_COMMUNICATOR_NCCL;
        CHECK(glm53_model_load(fx.dir, &p, &m) == GLM53_ERR_UNSUPPORTED && !m &&
                  strstr(glm53_last_error(), "NCCL needs the CUDA backend"),
              "NCCL on the CPU backend is refused (%s)", glm53_last_error());
        p.communicator = 7;
        CHECK(glm53_model_load(fx.dir, &p, &m) == GLM53_ERR_INVALID_ARG && !m, "an unknown communicator is refused");
    }
}

/* The NCCL communicator: libnccl opens and every function it calls resolves (no GPU needed). */
static void test_nccl_links(void) {
#ifdef GLM53_WITH_CUDA
    TEST_CASE("libnccl.so.2 opens and its functions resolve") {
        int32_t version = 0;
        glm53_status st = glm53_comm_nccl_probe(&version);
        CHECK(st == GLM53_OK && version >= 21800, "nccl probe: %s (version %d)", glm53_last_error(), version);
        if (st == GLM53_OK) printf("NCCL %d opens and links\n", version);
    }
#else
    TEST_CASE("a library without CUDA refuses NCCL") {
        int32_t version = 0;
        CHECK(glm53_comm_nccl_probe(&version) == GLM53_ERR_BACKEND, "nccl probe without CUDA must fail");
    }
#endif
}

int main(void) {
    test_nccl_links();
    test_layouts();
    test_failures_and_groups();
    return test_finish("test_parallel");
}
