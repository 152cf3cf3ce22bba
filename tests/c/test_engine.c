/*
 * test_engine.c - the engine's machinery beyond the numbers: weight placement by shard spec, the step plan's
 * steady state (no growth, the same addresses), steps split into passes, the step's top-k outputs, and the async
 * worker. Runs on the CPU
 * backend (here and under AddressSanitizer); the CUDA side of the plan (no cudaMalloc, no host wait, capture and
 * replay) is tests/cuda/test_cuda_graph.c on a GPU machine.
 *
 * Every expected value comes from an independent route: a placed shard against glm53_weight_at on the whole
 * checkpoint tensor; a step in passes against the same step in one pass; top-k outputs against a selection made
 * from the logits rows; an async step against the synchronous step.
 */
#include "test_util.h"

#include "core/engine/model.h"
#include "core/engine/weights.h"

#include <string.h>

static const char *FIXTURE = "tests/fixtures/tiny-fp8";   /* FP8 weights with 128x128 scales, MTP-free */

static glm53_model *load(int32_t step_rows) {
    glm53_model_params p = glm53_model_default_params();
    p.n_threads = 1;
    p.step_rows = step_rows;
    glm53_model *m = NULL;
    glm53_status st = glm53_model_load(FIXTURE, &p, &m);
    CHECK(st == GLM53_OK, "load %s: %s", FIXTURE, glm53_last_error());
    return m;
}

/* ------------------------------------------------------------------------------------------------------------
 * Weights by shard spec
 */
/* Every element of the placed shard equals the element of the whole tensor it was cut from. */
static bool shard_matches(const glm53_tensor *whole, const glm53_tensor *part, glm53_shard sh) {
    int64_t rows = part->ndim > 1 ? part->shape[0] : 1, cols = part->shape[part->ndim - 1];
    int64_t r0 = sh.dim == 0 && whole->ndim > 1 ? whole->shape[0] / sh.n_ranks * sh.rank : 0;
    int64_t c0 = sh.dim == 1 || (sh.dim == 0 && whole->ndim == 1) ? whole->shape[whole->ndim - 1] / sh.n_ranks * sh.rank : 0;
    glm53_tensor w2 = *whole, p2 = *part;
    if (whole->ndim == 1) {   /* glm53_weight_at reads [rows, cols] */
        w2 = glm53_tensor_reshape(whole, 2, 1, whole->shape[0], 0);
        w2.scale = whole->scale;
        p2 = glm53_tensor_reshape(part, 2, 1, part->shape[0], 0);
        p2.scale = part->scale;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            if (glm53_weight_at(&p2, r, c) != glm53_weight_at(&w2, r0 + r, c0 + c)) return false;
    return true;
}

static void test_shards(void) {
    TEST_CASE("weights placed whole and by row / column shard") {
        glm53_model *m = load(0);
        if (!m) return;
        const char *names[] = {
            "model.language_model.layers.1.mlp.experts.0.gate_proj.weight",   /* FP8 [136, 160]: halves cut blocks */
            "model.language_model.embed_tokens.weight",                      /* BF16 / F32 2-D */
            "model.language_model.norm.weight",                              /* 1-D */
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const glm53_tensor *t;
            if (glm53_checkpoint_find(m->ckpt, names[i], &t) != GLM53_OK) {
                CHECK(false, "%s: %s", names[i], glm53_last_error());
                continue;
            }
            glm53_shard specs[] = {GLM53_SHARD_WHOLE, {0, 0, 2}, {0, 1, 2}, {1, 0, 2}, {1, 1, 2}};
            for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
                glm53_shard sh = specs[k];
                if (sh.dim >= t->ndim) continue;
                /* a slice must start on a scale block boundary (rank 0 always does) */
                bool aligned = !t->scale || sh.dim < 0 ||
                               (t->shape[sh.dim] / 2 * sh.rank) % (sh.dim == 1 ? t->block_cols : t->block_rows) == 0;
                glm53_tensor part;
                glm53_status st = glm53_weight_place(&m->ranks[0], t, sh, &part);
                CHECK(st == GLM53_OK, "%s shard %zu: %s", names[i], k, glm53_last_error());
                /* a slice starting inside a scale block is dequantized: F32, no scale, the same values */
                if (st == GLM53_OK && sh.dim >= 0 && !aligned)
                    CHECK(part.dtype == GLM53_F32 && !part.scale, "%s shard %zu: a slice inside a scale block must be "
                          "F32 (got %s)", names[i], k, glm53_dtype_name((glm53_dtype)part.dtype));
                if (st != GLM53_OK) continue;
                int64_t want = sh.dim < 0 ? t->shape[0] : t->shape[sh.dim] / 2;
                CHECK(part.shape[sh.dim < 0 ? 0 : sh.dim] == want, "%s shard %zu: size %lld, want %lld", names[i], k,
                      (long long)part.shape[sh.dim < 0 ? 0 : sh.dim], (long long)want);
                CHECK(shard_matches(t, &part, sh.dim < 0 ? (glm53_shard){0, 0, 1} : sh),
                      "%s shard %zu: values differ from the whole tensor's", names[i], k);
                CHECK(!t->scale || part.scale || !aligned, "%s shard %zu: the FP8 scale was not carried", names[i], k);
            }
        }
        /* FP8 shards that do align with the scale blocks: a [256, 384] weight in 128x128 blocks, rows over 2 ranks
         * and columns over 3, built here so that every block has its own scale. */
        static uint8_t codes[256 * 384];
        static float scales[2 * 3];
        for (int i = 0; i < 256 * 384; i++) codes[i] = (uint8_t)(test_next() % 0x7e);   /* finite E4M3 codes */
        for (int i = 0; i < 6; i++) scales[i] = 0.01f * (float)(i + 1);
        glm53_tensor scale = {.dtype = GLM53_F32, .ndim = 2, .shape = {2, 3}, .data = scales};
        glm53_tensor fp8 = {.dtype = GLM53_F8_E4M3, .ndim = 2, .shape = {256, 384}, .data = codes, .scale = &scale,
                            .block_rows = 128, .block_cols = 128, .name = "synthetic"};
        glm53_tensor_set_contiguous(&scale);
        glm53_tensor_set_contiguous(&fp8);
        glm53_shard aligned[] = {{0, 0, 2}, {0, 1, 2}, {1, 0, 3}, {1, 1, 3}, {1, 2, 3}};
        for (size_t k = 0; k < sizeof aligned / sizeof aligned[0]; k++) {
            glm53_tensor part;
            glm53_status st = glm53_weight_place(&m->ranks[0], &fp8, aligned[k], &part);
            CHECK(st == GLM53_OK, "aligned FP8 shard %zu: %s", k, glm53_last_error());
            if (st == GLM53_OK)
                CHECK(part.scale && shard_matches(&fp8, &part, aligned[k]),
                      "aligned FP8 shard %zu: values or scales differ from the whole weight's", k);
        }
        const glm53_tensor *t;
        if (glm53_checkpoint_find(m->ckpt, names[1], &t) == GLM53_OK) {
            glm53_tensor part;
            CHECK(glm53_weight_place(&m->ranks[0], t, (glm53_shard){0, 0, 7}, &part) == GLM53_ERR_INVALID_ARG,
                  "a dimension that does not split evenly is refused");
            CHECK(glm53_weight_place(&m->ranks[0], t, (glm53_shard){2, 0, 2}, &part) == GLM53_ERR_INVALID_ARG,
                  "a shard of a dimension the weight lacks is refused");
        }
        glm53_model_free(m);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Steps: passes, steady state
 */
enum { PROMPT = 40 };

/* Logits of every prompt row, one step over the whole prompt; returns them malloc'd. */
static float *prefill_all(glm53_model *m, const int32_t *ids, int32_t n) {
    int32_t V = glm53_model_config_get(m)->text.vocab_size;
    glm53_seq_params sp = glm53_seq_default_params();
    sp.max_tokens = 256;
    glm53_seq *seq = NULL;
    CHECK(glm53_seq_create(m, &sp, &seq) == GLM53_OK, "seq: %s", glm53_last_error());
    float *logits = calloc((size_t)n * V, sizeof(float));
    uint8_t want[PROMPT];
    memset(want, 1, sizeof want);
    glm53_batch b = {.n_seqs = 1, .seqs = &seq, .n_rows = &n, .tokens = ids, .want_output = want};
    glm53_step_output out = {.logits = logits, .capacity = n};
    glm53_status st = glm53_model_step(m, &b, &out);
    CHECK(st == GLM53_OK && out.n_out == n, "step: %s", glm53_last_error());
    CHECK(glm53_seq_length(seq) == n, "length %lld after the step", (long long)glm53_seq_length(seq));
    glm53_seq_free(seq);
    return logits;
}

static void test_passes(void) {
    TEST_CASE("a step in passes of 7 rows gives the logits of one pass, bit for bit") {
        int32_t ids[PROMPT];
        for (int i = 0; i < PROMPT; i++) ids[i] = (i * 37 + 5) % 200;
        glm53_model *one = load(0), *seven = load(7);
        if (!one || !seven) return;
        int32_t V = glm53_model_config_get(one)->text.vocab_size;
        float *a = prefill_all(one, ids, PROMPT), *b = prefill_all(seven, ids, PROMPT);
        CHECK(memcmp(a, b, (size_t)PROMPT * V * sizeof(float)) == 0, "passes change the logits");
        free(a);
        free(b);
        glm53_model_free(one);
        glm53_model_free(seven);
    }
}

/* The step's top-k outputs (glm53_step_output.top_k) against a selection made here from the same step's logits:
 * the k best of the valid ids, the lower id first on equal values. Asked for alone (no logits rows) and in
 * passes of 7 rows, they must name the same ids with the logits' values, bit for bit. */
static void test_top_k(void) {
    TEST_CASE("top-k outputs: the best valid ids of the logits rows, alone or beside them, in one pass or several") {
        enum { K = 5 };
        int32_t ids[PROMPT];
        for (int i = 0; i < PROMPT; i++) ids[i] = (i * 37 + 5) % 200;
        glm53_model *one = load(0), *seven = load(7);
        if (!one || !seven) return;
        int32_t V = glm53_model_config_get(one)->text.vocab_size, n_valid = V / 2, n = PROMPT;   /* half the ids are padding */
        float *logits = prefill_all(one, ids, PROMPT);
        /* the reference: K rounds of a scan for the best id not yet taken */
        int32_t want_ids[PROMPT][K];
        for (int r = 0; r < PROMPT; r++) {
            const float *x = logits + (size_t)r * V;
            for (int j = 0; j < K; j++) {
                int32_t best = -1;
                for (int32_t i = 0; i < n_valid; i++) {
                    bool taken = false;
                    for (int t = 0; t < j; t++) taken |= want_ids[r][t] == i;
                    if (!taken && (best < 0 || x[i] > x[best])) best = i;
                }
                want_ids[r][j] = best;
            }
        }
        for (int variant = 0; variant < 2; variant++) {
            glm53_model *m = variant ? seven : one;
            glm53_seq_params sp = glm53_seq_default_params();
            sp.max_tokens = 256;
            glm53_seq *seq = NULL;
            CHECK(glm53_seq_create(m, &sp, &seq) == GLM53_OK, "seq: %s", glm53_last_error());
            uint8_t want[PROMPT];
            memset(want, 1, sizeof want);
            int32_t top_ids[PROMPT * K];
            float top_logits[PROMPT * K], *row_logits = variant ? NULL : calloc((size_t)PROMPT * V, sizeof(float));
            glm53_batch b = {.n_seqs = 1, .seqs = &seq, .n_rows = &n, .tokens = ids, .want_output = want};
            glm53_step_output out = {.logits = row_logits, .capacity = PROMPT, .top_k = K, .top_n_valid = n_valid,
                                     .top_ids = top_ids, .top_logits = top_logits};
            glm53_status st = glm53_model_step(m, &b, &out);
            CHECK(st == GLM53_OK && out.n_out == PROMPT, "step: %s", glm53_last_error());
            int wrong = 0;
            for (int r = 0; st == GLM53_OK && r < PROMPT; r++)
                for (int j = 0; j < K; j++) {
                    int32_t id = top_ids[r * K + j];
                    wrong += id != want_ids[r][j] || top_logits[r * K + j] != logits[(size_t)r * V + want_ids[r][j]];
                }
            for (int r = 0; st == GLM53_OK && r < PROMPT; r++)
                wrong += top_ids[r * K] != glm53_argmax_f32(logits + (size_t)r * V, n_valid);
            CHECK(!wrong, "%s: %d top-k entries differ from the logits' selection", variant ? "passes of 7, no logits rows" : "beside the logits", wrong);
            if (row_logits) CHECK(memcmp(row_logits, logits, (size_t)PROMPT * V * sizeof(float)) == 0,
                                  "asking for top-k changed the logits rows");
            free(row_logits);
            glm53_seq_free(seq);
        }
        /* bad requests: refused before anything runs */
        glm53_seq *seq = NULL;
        glm53_seq_params sp = glm53_seq_default_params();
        CHECK(glm53_seq_create(one, &sp, &seq) == GLM53_OK, "seq: %s", glm53_last_error());
        int32_t top_ids[GLM53_MAX_TOP_K + 1], one_row = 1;
        glm53_batch b = {.n_seqs = 1, .seqs = &seq, .n_rows = &one_row, .tokens = ids};
        glm53_step_output too_many = {.capacity = 1, .top_k = GLM53_MAX_TOP_K + 1, .top_ids = top_ids};
        CHECK(glm53_model_step(one, &b, &too_many) == GLM53_ERR_OUT_OF_RANGE, "top_k past GLM53_MAX_TOP_K");
        glm53_step_output no_buffer = {.capacity = 1, .top_k = 1};
        CHECK(glm53_model_step(one, &b, &no_buffer) == GLM53_ERR_INVALID_ARG, "top_k without top_ids");
        glm53_step_output too_few_valid = {.capacity = 1, .top_k = 3, .top_n_valid = 2, .top_ids = top_ids};
        CHECK(glm53_model_step(one, &b, &too_few_valid) == GLM53_ERR_OUT_OF_RANGE, "top_k above top_n_valid");
        CHECK(glm53_seq_length(seq) == 0, "a refused step changed the sequence");
        glm53_seq_free(seq);
        free(logits);
        glm53_model_free(one);
        glm53_model_free(seven);
    }
}

static void test_steady_state(void) {
    TEST_CASE("steady-state decode reuses the plan: no growth, no new staging, no new headers") {
        glm53_model *m = load(0);
        if (!m) return;
        int32_t V = glm53_model_config_get(m)->text.vocab_size;
        glm53_seq *seq = NULL;
        glm53_seq_params sp = glm53_seq_default_params();
        sp.max_tokens = 128;
        CHECK(glm53_seq_create(m, &sp, &seq) == GLM53_OK, "seq: %s", glm53_last_error());
        float *logits = malloc((size_t)V * sizeof(float));
        int32_t tok[16], n = 16;
        for (int i = 0; i < 16; i++) tok[i] = i + 3;
        glm53_batch b = {.n_seqs = 1, .seqs = &seq, .n_rows = &n, .tokens = tok};
        glm53_step_output out = {.logits = logits, .capacity = 1};
        CHECK(glm53_model_step(m, &b, &out) == GLM53_OK, "prefill: %s", glm53_last_error());
        n = 1;
        for (int i = 0; i < 3; i++) {   /* warm-up: the first decode steps may still size the plan */
            tok[0] = glm53_argmax_f32(logits, V);
            CHECK(glm53_model_step(m, &b, &out) == GLM53_OK, "decode: %s", glm53_last_error());
        }
        uint64_t gen = glm53_plan_generation(&m->ranks[0].plan);
        int64_t chunks = m->ranks[0].plan.n_chunks;
        size_t capacity = m->ranks[0].plan.ws.capacity;
        void *block = m->ranks[0].plan.ws.block.data;
        for (int i = 0; i < 20; i++) {
            tok[0] = glm53_argmax_f32(logits, V);
            CHECK(glm53_model_step(m, &b, &out) == GLM53_OK, "decode: %s", glm53_last_error());
            CHECK(m->ranks[0].plan.ws.n_overflow == 0 && !m->ranks[0].plan.ws.grew, "decode step %d overflowed the workspace", i);
        }
        CHECK(glm53_plan_generation(&m->ranks[0].plan) == gen && m->ranks[0].plan.ws.block.data == block &&
                  m->ranks[0].plan.ws.capacity == capacity && m->ranks[0].plan.n_chunks == chunks,
              "the plan moved during steady-state decode");
        glm53_seq_free(seq);
        free(logits);
        glm53_model_free(m);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * The async worker
 */
static void test_worker(void) {
    TEST_CASE("async steps: same logits as synchronous ones, errors in the completion, freed sequences refused") {
        glm53_model *m = load(0);
        if (!m) return;
        int32_t V = glm53_model_config_get(m)->text.vocab_size;
        int fd = glm53_model_completion_fd(m);
        CHECK(fd >= 0, "completion fd: %s", glm53_last_error());
        int32_t ids[PROMPT];
        for (int i = 0; i < PROMPT; i++) ids[i] = (i * 11 + 1) % 200;
        float *sync_logits = prefill_all(m, ids, PROMPT);

        glm53_seq *seq = NULL, *doomed = NULL;
        glm53_seq_params sp = glm53_seq_default_params();
        sp.max_tokens = 256;
        CHECK(glm53_seq_create(m, &sp, &seq) == GLM53_OK && glm53_seq_create(m, &sp, &doomed) == GLM53_OK, "seqs");
        float *logits = calloc((size_t)PROMPT * V, sizeof(float)), *other = calloc((size_t)V, sizeof(float));
        uint8_t want[PROMPT];
        memset(want, 1, sizeof want);
        int32_t n = PROMPT, one = 1, bad_token = V + 3;
        glm53_batch b = {.n_seqs = 1, .seqs = &seq, .n_rows = &n, .tokens = ids, .want_output = want};
        glm53_batch bad = {.n_seqs = 1, .seqs = &doomed, .n_rows = &one, .tokens = &bad_token};
        glm53_batch gone = {.n_seqs = 1, .seqs = &doomed, .n_rows = &one, .tokens = ids};
        glm53_step_output out = {.logits = logits, .capacity = PROMPT}, out2 = {.logits = other, .capacity = 1};
        glm53_step_request r1 = {.mtp_layer = -1, .batch = &b, .out = &out, .tag = 11};
        glm53_step_request r2 = {.mtp_layer = -1, .batch = &bad, .out = &out2, .tag = 12};
        glm53_step_request r3 = {.mtp_layer = -1, .batch = &gone, .out = &out2, .tag = 13};
        CHECK(glm53_model_submit(m, &r1) == GLM53_OK, "submit: %s", glm53_last_error());
        CHECK(glm53_model_submit(m, &r2) == GLM53_OK, "submit: %s", glm53_last_error());
        CHECK(glm53_model_submit(m, &r3) == GLM53_OK, "submit: %s", glm53_last_error());
        glm53_seq_free(doomed);   /* still queued for r3 (and maybe r2): held until those steps end */

        glm53_step_completion c;
        CHECK(glm53_model_wait(m, &c) == GLM53_OK && c.tag == 11 && c.status == GLM53_OK && c.n_out == PROMPT,
              "first completion: tag %llu status %d (%s)", (unsigned long long)c.tag, c.status, c.error);
        CHECK(memcmp(logits, sync_logits, (size_t)PROMPT * V * sizeof(float)) == 0, "async logits differ");
        CHECK(glm53_model_wait(m, &c) == GLM53_OK && c.tag == 12 && c.status != GLM53_OK, "second completion");
        /* r2 failed either on the token (the sequence still live) or because it was freed: both are clean */
        CHECK(strstr(c.error, "outside [0,") || strstr(c.error, "not a live sequence"), "error: %s", c.error);
        CHECK(glm53_model_wait(m, &c) == GLM53_OK && c.tag == 13 && c.status == GLM53_ERR_INVALID_ARG &&
                  strstr(c.error, "not a live sequence"),
              "a sequence freed while queued fails its step: %s", c.error);
        CHECK(glm53_model_poll(m, &c) == 0, "no completion left");
        CHECK(glm53_model_wait(m, &c) == GLM53_ERR_INVALID_ARG, "wait with nothing queued fails");
        CHECK(glm53_model_submit(m, &r3) == GLM53_ERR_INVALID_ARG && strstr(glm53_last_error(), "not a live"),
              "a freed sequence is refused at submission: %s", glm53_last_error());

        /* Freed with steps queued: they are cancelled, the running one finishes, nothing leaks. */
        CHECK(glm53_model_submit(m, &r1) == GLM53_OK && glm53_model_submit(m, &r1) == GLM53_OK, "resubmit");
        glm53_seq_free(seq);
        glm53_model_free(m);
        free(logits);
        free(other);
        free(sync_logits);
    }
}

int main(void) {
    test_shards();
    test_passes();
    test_top_k();
    test_steady_state();
    test_worker();
    return test_finish("test_engine");
}
