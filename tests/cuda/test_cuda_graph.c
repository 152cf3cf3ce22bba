/*
 * test_cuda_graph.c - a steady-state decode step on CUDA allocates nothing, waits for the device once (to read
 * its logits), and captured as a CUDA graph and replayed gives the eager step's logits bit for bit.
 *
 *     test_cuda_graph [--nccl] MODEL_DIR [MODEL_DIR ...]      (the real-dimension bench model, the fixtures)
 *
 * --nccl loads each model as one rank with the NCCL communicator, so every collective point of the graph is an
 * ncclAllReduce on the stream: the captured graph then records the collectives too.
 *
 * Per model: prefill a prompt, decode a few tokens (warm-up: the step plan sizes itself), then
 *   1. one eager decode step at length L, with the backend's counters read around it: cudaMalloc calls (device
 *      allocations) and host waits (stream synchronisations, blocking copies);
 *   2. roll back to L, capture the same step (stream capture in thread-local mode: an allocation or a wait while
 *      recording fails the capture), replay it: logits equal to step 1's, counters around the replay;
 *   3. roll back again and replay a second time: the same logits again.
 * Prints one table row per model; exit status 0 when every row passes.
 */
#include "test_util.h"

#include "core/engine/model.h"
#include "core/engine/step.h"

#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct {
    const char *model;
    int64_t allocs, syncs;                 /* eager decode step */
    int64_t replay_allocs, replay_syncs;   /* replayed step */
    int64_t differ1, differ2;              /* logits that differ from the eager step's: first, second replay */
    double eager_ms, replay_ms;
    bool ok;
} row;

static int64_t count_differ(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static bool use_nccl;

static bool run_model(const char *dir, row *r) {
    *r = (row){.model = dir};
    glm53_model_params mp = glm53_model_default_params();
    mp.device = GLM53_DEVICE_CUDA;
    if (use_nccl) mp.communicator = GLM53_COMMUNICATOR_NCCL;
    glm53_model *m = NULL;
    if (glm53_model_load(dir, &mp, &m) != GLM53_OK) {
        CHECK(false, "%s: load: %s", dir, glm53_last_error());
        return false;
    }
    const int32_t V = glm53_model_config_get(m)->text.vocab_size;
    glm53_seq_params sp = glm53_seq_default_params();
    sp.max_tokens = 512;
    glm53_seq *seq = NULL;
    CHECK(glm53_seq_create(m, &sp, &seq) == GLM53_OK, "%s: seq: %s", dir, glm53_last_error());
    float *logits = malloc((size_t)V * sizeof(float)), *eager = malloc((size_t)V * sizeof(float));
    enum { PROMPT = 64 };
    int32_t tokens[PROMPT], n = PROMPT;
    for (int i = 0; i < PROMPT; i++) tokens[i] = (int32_t)((i * 7919 + 17) % (V > 200 ? 200 : V));
    glm53_batch b = {.n_seqs = 1, .seqs = &seq, .n_rows = &n, .tokens = tokens};
    glm53_step_output out = {.logits = logits, .capacity = 1};
    bool ok = seq && glm53_model_step(m, &b, &out) == GLM53_OK;
    n = 1;
    for (int i = 0; ok && i < 4; i++) {
        tokens[0] = glm53_argmax_f32(logits, V);
        ok = glm53_model_step(m, &b, &out) == GLM53_OK;
    }
    CHECK(ok, "%s: prefill / warm-up decode: %s", dir, glm53_last_error());
    glm53_step_graph *g = NULL;
    if (ok) {
        tokens[0] = glm53_argmax_f32(logits, V);
        int64_t L = glm53_seq_length(seq);
        glm53_backend_counters c0, c1;
        glm53_backend_counters_get(m->ranks[0].be, &c0);
        double t0 = now_ms();
        ok = glm53_model_step(m, &b, &out) == GLM53_OK;
        r->eager_ms = now_ms() - t0;
        glm53_backend_counters_get(m->ranks[0].be, &c1);
        r->allocs = c1.device_allocs - c0.device_allocs;
        r->syncs = c1.host_syncs - c0.host_syncs;
        memcpy(eager, logits, (size_t)V * sizeof(float));
        CHECK(ok, "%s: eager step: %s", dir, glm53_last_error());

        ok = ok && glm53_seq_truncate(seq, L) == GLM53_OK;
        ok = ok && glm53_step_capture(m, &b, NULL, &g) == GLM53_OK;
        CHECK(ok, "%s: capture: %s", dir, glm53_last_error());
        for (int rep = 0; ok && rep < 2; rep++) {
            memset(logits, 0xff, (size_t)V * sizeof(float));   /* poisoned: every value must be written */
            glm53_backend_counters_get(m->ranks[0].be, &c0);
            t0 = now_ms();
            ok = glm53_step_replay(m, g, &b, &out) == GLM53_OK;
            double ms = now_ms() - t0;
            glm53_backend_counters_get(m->ranks[0].be, &c1);
            CHECK(ok, "%s: replay %d: %s", dir, rep, glm53_last_error());
            int64_t differ = ok ? count_differ(logits, eager, V) : V;
            if (rep == 0) {
                r->replay_allocs = c1.device_allocs - c0.device_allocs;
                r->replay_syncs = c1.host_syncs - c0.host_syncs;
                r->replay_ms = ms;
                r->differ1 = differ;
            } else {
                r->differ2 = differ;
            }
            CHECK(glm53_seq_length(seq) == L + 1, "%s: the replay advanced the length to %lld", dir,
                  (long long)glm53_seq_length(seq));
            if (rep == 0) ok = ok && glm53_seq_truncate(seq, L) == GLM53_OK;
        }
        /* The sequence goes on eagerly after the replays. */
        tokens[0] = glm53_argmax_f32(logits, V);
        ok = ok && glm53_model_step(m, &b, &out) == GLM53_OK;
        CHECK(ok, "%s: eager step after the replays: %s", dir, glm53_last_error());
    }
    r->ok = ok && r->allocs == 0 && r->syncs == 1 && r->replay_allocs == 0 && r->replay_syncs == 1 &&
            r->differ1 == 0 && r->differ2 == 0;
    CHECK(r->ok, "%s: allocs %lld syncs %lld | replay allocs %lld syncs %lld | differing logits %lld, %lld", dir,
          (long long)r->allocs, (long long)r->syncs, (long long)r->replay_allocs, (long long)r->replay_syncs,
          (long long)r->differ1, (long long)r->differ2);
    glm53_step_graph_free(m, g);
    glm53_seq_free(seq);
    glm53_model_free(m);
    free(logits);
    free(eager);
    return r->ok;
}

int main(int argc, char **argv) {
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--nccl") == 0) {
        use_nccl = true;
        first = 2;
    }
    if (argc <= first) {
        fprintf(stderr, "usage: test_cuda_graph [--nccl] MODEL_DIR [MODEL_DIR ...]\n");
        return 2;
    }
    row rows[16];
    int n = argc - first < 16 ? argc - first : 16;
    for (int i = 0; i < n; i++) run_model(argv[first + i], &rows[i]);
    if (use_nccl) printf("\n(one rank, NCCL communicator: the collectives are in the captured graphs)");
    printf("\n%-40s %8s %6s %9s %8s %8s %9s %11s %5s\n", "model", "mallocs", "waits", "eager ms", "r.mallocs",
           "r.waits", "replay ms", "differ 1/2", "pass");
    for (int i = 0; i < n; i++)
        printf("%-40s %8lld %6lld %9.2f %8lld %8lld %9.2f %5lld/%-5lld %5s\n", rows[i].model,
               (long long)rows[i].allocs, (long long)rows[i].syncs, rows[i].eager_ms, (long long)rows[i].replay_allocs,
               (long long)rows[i].replay_syncs, rows[i].replay_ms, (long long)rows[i].differ1,
               (long long)rows[i].differ2, rows[i].ok ? "yes" : "NO");
    return test_finish("test_cuda_graph");
}
