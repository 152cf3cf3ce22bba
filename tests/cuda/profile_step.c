/*
 * profile_step.c - where a decode step's time goes on CUDA: the step's wall time (eager and as a replayed CUDA
 * graph), then the same steps again with the backend's per-kernel timing on (backend.h profile_start /
 * profile_report), one row per kernel label.
 *
 *     profile_step MODEL_DIR [--context L] [--batch B] [--steps N]
 *     profile_step MODEL_DIR --prefill N [--chunks C1,C2,...] [--steps R]
 *
 * Each of the B sequences gets an L-token prompt (prefilled in chunks of 2048, so long contexts do not need a
 * quadratic prefill), then 3 warm-up decode steps; then
 *   1. N eager decode steps of B rows (one token per sequence, greedy: each row's token chosen on the device,
 *      glm53_step_output.top_k = 1, so 4 bytes a row come back, not the logits), median wall time per step;
 *   2. one step captured at the current lengths and replayed N times (each replay rolled back, so every replay
 *      sees the same context), median wall time per replay;
 *   3. N eager steps with kernel timing on, and the per-kernel table. Timing records an event per launch, so
 *      its total runs above the eager figure by the host's extra work; the shares are what it is for.
 * The median figures are the ones for docs/performance.md; with the table beside them the floor of each row
 * can be written down (bytes it must move / 4.3 TB/s).
 *
 * With --prefill N (issue 17): a fresh sequence takes an N-token prompt in chunks of C tokens (one step per
 * chunk; C = N is one-shot prefill), R times per chunk size (default R = 3), median wall time; then one more
 * prefill in chunks of the first size with kernel timing on, and its per-kernel table. A chunk size that fails
 * (out of device memory, say) prints the error and the next one runs.
 */
#include "core/engine/model.h"
#include "core/engine/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int fail(const char *what) {
    fprintf(stderr, "profile_step: %s: %s\n", what, glm53_last_error());
    return 1;
}

/* One fresh sequence takes `n` prompt tokens in chunks of `chunk`; returns the wall time in ms, or -1. Each step
 * returns its last row's greedy token (top_k 1), as a prompt's chunks before generation do. */
static double prefill_once(glm53_model *m, int32_t n, int32_t chunk, int32_t *tokens) {
    const int32_t V = glm53_model_config_get(m)->text.vocab_size;
    glm53_seq_params sp = glm53_seq_default_params();
    sp.max_tokens = n + 16;
    glm53_seq *seq = NULL;
    if (glm53_seq_create(m, &sp, &seq) != GLM53_OK) return -1.0;
    for (int32_t i = 0; i < n; i++) tokens[i] = (int32_t)((i * 7919 + 17) % (V > 200 ? 200 : V));
    int32_t next = -1;
    glm53_step_output out = {.capacity = 1, .top_k = 1, .top_ids = &next};
    double t0 = now_ms();
    for (int32_t done = 0; done < n;) {
        int32_t rows = n - done < chunk ? n - done : chunk;
        glm53_batch b = {.n_seqs = 1, .seqs = &seq, .n_rows = &rows, .tokens = tokens + done};
        if (glm53_model_step(m, &b, &out) != GLM53_OK) {   /* the token arrives when the step is done */
            glm53_seq_free(seq);
            return -1.0;
        }
        done += rows;
    }
    double ms = now_ms() - t0;
    glm53_seq_free(seq);
    return ms;
}

/* --prefill: see the purpose block. */
static int profile_prefill(glm53_model *m, const char *dir, int32_t n, const char *chunks, int repeats) {
    glm53_backend *be = m->ranks[0].be;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    double *times = malloc((size_t)repeats * sizeof *times);
    int32_t sizes[16], n_sizes = 0, failed = 0;
    for (const char *c = chunks; c && *c && n_sizes < 16; c = strchr(c, ',') ? strchr(c, ',') + 1 : "") {
        int32_t chunk = atoi(c);
        sizes[n_sizes++] = chunk < 1 || chunk > n ? n : chunk;
    }
    if (n_sizes == 0) sizes[n_sizes++] = n;
    if (prefill_once(m, n < 64 ? n : 64, 64, tokens) < 0) return fail("warm-up prefill");
    printf("%s: prefill of %d tokens, %d runs per figure\n", dir, n, repeats);
    for (int k = 0; k < n_sizes; k++) {
        int ok = 1;
        for (int r = 0; ok && r < repeats; r++) ok = (times[r] = prefill_once(m, n, sizes[k], tokens)) >= 0;
        if (ok) {
            double ms = median(times, repeats);
            printf("prefill %d tokens, chunks of %d: %.2f ms (median), %.0f tokens/s\n", n, sizes[k], ms, 1e3 * n / ms);
        } else {
            printf("prefill %d tokens, chunks of %d: failed: %s\n", n, sizes[k], glm53_last_error());
            failed = 1;
        }
        fflush(stdout);
    }
    if (be->ops->profile_start && be->ops->profile_report) {
        if (be->ops->profile_start(be) != GLM53_OK) return fail("profile_start");
        double ms = prefill_once(m, n, sizes[0], tokens);
        printf("\nper kernel, one prefill of %d tokens in chunks of %d (%.2f ms with an event per launch):\n", n,
               sizes[0], ms);
        if (be->ops->profile_report(be, stdout) != GLM53_OK) return fail("profile_report");
    }
    free(tokens), free(times);
    return failed;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int context = 512, batch = 1, steps = 20, prefill = 0, steps_given = 0;
    const char *chunks = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--context") == 0) context = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--batch") == 0) batch = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) steps = atoi(argv[++i]), steps_given = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--prefill") == 0) prefill = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--chunks") == 0) chunks = argv[++i];
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else dir = NULL, i = argc;
    }
    if (!dir || context < 1 || batch < 1 || batch > 256 || steps < 1 || steps > 10000 || prefill < 0 ||
        (chunks && !prefill)) {
        fprintf(stderr, "usage: profile_step MODEL_DIR [--context L >= 1] [--batch B 1..256] [--steps N 1..10000]\n"
                        "       profile_step MODEL_DIR --prefill N [--chunks C1,C2,...] [--steps R]\n");
        return 2;
    }
    glm53_model_params mp = glm53_model_default_params();
    mp.device = GLM53_DEVICE_CUDA;
    glm53_model *m = NULL;
    if (glm53_model_load(dir, &mp, &m) != GLM53_OK) return fail("load");
    glm53_backend *be = m->ranks[0].be;
    if (!be->ops->profile_start || !be->ops->profile_report) {
        fprintf(stderr, "profile_step: the %s backend has no kernel timing\n", be->ops->name);
        return 1;
    }
    const int32_t V = glm53_model_config_get(m)->text.vocab_size;
    if (prefill) {
        int rc = profile_prefill(m, dir, prefill, chunks, steps_given ? steps : 3);
        glm53_model_free(m);
        return rc;
    }

    glm53_seq_params sp = glm53_seq_default_params();
    sp.max_tokens = context + 2 * steps + 16;
    glm53_seq **seqs = calloc((size_t)batch, sizeof *seqs);
    int32_t *n_rows = malloc((size_t)batch * sizeof *n_rows), *tokens = malloc(2048 * sizeof *tokens);
    float *logits = malloc((size_t)batch * V * sizeof *logits);
    double *times = malloc((size_t)steps * sizeof *times);
    for (int s = 0; s < batch; s++)
        if (glm53_seq_create(m, &sp, &seqs[s]) != GLM53_OK) return fail("seq");

    /* Prompts: sequence s reads a different arithmetic walk over the first 200 ids. */
    /* Decode steps output each row's greedy token chosen on the device (top_k 1): 4 bytes a row reach the host,
     * as in a greedy decode loop, not the logits rows. */
    int32_t *greedy = malloc((size_t)batch * sizeof *greedy);
    glm53_step_output out = {.capacity = batch, .top_k = 1, .top_ids = greedy};
    for (int s = 0; s < batch; s++) {
        for (int done = 0; done < context;) {
            int n = context - done < 2048 ? context - done : 2048;
            for (int i = 0; i < n; i++) tokens[i] = (int32_t)(((done + i) * 7919 + 17 * s + 17) % (V > 200 ? 200 : V));
            glm53_batch b = {.n_seqs = 1, .seqs = &seqs[s], .n_rows = &n, .tokens = tokens};
            glm53_step_output o1 = {.logits = logits, .capacity = 1};
            if (glm53_model_step(m, &b, &o1) != GLM53_OK) return fail("prefill");
            done += n;
        }
    }
    for (int s = 0; s < batch; s++) n_rows[s] = 1;
    glm53_batch b = {.n_seqs = batch, .seqs = seqs, .n_rows = n_rows, .tokens = tokens};
    for (int s = 0; s < batch; s++) tokens[s] = 1 + s;
    for (int i = 0; i < 3; i++) {
        if (glm53_model_step(m, &b, &out) != GLM53_OK) return fail("warm-up step");
        for (int s = 0; s < batch; s++) tokens[s] = greedy[s];
    }

    /* 1. eager steps */
    for (int i = 0; i < steps; i++) {
        double t0 = now_ms();
        if (glm53_model_step(m, &b, &out) != GLM53_OK) return fail("eager step");
        times[i] = now_ms() - t0;
        for (int s = 0; s < batch; s++) tokens[s] = greedy[s];
    }
    double eager = median(times, steps);

    /* 2. one captured step, replayed at the same lengths */
    double replay = -1.0;
    int64_t *lengths = malloc((size_t)batch * sizeof *lengths);
    for (int s = 0; s < batch; s++) lengths[s] = glm53_seq_length(seqs[s]);
    glm53_step_graph *g = NULL;
    if (glm53_step_capture(m, &b, &out, &g) == GLM53_OK) {
        int ok = 1;
        for (int i = 0; ok && i < steps; i++) {
            for (int s = 0; ok && s < batch; s++) ok = glm53_seq_truncate(seqs[s], lengths[s]) == GLM53_OK;
            double t0 = now_ms();
            ok = ok && glm53_step_replay(m, g, &b, &out) == GLM53_OK;
            times[i] = now_ms() - t0;
        }
        if (!ok) return fail("replay");
        replay = median(times, steps);
        glm53_step_graph_free(m, g);
    } else {
        fprintf(stderr, "profile_step: capture refused (%s); no replay figure\n", glm53_last_error());
        for (int s = 0; s < batch; s++)
            if (glm53_seq_truncate(seqs[s], lengths[s]) != GLM53_OK) return fail("truncate");
    }

    /* 3. the same eager steps, timed per kernel */
    if (be->ops->profile_start(be) != GLM53_OK) return fail("profile_start");
    for (int i = 0; i < steps; i++) {
        if (glm53_model_step(m, &b, &out) != GLM53_OK) return fail("profiled step");
        for (int s = 0; s < batch; s++) tokens[s] = greedy[s];
    }
    printf("\n%s: context %d, batch %d, %d steps per figure\n", dir, context, batch, steps);
    if (be->ops->profile_report(be, stdout) != GLM53_OK) return fail("profile_report");
    printf("decode step (median wall time): eager %.3f ms, graph replay %s%.3f ms; %.1f tokens/s eager\n", eager,
           replay < 0 ? "(none) " : "", replay < 0 ? 0.0 : replay, 1e3 * batch / eager);

    for (int s = 0; s < batch; s++) glm53_seq_free(seqs[s]);
    glm53_model_free(m);
    free(seqs), free(n_rows), free(tokens), free(logits), free(times), free(lengths), free(greedy);
    return 0;
}
