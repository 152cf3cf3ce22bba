/*
 * test_sampling.c - core/sampling.c against a straightforward double-precision reference of the same pipeline
 * (bias, penalties, temperature, min-p, top-k, top-p, renormalise; definitions in core/glm53.h), on random
 * logits with odd vocabulary sizes; the RNG's known answers and seeding; draws against their distributions;
 * edge cases and bad input; draws from a row's best logits (sample_top) against draws from the whole row.
 */
#include "core/glm53.h"
#include "test_util.h"

#include <stdbool.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------------------
 * Reference: the pipeline in double, with a full sort and no shortcuts.
 */
typedef struct {
    const float   *bias;        /* [V] or NULL */
    const int32_t *prompt;      /* prompt ids */
    int            n_prompt;
    const int32_t *output;      /* accepted output ids */
    int            n_output;
} ref_history;

static const double *ref_sort_key;
static int ref_cmp(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    if (ref_sort_key[a] != ref_sort_key[b]) return ref_sort_key[a] > ref_sort_key[b] ? -1 : 1;
    return a - b;
}

/* The filtered distribution into out[V]; also the processed logits (steps 1-4) into xout[V] if given. */
static void ref_probs(const float *logits, int V, const glm53_sampler_params *p, const ref_history *h, double *out,
                      double *xout) {
    double *x = malloc(sizeof(double) * V), *w = malloc(sizeof(double) * V);
    int *count = calloc(V, sizeof(int)), *in_prompt = calloc(V, sizeof(int)), *order = malloc(sizeof(int) * V);
    for (int i = 0; h && i < h->n_prompt; i++) in_prompt[h->prompt[i]] = 1;
    for (int i = 0; h && i < h->n_output; i++) count[h->output[i]]++;
    for (int i = 0; i < V; i++) {
        x[i] = (double)logits[i] + (h && h->bias ? h->bias[i] : 0.0);
        if (count[i] > 0 || in_prompt[i])
            x[i] = x[i] > 0 ? x[i] / p->repetition_penalty : x[i] * p->repetition_penalty;
        x[i] -= p->frequency_penalty * count[i] + (count[i] > 0 ? p->presence_penalty : 0.0);
        out[i] = 0.0;
    }
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    if (p->temperature < 1e-5) {
        out[best] = 1.0;
        if (xout) memcpy(xout, x, sizeof(double) * V);
    } else {
        double m = x[best] / p->temperature;
        int n = 0;
        for (int i = 0; i < V; i++) {
            x[i] /= p->temperature;
            w[i] = exp(x[i] - m);
            if (w[i] > 0 && w[i] >= p->min_p) order[n++] = i;
        }
        ref_sort_key = x;
        qsort(order, n, sizeof(int), ref_cmp);
        if (p->top_k > 0 && p->top_k < n) n = p->top_k;
        double total = 0;
        for (int i = 0; i < n; i++) total += w[order[i]];
        int keep = n;
        if (p->top_p < 1) {
            double before = 0;
            keep = 0;
            while (keep < n && (keep == 0 || before < p->top_p * total)) before += w[order[keep++]];
            total = before;
        }
        for (int i = 0; i < keep; i++) out[order[i]] = w[order[i]] / total;
        if (xout) memcpy(xout, x, sizeof(double) * V);
    }
    free(x); free(w); free(count); free(in_prompt); free(order);
}

static void random_logits(float *x, int V, float scale, float p_neg_inf) {
    for (int i = 0; i < V; i++) x[i] = test_uniform() < p_neg_inf ? -INFINITY : scale * test_normal();
}

/* Largest |got - ref| over the vocabulary; +inf if the kept sets differ (one side zero, the other not). */
static double probs_diff(const float *got, const double *ref, int V) {
    double worst = 0;
    for (int i = 0; i < V; i++) {
        if ((got[i] > 0) != (ref[i] > 0)) return INFINITY;
        double d = fabs(got[i] - ref[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

static glm53_sampler *make(int V, glm53_sampler_params p) {
    glm53_sampler *s = NULL;
    glm53_status st = glm53_sampler_create(V, &p, &s);
    if (st != GLM53_OK) fprintf(stderr, "sampler_create: %s\n", glm53_last_error());
    return s;
}

/* ------------------------------------------------------------------------------------------------------------
 * Filters against the reference
 */
typedef struct {
    const char *name;
    float temperature, top_p, min_p, repetition, presence, frequency;
    int top_k;
    bool bias, history;
} filter_case;

static void test_filters(void) {
    const filter_case cases[] = {
        {"temperature 1", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false, false},
        {"temperature 0.7", 0.7f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false, false},
        {"temperature 2.5", 2.5f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false, false},
        {"top_k 1", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1, false, false},
        {"top_k 5", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 5, false, false},
        {"top_k 40", 0.9f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 40, false, false},
        {"top_p 0.5", 1.0f, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false, false},
        {"top_p 0.95", 1.3f, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false, false},
        {"min_p 0.05", 1.0f, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 0, false, false},
        {"min_p 0.3", 0.8f, 1.0f, 0.3f, 1.0f, 0.0f, 0.0f, 0, false, false},
        {"repetition 1.3", 1.0f, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f, 0, false, true},
        {"repetition 0.8", 1.0f, 1.0f, 0.0f, 0.8f, 0.0f, 0.0f, 0, false, true},
        {"presence 0.7", 1.0f, 1.0f, 0.0f, 1.0f, 0.7f, 0.0f, 0, false, true},
        {"frequency 0.4", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.4f, 0, false, true},
        {"logit bias", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, true, false},
        {"greedy with penalties and bias", 0.0f, 1.0f, 0.0f, 1.2f, 0.5f, 0.3f, 0, true, true},
        {"all together", 0.8f, 0.9f, 0.02f, 1.1f, 0.3f, 0.2f, 20, true, true},
        {"top_k and top_p", 0.8f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 20, false, false},
    };
    const int vocabs[] = {1, 3, 7, 257, 1001, 4099, 50021};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const filter_case *fc = &cases[c];
        TEST_CASE(fc->name) {
            for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
                int V = vocabs[v];
                glm53_sampler_params p = glm53_sampler_default_params();
                p.temperature = fc->temperature;
                p.top_k = fc->top_k;
                p.top_p = fc->top_p;
                p.min_p = fc->min_p;
                p.repetition_penalty = fc->repetition;
                p.presence_penalty = fc->presence;
                p.frequency_penalty = fc->frequency;
                glm53_sampler *s = make(V, p);
                CHECK(s != NULL, "create V=%d", V);
                if (!s) continue;
                float *logits = malloc(sizeof(float) * V), *probs = malloc(sizeof(float) * V);
                float *bias = calloc(V, sizeof(float));
                double *ref = malloc(sizeof(double) * V), *ref_x = malloc(sizeof(double) * V);
                int32_t prompt[16], output[24], bias_ids[8];
                float bias_vals[8];
                ref_history h = {0};
                if (fc->history) {
                    for (int i = 0; i < 16; i++) prompt[i] = (int32_t)(test_next() % V);
                    for (int i = 0; i < 24; i++) output[i] = (int32_t)(test_next() % (V < 12 ? V : 12));   /* repeats */
                    CHECK(glm53_sampler_add_prompt(s, prompt, 16) == GLM53_OK, "add_prompt");
                    for (int i = 0; i < 24; i++) CHECK(glm53_sampler_accept(s, output[i]) == GLM53_OK, "accept");
                    h.prompt = prompt; h.n_prompt = 16; h.output = output; h.n_output = 24;
                }
                if (fc->bias) {
                    for (int i = 0; i < 8; i++) {
                        bias_ids[i] = (int32_t)(test_next() % V);
                        bias_vals[i] = i == 7 ? -INFINITY : 4.0f * test_normal();
                    }
                    CHECK(glm53_sampler_set_logit_bias(s, bias_ids, bias_vals, 8) == GLM53_OK, "bias");
                    for (int i = 0; i < 8; i++) bias[bias_ids[i]] = bias_vals[i];   /* the last write wins */
                    h.bias = bias;
                }
                for (int trial = 0; trial < 6; trial++) {
                    random_logits(logits, V, trial % 2 ? 4.0f : 1.5f, trial == 5 ? 0.3f : 0.0f);
                    if (trial == 5) logits[V / 2] = 0.0f;   /* at least one finite */
                    if (fc->bias && V > 1) {
                        /* Keep one token finite after the -inf bias. */
                        bool all_banned = true;
                        for (int i = 0; i < V; i++) all_banned &= logits[i] + bias[i] == -INFINITY;
                        if (all_banned) continue;
                    }
                    glm53_status st = glm53_sampler_probs(s, logits, probs);
                    if (V == 1 && fc->bias && bias[0] == -INFINITY) {
                        CHECK(st == GLM53_ERR_INVALID_ARG, "V=1 with its only token banned must fail");
                        continue;
                    }
                    CHECK(st == GLM53_OK, "probs V=%d: %s", V, glm53_last_error());
                    ref_probs(logits, V, &p, &h, ref, ref_x);
                    double d = probs_diff(probs, ref, V);
                    CHECK(d < 2e-6, "V=%d trial %d: max |p - ref| = %g", V, trial, d);
                    double sum = 0;
                    for (int i = 0; i < V; i++) sum += probs[i];
                    CHECK(fabs(sum - 1) < 1e-5, "V=%d: probabilities sum to %g", V, sum);

                    /* Candidates: the most likely first, renormalised over the ones returned. */
                    int32_t ids[64], n = 0;
                    float cl[64], cp[64];
                    int max_n = trial % 3 == 0 ? 64 : 5;
                    CHECK(glm53_sampler_candidates(s, logits, max_n, ids, cl, cp, &n) == GLM53_OK, "candidates");
                    int kept = 0;
                    for (int i = 0; i < V; i++) kept += ref[i] > 0;
                    CHECK(n == (kept < max_n ? kept : max_n), "V=%d: %d candidates, expected min(%d, %d)", V, n, kept,
                          max_n);
                    double cand_total = 0;
                    for (int i = 0; i < n; i++) cand_total += ref[ids[i]];
                    for (int i = 0; i < n; i++) {
                        CHECK(i == 0 || ref[ids[i]] <= ref[ids[i - 1]], "candidates not in order at %d", i);
                        CHECK(fabs(cp[i] - ref[ids[i]] / cand_total) < 2e-6, "candidate %d prob %g vs %g", i, cp[i],
                              ref[ids[i]] / cand_total);
                        CHECK(fabs(cl[i] - ref_x[ids[i]]) <= 1e-5 * (1 + fabs(ref_x[ids[i]])),
                              "candidate %d logit %g vs %g", i, cl[i], ref_x[ids[i]]);
                    }
                    /* The candidate set is the top of the reference ranking. */
                    for (int i = 0; i < V && n < kept; i++)
                        if (ref[i] > ref[ids[n - 1]]) {
                            bool listed = false;
                            for (int j = 0; j < n; j++) listed |= ids[j] == i;
                            CHECK(listed, "token %d (p %g) is more likely than the last candidate but missing", i,
                                  ref[i]);
                        }
                }
                glm53_sampler_free(s);
                free(logits); free(probs); free(bias); free(ref); free(ref_x);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * RNG and draws
 */
static void test_rng(void) {
    TEST_CASE("known answers of the seeded stream (xoshiro256** via splitmix64)") {
        const double want0[3] = {0.6012629994179048, 0.7477740925472398, 0.10301998939503632};
        const double want42[3] = {0.08386297105988216, 0.3789802506626686, 0.6800434110281394};
        glm53_sampler_params p = glm53_sampler_default_params();
        glm53_sampler *a = make(5, p);
        p.seed = 42;
        glm53_sampler *b = make(5, p);
        for (int i = 0; i < 3; i++) {
            double u, v;
            glm53_sampler_uniform(a, &u);
            glm53_sampler_uniform(b, &v);
            CHECK(u == want0[i], "seed 0 draw %d: %.17g", i, u);
            CHECK(v == want42[i], "seed 42 draw %d: %.17g", i, v);
        }
        /* reset restarts the stream. */
        glm53_sampler_reset(b);
        double v;
        glm53_sampler_uniform(b, &v);
        CHECK(v == want42[0], "after reset: %.17g", v);
        glm53_sampler_free(a);
        glm53_sampler_free(b);
    }

    TEST_CASE("the same seed gives the same tokens; another seed does not") {
        int V = 101;
        float *logits = malloc(sizeof(float) * V);
        glm53_sampler_params p = glm53_sampler_default_params();
        p.temperature = 1.0f;
        p.top_p = 0.95f;
        p.seed = 7;
        glm53_sampler *a = make(V, p), *b = make(V, p);
        p.seed = 8;
        glm53_sampler *c = make(V, p);
        int same = 1, differ = 0;
        for (int i = 0; i < 200; i++) {
            random_logits(logits, V, 1.0f, 0.0f);
            int32_t ta, tb, tc;
            glm53_sampler_sample(a, logits, &ta);
            glm53_sampler_sample(b, logits, &tb);
            glm53_sampler_sample(c, logits, &tc);
            same &= ta == tb;
            differ += ta != tc;
        }
        CHECK(same, "two samplers with seed 7 disagree");
        CHECK(differ > 100, "seeds 7 and 8 agree on %d of 200 draws", 200 - differ);
        glm53_sampler_free(a); glm53_sampler_free(b); glm53_sampler_free(c);
        free(logits);
    }

    TEST_CASE("draw frequencies follow the distribution (sample, sample_probs, sample_residual)") {
        int V = 13, N = 40000;
        float logits[13], p[13], q[13], r[13];
        random_logits(logits, V, 1.0f, 0.0f);
        glm53_sampler_params prm = glm53_sampler_default_params();
        prm.temperature = 0.9f;
        prm.top_k = 9;
        prm.seed = 3;
        glm53_sampler *s = make(V, prm);
        glm53_sampler_probs(s, logits, p);
        for (int i = 0; i < V; i++) q[i] = (float)(i % 3) / 12.0f;
        double rt = 0;
        for (int i = 0; i < V; i++) { r[i] = p[i] > q[i] ? p[i] - q[i] : 0; rt += r[i]; }
        for (int i = 0; i < V; i++) r[i] /= (float)rt;
        const float *want[3] = {p, p, r};
        const char *name[3] = {"sample", "sample_probs", "sample_residual"};
        for (int k = 0; k < 3; k++) {
            int count[13] = {0};
            for (int n = 0; n < N; n++) {
                int32_t t = -1;
                if (k == 0) glm53_sampler_sample(s, logits, &t);
                else if (k == 1) glm53_sampler_sample_probs(s, p, &t);
                else glm53_sampler_sample_residual(s, p, q, &t);
                if (t >= 0 && t < V) count[t]++;
            }
            double chi2 = 0;
            int cells = 0;
            for (int i = 0; i < V; i++) {
                double e = want[k][i] * N;
                if (e == 0) { CHECK(count[i] == 0, "%s: token %d has p 0 but was drawn", name[k], i); continue; }
                chi2 += (count[i] - e) * (count[i] - e) / e;
                cells++;
            }
            /* chi-square with cells - 1 <= 12 degrees of freedom: 40 is far beyond the 0.9999 quantile (~34). */
            CHECK(chi2 < 40, "%s: chi-square %g over %d cells", name[k], chi2, cells);
        }
        glm53_sampler_free(s);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Edge cases and bad input
 */
static void test_edges(void) {
    int V = 31;
    float logits[31], probs[31];
    TEST_CASE("n_valid: padded vocabulary ids are never produced, greedy or sampled, whatever their logits") {
        glm53_sampler_params p = glm53_sampler_default_params();
        p.n_valid = 24;   /* ids 24..30: the embedding rows past a 24-token tokenizer */
        glm53_sampler *greedy = make(V, p);
        p.temperature = 1.0f;
        glm53_sampler *sampled = make(V, p);
        random_logits(logits, V, 1.0f, 0.0f);
        logits[27] = 50.0f;      /* the best logit by far, on a padded id */
        logits[30] = NAN;        /* a padded row's logit is not even read */
        int32_t t = -1;
        CHECK(glm53_sampler_sample(greedy, logits, &t) == GLM53_OK && t >= 0 && t < 24, "greedy picked %d", t);
        bool inside = true;
        for (int i = 0; i < 2000 && inside; i++)
            inside = glm53_sampler_sample(sampled, logits, &t) == GLM53_OK && t >= 0 && t < 24;
        CHECK(inside, "a draw returned %d", t);
        CHECK(glm53_sampler_probs(sampled, logits, probs) == GLM53_OK, "probs: %s", glm53_last_error());
        double padded = 0;
        for (int i = 24; i < V; i++) padded += probs[i];
        CHECK(padded == 0.0, "padded ids have probability %g", padded);
        glm53_sampler_free(greedy);
        glm53_sampler_free(sampled);
    }
    TEST_CASE("greedy is the first maximum of a scan: ties, -0 and +0, -inf, every size around the vector width") {
        /* The greedy pass runs four logits at a time; its answer must be the one-at-a-time scan's. */
        static const float values[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -INFINITY};
        int bad = 0;
        for (int n = 1; n <= 19; n++)
            for (int rep = 0; rep < 300; rep++) {
                float row[19];
                for (int i = 0; i < n; i++) row[i] = values[test_next() % 6];
                if (rep % 3 == 0) row[test_next() % (uint64_t)n] = 3.0f;   /* a single maximum somewhere */
                int32_t want = -1;
                for (int i = 0; i < n; i++)
                    if (row[i] != -INFINITY && (want < 0 || row[i] > row[want])) want = i;
                glm53_sampler_params gp = glm53_sampler_default_params();
                gp.temperature = 0.0f;
                glm53_sampler *g = make(n, gp);
                int32_t t = -1;
                glm53_status st = glm53_sampler_sample(g, row, &t);
                if (want < 0) bad += st == GLM53_OK;   /* all -inf: an error */
                else bad += st != GLM53_OK || t != want;
                glm53_sampler_free(g);
            }
        CHECK(bad == 0, "%d rows where greedy is not the scan's first maximum", bad);
        glm53_sampler_params gp = glm53_sampler_default_params();
        gp.temperature = 0.0f;
        for (int n = 5; n <= 11; n++)
            for (int at = 0; at < n; at++) {   /* a NaN or +inf anywhere, inside the vector part or after it */
                float row[11] = {0};
                row[at] = at % 2 ? NAN : INFINITY;
                glm53_sampler *g = make(n, gp);
                int32_t t;
                CHECK(glm53_sampler_sample(g, row, &t) == GLM53_ERR_INVALID_ARG, "n %d: bad logit at %d accepted", n,
                      at);
                glm53_sampler_free(g);
            }
    }
    TEST_CASE("temperature 0 is greedy: argmax, lowest id on ties, no RNG draw") {
        glm53_sampler_params p = glm53_sampler_default_params();
        glm53_sampler *s = make(V, p), *fresh = make(V, p);
        random_logits(logits, V, 1.0f, 0.0f);
        logits[4] = logits[9] = 10.0f;
        int32_t t;
        CHECK(glm53_sampler_sample(s, logits, &t) == GLM53_OK && t == 4, "greedy picked %d", t);
        double u, v;
        glm53_sampler_uniform(s, &u);
        glm53_sampler_uniform(fresh, &v);
        CHECK(u == v, "greedy sampling advanced the RNG");
        glm53_sampler_probs(s, logits, probs);
        CHECK(probs[4] == 1.0f, "greedy distribution is not one-hot at 4");
        glm53_sampler_free(s);
        glm53_sampler_free(fresh);
        /* Below 1e-5 is greedy too; just above it, huge logits still give a finite distribution. */
        p.temperature = 1e-7f;
        s = make(V, p);
        CHECK(glm53_sampler_sample(s, logits, &t) == GLM53_OK && t == 4, "temperature 1e-7 picked %d", t);
        glm53_sampler_free(s);
        p.temperature = 2e-5f;
        s = make(V, p);
        for (int i = 0; i < V; i++) logits[i] = 3e4f * (float)(i % 5);
        CHECK(glm53_sampler_probs(s, logits, probs) == GLM53_OK, "tiny temperature failed");
        double sum = 0;
        for (int i = 0; i < V; i++) sum += probs[i];
        CHECK(fabs(sum - 1) < 1e-6 && probs[4] > 0.1f, "tiny temperature: sum %g, p[4] %g", sum, probs[4]);
        glm53_sampler_free(s);
    }
    TEST_CASE("top_p 1 and top_k >= vocab filter nothing") {
        glm53_sampler_params p = glm53_sampler_default_params();
        p.temperature = 1.0f;
        glm53_sampler *plain = make(V, p);
        p.top_p = 1.0f;
        p.top_k = V + 5;
        glm53_sampler *s = make(V, p);
        float plain_probs[31];
        random_logits(logits, V, 3.0f, 0.0f);
        glm53_sampler_probs(plain, logits, plain_probs);
        glm53_sampler_probs(s, logits, probs);
        int nonzero = 0;
        for (int i = 0; i < V; i++) nonzero += probs[i] > 0 && probs[i] == plain_probs[i];
        CHECK(nonzero == V, "%d of %d tokens kept unchanged", nonzero, V);
        glm53_sampler_free(plain);
        glm53_sampler_free(s);
    }
    TEST_CASE("all -inf but one: that one, whatever the filters") {
        glm53_sampler_params p = glm53_sampler_default_params();
        p.temperature = 0.7f;
        p.top_p = 0.5f;
        p.min_p = 0.1f;
        glm53_sampler *s = make(V, p);
        for (int i = 0; i < V; i++) logits[i] = -INFINITY;
        logits[17] = -3.0f;
        int32_t t = -1, ids[4], n = 0;
        float cl[4], cp[4];
        CHECK(glm53_sampler_sample(s, logits, &t) == GLM53_OK && t == 17, "picked %d", t);
        CHECK(glm53_sampler_probs(s, logits, probs) == GLM53_OK && probs[17] == 1.0f, "p[17] = %g", probs[17]);
        CHECK(glm53_sampler_candidates(s, logits, 4, ids, cl, cp, &n) == GLM53_OK && n == 1 && ids[0] == 17 &&
              cp[0] == 1.0f, "candidates: n %d", n);
        logits[17] = -INFINITY;
        CHECK(glm53_sampler_sample(s, logits, &t) == GLM53_ERR_INVALID_ARG, "all -inf must fail");
        glm53_sampler_free(s);
    }
    TEST_CASE("NaN and +inf logits are refused with an error naming the token") {
        glm53_sampler_params p = glm53_sampler_default_params();
        p.temperature = 1.0f;
        glm53_sampler *s = make(V, p);
        random_logits(logits, V, 1.0f, 0.0f);
        logits[12] = NAN;
        int32_t t;
        CHECK(glm53_sampler_sample(s, logits, &t) == GLM53_ERR_INVALID_ARG, "NaN accepted");
        CHECK(strstr(glm53_last_error(), "token 12") != NULL, "message: %s", glm53_last_error());
        CHECK(glm53_sampler_probs(s, logits, probs) == GLM53_ERR_INVALID_ARG, "NaN accepted by probs");
        logits[12] = INFINITY;
        CHECK(glm53_sampler_sample(s, logits, &t) == GLM53_ERR_INVALID_ARG, "+inf accepted");
        p.temperature = 0.0f;   /* greedy checks too */
        glm53_sampler_set_params(s, &p);
        logits[12] = NAN;
        CHECK(glm53_sampler_sample(s, logits, &t) == GLM53_ERR_INVALID_ARG, "NaN accepted when greedy");
        glm53_sampler_free(s);
    }
    TEST_CASE("bad parameters and ids are refused") {
        glm53_sampler *s = NULL;
        glm53_sampler_params p = glm53_sampler_default_params();
        p.top_p = 0.0f;
        CHECK(glm53_sampler_create(V, &p, &s) == GLM53_ERR_INVALID_ARG && s == NULL, "top_p 0");
        p = glm53_sampler_default_params();
        p.min_p = 1.5f;
        CHECK(glm53_sampler_create(V, &p, &s) == GLM53_ERR_INVALID_ARG, "min_p 1.5");
        p = glm53_sampler_default_params();
        p.repetition_penalty = 0.0f;
        CHECK(glm53_sampler_create(V, &p, &s) == GLM53_ERR_INVALID_ARG, "repetition 0");
        p = glm53_sampler_default_params();
        p.temperature = NAN;
        CHECK(glm53_sampler_create(V, &p, &s) == GLM53_ERR_INVALID_ARG, "temperature NaN");
        CHECK(glm53_sampler_create(0, NULL, &s) == GLM53_ERR_INVALID_ARG, "vocab 0");
        s = make(V, glm53_sampler_default_params());
        int32_t bad = V;
        float b = 1.0f;
        CHECK(glm53_sampler_accept(s, bad) == GLM53_ERR_OUT_OF_RANGE, "accept out of range");
        CHECK(glm53_sampler_add_prompt(s, &bad, 1) == GLM53_ERR_OUT_OF_RANGE, "prompt out of range");
        CHECK(glm53_sampler_set_logit_bias(s, &bad, &b, 1) == GLM53_ERR_OUT_OF_RANGE, "bias out of range");
        CHECK(glm53_sampler_rewind(s, 1) == GLM53_ERR_OUT_OF_RANGE, "rewind past the start");
        glm53_sampler_free(s);
    }
    TEST_CASE("accept and rewind restore the penalties exactly") {
        glm53_sampler_params p = glm53_sampler_default_params();
        p.temperature = 1.0f;
        p.repetition_penalty = 1.5f;
        p.frequency_penalty = 0.5f;
        p.presence_penalty = 0.25f;
        glm53_sampler *s = make(V, p);
        float before[31], after[31];
        random_logits(logits, V, 2.0f, 0.0f);
        glm53_sampler_accept(s, 3);
        glm53_sampler_probs(s, logits, before);
        for (int i = 0; i < 5; i++) glm53_sampler_accept(s, (int32_t)(i * 7 % V));
        CHECK(glm53_sampler_n_accepted(s) == 6, "n_accepted %lld", (long long)glm53_sampler_n_accepted(s));
        glm53_sampler_rewind(s, 5);
        glm53_sampler_probs(s, logits, after);
        CHECK(memcmp(before, after, sizeof before) == 0, "rewind did not restore the distribution");
        glm53_sampler_free(s);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Draws from a row's best logits (sample_top) against draws from the whole row (sample)
 */
static const float *top_row;
static int top_cmp(const void *pa, const void *pb) {   /* logit desc, id asc: a step's top-k order */
    int a = *(const int *)pa, b = *(const int *)pb;
    if (top_row[a] != top_row[b]) return top_row[a] > top_row[b] ? -1 : 1;
    return a - b;
}

static void test_top(void) {
    enum { V = 3001, VALID = 2990, MAX_N = 64, DRAWS = 16 };
    float *row = malloc(sizeof(float) * V), best_logits[MAX_N];
    int *order = malloc(sizeof(int) * VALID);
    int32_t best_ids[MAX_N];
    TEST_CASE("sample_top from the row's best logits draws sample's tokens: ties at the boundary, bans, padding") {
        const float temps[] = {0.0f, 0.35f, 1.0f, 3.0f}, top_ps[] = {1.0f, 0.9f, 0.3f}, min_ps[] = {0.0f, 0.02f, 0.5f};
        const int32_t top_ks[] = {1, 2, 7, 31, 63};
        int rows = 0, mismatches = 0, draws = 0;
        for (int kind = 0; kind < 3; kind++) {
            /* 0: N(0, 3); 1: 6 levels (long runs of equal logits across the top-k boundary); 2: N(0, 1) with 95%
             * of the tokens banned (-inf), so fewer than top_k may be left */
            for (int i = 0; i < V; i++)
                row[i] = kind == 1 ? (float)(int)(6 * test_uniform()) : test_uniform() < (kind == 2 ? 0.95f : 0.0f)
                                                                             ? -INFINITY
                                                                             : (kind ? 1.0f : 3.0f) * test_normal();
            for (int i = 0; i < VALID; i++) order[i] = i;
            top_row = row;
            qsort(order, VALID, sizeof(int), top_cmp);
            for (int i = 0; i < MAX_N; i++) best_ids[i] = order[i], best_logits[i] = row[order[i]];
            rows++;
            for (size_t a = 0; a < sizeof temps / sizeof temps[0]; a++)
                for (size_t b = 0; b < sizeof top_ks / sizeof top_ks[0]; b++)
                    for (size_t c = 0; c < sizeof top_ps / sizeof top_ps[0]; c++)
                        for (size_t d = 0; d < sizeof min_ps / sizeof min_ps[0]; d++) {
                            glm53_sampler_params p = glm53_sampler_default_params();
                            p.temperature = temps[a], p.top_k = top_ks[b], p.top_p = top_ps[c], p.min_p = min_ps[d];
                            p.n_valid = VALID;
                            p.seed = 1000 + a * 100 + b * 10 + c + d;
                            glm53_sampler *whole = make(V, p), *top = make(V, p);
                            int32_t need = glm53_sampler_top_needed(top);
                            CHECK(need == (temps[a] == 0.0f ? 1 : top_ks[b] + 1), "top_needed %d", need);
                            /* n from what the settings need up to 64: the extra candidates change nothing */
                            int32_t n = need + (int32_t)((a + b + c + d) % 3) * (MAX_N - need) / 2;
                            for (int t = 0; t < DRAWS; t++) {
                                int32_t x = -1, y = -2;
                                CHECK(glm53_sampler_sample(whole, row, &x) == GLM53_OK, "sample: %s",
                                      glm53_last_error());
                                CHECK(glm53_sampler_sample_top(top, best_ids, best_logits, n, &y) == GLM53_OK,
                                      "sample_top: %s", glm53_last_error());
                                mismatches += x != y;
                                draws++;
                            }
                            glm53_sampler_free(whole);
                            glm53_sampler_free(top);
                        }
        }
        CHECK(mismatches == 0, "%d of %d draws over %d rows differ between the row and its best logits", mismatches,
              draws, rows);
    }
    TEST_CASE("sample_top refuses what it cannot answer exactly, and bad candidates") {
        for (int i = 0; i < V; i++) row[i] = test_normal();
        for (int i = 0; i < VALID; i++) order[i] = i;
        top_row = row;
        qsort(order, VALID, sizeof(int), top_cmp);
        for (int i = 0; i < MAX_N; i++) best_ids[i] = order[i], best_logits[i] = row[order[i]];
        glm53_sampler_params p = glm53_sampler_default_params();
        p.temperature = 0.8f, p.top_k = 10, p.n_valid = VALID;
        glm53_sampler *s = make(V, p);
        int32_t t = 0;
        CHECK(glm53_sampler_sample_top(s, best_ids, best_logits, 10, &t) == GLM53_ERR_INVALID_ARG,
              "10 candidates for top_k 10 accepted (11 are needed)");
        CHECK(glm53_sampler_sample_top(s, best_ids + 1, best_logits + 1, 11, &t) == GLM53_OK, "shifted: %s",
              glm53_last_error());   /* a valid order, though not the row's best: the caller's contract */
        int32_t swapped_ids[MAX_N];
        float swapped[MAX_N];
        memcpy(swapped_ids, best_ids, sizeof swapped_ids), memcpy(swapped, best_logits, sizeof swapped);
        swapped_ids[0] = best_ids[1], swapped_ids[1] = best_ids[0];
        swapped[0] = best_logits[1], swapped[1] = best_logits[0];
        CHECK(glm53_sampler_sample_top(s, swapped_ids, swapped, 11, &t) == GLM53_ERR_INVALID_ARG, "unordered accepted");
        int32_t padded[MAX_N];
        memcpy(padded, best_ids, sizeof padded);
        padded[3] = VALID + 2;
        CHECK(glm53_sampler_sample_top(s, padded, best_logits, 11, &t) == GLM53_ERR_OUT_OF_RANGE, "padded id accepted");
        float bad[MAX_N];
        memcpy(bad, best_logits, sizeof bad);
        bad[0] = NAN;
        CHECK(glm53_sampler_sample_top(s, best_ids, bad, 11, &t) == GLM53_ERR_INVALID_ARG, "NaN accepted");
        p.top_k = 0;   /* sampling without top_k: the whole row decides */
        CHECK(glm53_sampler_set_params(s, &p) == GLM53_OK, "set_params");
        CHECK(glm53_sampler_top_needed(s) == 0, "top_needed without top_k");
        CHECK(glm53_sampler_sample_top(s, best_ids, best_logits, MAX_N, &t) == GLM53_ERR_UNSUPPORTED,
              "without top_k accepted");
        p.top_k = 64;
        CHECK(glm53_sampler_set_params(s, &p) == GLM53_OK && glm53_sampler_top_needed(s) == 0, "top_k 64 needs 65");
        p.top_k = 10, p.presence_penalty = 0.5f;
        CHECK(glm53_sampler_set_params(s, &p) == GLM53_OK && glm53_sampler_top_needed(s) == 0, "penalty");
        p.presence_penalty = 0.0f;
        CHECK(glm53_sampler_set_params(s, &p) == GLM53_OK && glm53_sampler_top_needed(s) == 11, "plain top_k 10");
        const int32_t bias_id = 5;
        const float bias_v = 2.0f;
        CHECK(glm53_sampler_set_logit_bias(s, &bias_id, &bias_v, 1) == GLM53_OK && glm53_sampler_top_needed(s) == 0,
              "logit bias");
        glm53_sampler_free(s);
    }
    free(row);
    free(order);
}

int main(void) {
    test_seed(20260601);
    test_filters();
    test_rng();
    test_edges();
    test_top();
    return test_finish("test_sampling");
}
