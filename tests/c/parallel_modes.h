/*
 * parallel_modes.h - what the parallel tests share (tests/c/test_parallel.c on the threads communicator,
 * tests/cuda/test_nccl.c on NCCL): the fixtures' inputs, the modes a layout is compared in, the comparison.
 *
 * Modes, each giving every row's logits:
 *   prefill   one step over the fixture's whole sequence;
 *   decode    the same sequence one token per step;
 *   chunked   steps of CHUNK tokens on a model whose passes take CHUNK_PASS_ROWS rows (pass boundaries inside
 *             steps);
 *   batch     the cache fixture's four sequences prefilled together, then one decode step of all four;
 *   mtp       the MTP layers (fixtures that have them) over the prefill's hidden rows, chained.
 * The sequences are the fixtures' own, grown to keep every router and pool choice 2e-2 from a tie.
 */
#ifndef GLM53_TEST_PARALLEL_MODES_H
#define GLM53_TEST_PARALLEL_MODES_H

#include "test_util.h"

#include "glm53.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

/* The fixtures with a reference sequence (tiny-mtp2 has none: its MTP chain is covered by the Lua specs). */
static const char *FIXTURES[] = {"tiny-f32", "tiny-bf16-kpool8", "tiny-fp8", "tiny-mtp"};
enum { MODES = 5, CHUNK = 5, CHUNK_PASS_ROWS = 3, MAX_T = 256 };
static const char *MODE_NAMES[MODES] = {"prefill", "decode", "chunked", "batch", "mtp"};

/* ------------------------------------------------------------------------------------------------------------
 * Fixture inputs
 */
typedef struct {
    char     dir[256];
    int32_t  tokens[MAX_T], n_tokens;
    int32_t  batch[4][MAX_T], batch_len[4];   /* cache_tokens.json "batch" */
} fixture;

/* A 1-D '<i4' .npy file. */
static bool read_tokens(const char *path, int32_t *out, int32_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    unsigned char head[10];
    bool ok = fread(head, 1, 10, f) == 10 && memcmp(head, "\x93NUMPY", 6) == 0;
    int hlen = ok ? head[8] | head[9] << 8 : 0;
    char header[512] = "";
    ok = ok && hlen < (int)sizeof header && fread(header, 1, (size_t)hlen, f) == (size_t)hlen;
    ok = ok && strstr(header, "'<i4'") && strstr(header, "'shape': (");
    long count = ok ? strtol(strstr(header, "'shape': (") + 10, NULL, 10) : 0;
    ok = ok && count > 0 && count <= MAX_T && fread(out, 4, (size_t)count, f) == (size_t)count;
    fclose(f);
    *n = (int32_t)count;
    return ok;
}

static bool read_batch(const char *path, fixture *fx) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *root = cJSON_Parse(text);
    cJSON *batch = root ? cJSON_GetObjectItem(root, "batch") : NULL;
    bool ok = batch && cJSON_GetArraySize(batch) == 4;
    for (int i = 0; ok && i < 4; i++) {
        cJSON *seq = cJSON_GetArrayItem(batch, i);
        fx->batch_len[i] = cJSON_GetArraySize(seq);
        ok = fx->batch_len[i] >= 2 && fx->batch_len[i] <= MAX_T;
        for (int j = 0; ok && j < fx->batch_len[i]; j++) fx->batch[i][j] = cJSON_GetArrayItem(seq, j)->valueint;
    }
    cJSON_Delete(root);
    return ok;
}

/* The inputs of tests/fixtures/NAME (a failed check when they cannot be read). */
static bool fixture_open(const char *name, fixture *fx) {
    char path[512];
    snprintf(fx->dir, sizeof fx->dir, "tests/fixtures/%s", name);
    snprintf(path, sizeof path, "%s/tokens.npy", fx->dir);
    bool ok = read_tokens(path, fx->tokens, &fx->n_tokens);
    snprintf(path, sizeof path, "%s/cache_tokens.json", fx->dir);
    ok = ok && read_batch(path, fx);
    CHECK(ok, "cannot read the inputs of %s", fx->dir);
    return ok;
}

/* The header of the results table: fixture, layout (layout_width wide), one column per mode. */
static void print_mode_header(int layout_width) {
    printf("%-18s %-*s", "fixture", layout_width, "layout");
    for (int k = 0; k < MODES; k++) printf(" %10s", MODE_NAMES[k]);
    printf("\n");
}

/* The fixture's model with these parameters, passes of step_rows (0: the backend's). */
static glm53_model *load_with(const fixture *fx, glm53_model_params p, int32_t step_rows) {
    p.step_rows = step_rows;
    glm53_model *m = NULL;
    glm53_status st = glm53_model_load(fx->dir, &p, &m);
    CHECK(st == GLM53_OK, "load %s tp %d ep %d communicator %d: %s", fx->dir, p.tp, p.ep, p.communicator,
          glm53_last_error());
    return m;
}

/* ------------------------------------------------------------------------------------------------------------
 * The modes: each returns its logits (malloc'd) and their count
 */
typedef struct {
    float  *v;
    int64_t n;
} floats;

static glm53_seq *new_seq(glm53_model *m) {
    glm53_seq_params sp = glm53_seq_default_params();
    sp.max_tokens = MAX_T;
    glm53_seq *s = NULL;
    CHECK(glm53_seq_create(m, &sp, &s) == GLM53_OK, "seq_create: %s", glm53_last_error());
    return s;
}

/* One step of n rows of one sequence, every row's logits (and hidden) into the buffers. */
static bool step_rows(glm53_model *m, glm53_seq *s, const int32_t *tok, int32_t n, float *logits, float *hidden) {
    uint8_t want[MAX_T];
    memset(want, 1, (size_t)n);
    glm53_batch b = {.n_seqs = 1, .seqs = &s, .n_rows = &n, .tokens = tok, .want_output = want};
    glm53_step_output out = {.logits = logits, .hidden = hidden, .capacity = n};
    glm53_status st = glm53_model_step(m, &b, &out);
    CHECK(st == GLM53_OK && out.n_out == n, "step of %d rows: %s", n, glm53_last_error());
    return st == GLM53_OK;
}

/* prefill, decode, batch on `m`; chunked on `chunked` (passes of CHUNK_PASS_ROWS); mtp when the model has it. */
static void run_modes(glm53_model *m, glm53_model *chunked, const fixture *fx, floats out[MODES]) {
    const glm53_text_config *c = &glm53_model_config_get(m)->text;
    int64_t V = c->vocab_size, D = c->hidden_size, T = fx->n_tokens;
    for (int i = 0; i < MODES; i++) out[i] = (floats){calloc((size_t)(T * V * 4), sizeof(float)), 0};
    float *hidden = calloc((size_t)(T * D), sizeof(float));

    glm53_seq *s = new_seq(m);
    if (s && step_rows(m, s, fx->tokens, (int32_t)T, out[0].v, hidden)) out[0].n = T * V;
    glm53_seq_free(s);

    s = new_seq(m);
    bool ok = s != NULL;
    for (int64_t t = 0; ok && t < T; t++) ok = step_rows(m, s, &fx->tokens[t], 1, out[1].v + t * V, NULL);
    if (ok) out[1].n = T * V;
    glm53_seq_free(s);

    s = new_seq(chunked);
    ok = s != NULL;
    for (int64_t t = 0; ok && t < T; t += CHUNK) {
        int32_t n = (int32_t)(T - t < CHUNK ? T - t : CHUNK);
        ok = step_rows(chunked, s, &fx->tokens[t], n, out[2].v + t * V, NULL);
    }
    if (ok) out[2].n = T * V;
    glm53_seq_free(s);

    /* batch: the four sequences but their last tokens together (every row out), then their last tokens */
    glm53_seq *seqs[4];
    int32_t n_rows[4], tok[4 * MAX_T], rows = 0;
    for (int i = 0; i < 4; i++) {
        seqs[i] = new_seq(m);
        n_rows[i] = fx->batch_len[i] - 1;
        memcpy(tok + rows, fx->batch[i], (size_t)n_rows[i] * sizeof(int32_t));
        rows += n_rows[i];
    }
    uint8_t want[4 * MAX_T];
    memset(want, 1, sizeof want);
    glm53_batch b = {.n_seqs = 4, .seqs = seqs, .n_rows = n_rows, .tokens = tok, .want_output = want};
    glm53_step_output o = {.logits = out[3].v, .capacity = rows};
    ok = glm53_model_step(m, &b, &o) == GLM53_OK;
    CHECK(ok, "batch prefill: %s", glm53_last_error());
    for (int i = 0; i < 4; i++) {
        tok[i] = fx->batch[i][fx->batch_len[i] - 1];
        n_rows[i] = 1;
    }
    b.want_output = NULL;
    o = (glm53_step_output){.logits = out[3].v + rows * V, .capacity = 4};
    ok = ok && glm53_model_step(m, &b, &o) == GLM53_OK;
    CHECK(ok, "batch decode: %s", glm53_last_error());
    if (ok) out[3].n = (rows + 4) * V;
    for (int i = 0; i < 4; i++) glm53_seq_free(seqs[i]);

    /* mtp: layer 0 on (h_p, x_{p+1}) for p < T-1, each further layer on the previous layer's hidden */
    int32_t n_mtp = glm53_model_n_mtp(m);
    if (n_mtp > 0 && out[0].n) {
        s = new_seq(m);
        float *h_in = hidden, *h_out = calloc((size_t)(T * D), sizeof(float));
        ok = s && step_rows(m, s, fx->tokens, (int32_t)T, out[4].v, hidden);   /* the target's cache first */
        int64_t at = 0;
        for (int32_t layer = 0; ok && layer < n_mtp; layer++) {
            int32_t n = (int32_t)(T - 1 - layer);
            uint8_t all[MAX_T];
            memset(all, 1, sizeof all);
            glm53_batch mb = {.n_seqs = 1, .seqs = &s, .n_rows = &n, .tokens = fx->tokens + 1 + layer, .want_output = all};
            glm53_step_output mo = {.logits = out[4].v + at, .hidden = h_out, .capacity = n};
            ok = glm53_model_mtp_step(m, layer, &mb, h_in, &mo) == GLM53_OK;
            CHECK(ok, "mtp step %d: %s", layer, glm53_last_error());
            at += (int64_t)n * V;
            memcpy(hidden, h_out, (size_t)(n * D) * sizeof(float));
        }
        if (ok) out[4].n = at;
        free(h_out);
        glm53_seq_free(s);
    }
    free(hidden);
}

static double rel_diff(const floats *a, const floats *ref) {
    double maxd = 0, maxr = 0;
    for (int64_t i = 0; i < ref->n; i++) {
        if (a->v[i] != a->v[i]) return INFINITY;
        double d = fabs((double)a->v[i] - ref->v[i]);
        if (d > maxd) maxd = d;
        if (fabs(ref->v[i]) > maxr) maxr = fabs(ref->v[i]);
    }
    return maxr > 0 ? maxd / maxr : maxd;
}

#endif /* GLM53_TEST_PARALLEL_MODES_H */
