/*
 * sampling.c - vocab-wide sampling on host logits rows: bias, penalties, temperature, min-p, top-k, top-p, a
 * seeded RNG per sampler, greedy; the filtered distribution, samples, residual samples for speculative
 * decoding, and the truncated candidate set Lua policies pick from.
 *
 * The pipeline and the definitions are documented in core/glm53.h (Sampling). One row goes through filter_row,
 * which leaves the kept tokens in s->kept[0, n_kept) with unnormalised weights exp(x - max x) in double; every
 * entry point that reads a distribution (probs, sample, candidates) starts from that one function, so the target
 * and the draft of speculative decoding, and the plain and the policy paths, see the same filters. filter_top
 * starts from a row's best logits instead (a step's top-k outputs) and ends in the same finish_row, with the
 * same result whenever glm53_sampler_top_needed says it can (the argument is at filter_top).
 *
 * Cost per row: O(V) for bias, the NaN check, exp and min-p; penalties cost O(distinct seen tokens); top-k
 * selects with a size-k heap (O(V log k)); top-p without top-k first drops every token whose probability is
 * below (1 - top_p) / n (those can never be kept: all tokens at or below one of them hold less than 1 - top_p
 * of the mass), then sorts the rest.
 */
#include "core/base/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Temperatures below this are greedy (vLLM's _SAMPLING_EPS): dividing by less would only overflow. */
#define GREEDY_BELOW 1e-5f

/* One kept token: its processed logit before the temperature (the sort key: the order a step's top-k outputs
 * have, so filter_top can start from them), id (the tie-break) and unnormalised weight. */
typedef struct {
    double  w;
    float   x;
    int32_t id;
} cand;

struct glm53_sampler {
    int32_t              vocab;
    glm53_sampler_params params;
    uint64_t             rng[4];        /* xoshiro256** state */

    float   *bias;                      /* [V] added to the logits, or NULL when no bias is set */
    uint8_t *in_prompt;                 /* [V] token occurs in the prompt */
    int32_t *out_count;                 /* [V] occurrences among the accepted output tokens */
    uint8_t *listed;                    /* [V] token is in seen[] */
    int32_t *seen;                      /* [V] distinct tokens ever in the prompt or output: where penalties act */
    int32_t  n_seen;
    int32_t *history;                   /* accepted output tokens, in order (for rewind) */
    int64_t  n_history, cap_history;

    float   *x;                         /* [V] scratch: the processed logits of the current row */
    cand    *kept;                      /* [V] scratch: the kept tokens of the current row */
    int32_t  n_kept;
    bool     kept_sorted;               /* kept[] is in rank order (x desc, id asc) */
    double   kept_total;                /* sum of kept[].w */
};

/* ------------------------------------------------------------------------------------------------------------
 * RNG: xoshiro256** (Blackman and Vigna), seeded by splitmix64 so that any 64-bit seed, 0 included, gives a
 * well-mixed state. Integer arithmetic only: the stream is the same on every platform.
 */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static void rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&seed);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* ------------------------------------------------------------------------------------------------------------
 * Handle
 */
glm53_sampler_params glm53_sampler_default_params(void) {
    glm53_sampler_params p = {0};
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.seed = 0;
    return p;
}

static glm53_status check_params(const glm53_sampler_params *p) {
    if (!p) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: params are required");
    if (isnan(p->temperature) || isinf(p->temperature))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: temperature %g is not a finite number", p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: top_p %g is outside (0, 1]", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: min_p %g is outside [0, 1]", p->min_p);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: repetition_penalty %g must be positive and finite",
                          p->repetition_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: presence and frequency penalties must be finite");
    return GLM53_OK;
}

glm53_status glm53_sampler_create(int32_t vocab_size, const glm53_sampler_params *params, glm53_sampler **out) {
    if (!out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_create: out is required");
    *out = NULL;
    if (vocab_size < 1) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_create: vocab_size %d < 1", vocab_size);
    glm53_sampler_params p = params ? *params : glm53_sampler_default_params();
    GLM53_TRY(check_params(&p));
    glm53_sampler *s = calloc(1, sizeof *s);
    if (!s) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a sampler");
    size_t V = (size_t)vocab_size;
    s->vocab = vocab_size;
    s->params = p;
    s->in_prompt = calloc(V, 1);
    s->out_count = calloc(V, sizeof *s->out_count);
    s->listed = calloc(V, 1);
    s->seen = malloc(V * sizeof *s->seen);
    s->x = malloc(V * sizeof *s->x);
    s->kept = malloc(V * sizeof *s->kept);
    s->cap_history = 256;
    s->history = malloc((size_t)s->cap_history * sizeof *s->history);
    if (!s->in_prompt || !s->out_count || !s->listed || !s->seen || !s->x || !s->kept || !s->history) {
        glm53_sampler_free(s);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a sampler over %d tokens", vocab_size);
    }
    rng_seed(s->rng, p.seed);
    *out = s;
    return GLM53_OK;
}

void glm53_sampler_free(glm53_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->in_prompt);
    free(s->out_count);
    free(s->listed);
    free(s->seen);
    free(s->history);
    free(s->x);
    free(s->kept);
    free(s);
}

glm53_status glm53_sampler_set_params(glm53_sampler *s, const glm53_sampler_params *params) {
    if (!s) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_set_params: sampler is NULL");
    GLM53_TRY(check_params(params));
    s->params = *params;
    return GLM53_OK;
}

glm53_status glm53_sampler_get_params(const glm53_sampler *s, glm53_sampler_params *out) {
    if (!s || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_get_params: sampler and out are required");
    *out = s->params;
    return GLM53_OK;
}

glm53_status glm53_sampler_reset(glm53_sampler *s) {
    if (!s) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_reset: sampler is NULL");
    for (int32_t i = 0; i < s->n_seen; i++) {
        int32_t id = s->seen[i];
        s->in_prompt[id] = 0;
        s->out_count[id] = 0;
        s->listed[id] = 0;
    }
    s->n_seen = 0;
    s->n_history = 0;
    rng_seed(s->rng, s->params.seed);
    return GLM53_OK;
}

glm53_status glm53_sampler_set_logit_bias(glm53_sampler *s, const int32_t *ids, const float *bias, int32_t n) {
    if (!s) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_set_logit_bias: sampler is NULL");
    if (n < 0 || (n > 0 && (!ids || !bias)))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_set_logit_bias: need ids and bias for %d entries", n);
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->vocab)
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "sampler_set_logit_bias: token id %d is outside [0, %d)",
                              ids[i], s->vocab);
        if (isnan(bias[i]) || bias[i] == INFINITY)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_set_logit_bias: bias of token %d is %g (NaN and "
                              "+inf are not allowed; -inf bans a token)", ids[i], bias[i]);
    }
    if (n == 0) {
        free(s->bias);
        s->bias = NULL;
        return GLM53_OK;
    }
    if (!s->bias) {
        s->bias = malloc((size_t)s->vocab * sizeof *s->bias);
        if (!s->bias) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a logit bias");
    }
    for (int32_t i = 0; i < s->vocab; i++) s->bias[i] = 0.0f;
    for (int32_t i = 0; i < n; i++) s->bias[ids[i]] = bias[i];
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Penalty history
 */
static void note_seen(glm53_sampler *s, int32_t id) {
    if (s->listed[id]) return;
    s->listed[id] = 1;
    s->seen[s->n_seen++] = id;
}

glm53_status glm53_sampler_add_prompt(glm53_sampler *s, const int32_t *ids, int64_t n) {
    if (!s || n < 0 || (n > 0 && !ids))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_add_prompt: need a sampler and n >= 0 ids");
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->vocab)
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "sampler_add_prompt: token id %d at %lld is outside [0, %d)",
                              ids[i], (long long)i, s->vocab);
    for (int64_t i = 0; i < n; i++) {
        s->in_prompt[ids[i]] = 1;
        note_seen(s, ids[i]);
    }
    return GLM53_OK;
}

glm53_status glm53_sampler_accept(glm53_sampler *s, int32_t id) {
    if (!s) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_accept: sampler is NULL");
    if (id < 0 || id >= s->vocab)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "sampler_accept: token id %d is outside [0, %d)", id, s->vocab);
    if (s->n_history == s->cap_history) {
        int64_t cap = 2 * s->cap_history;
        int32_t *grown = realloc(s->history, (size_t)cap * sizeof *grown);
        if (!grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for %lld history tokens", (long long)cap);
        s->history = grown;
        s->cap_history = cap;
    }
    s->history[s->n_history++] = id;
    s->out_count[id]++;
    note_seen(s, id);
    return GLM53_OK;
}

glm53_status glm53_sampler_rewind(glm53_sampler *s, int64_t n) {
    if (!s) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_rewind: sampler is NULL");
    if (n < 0 || n > s->n_history)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "sampler_rewind: %lld tokens asked for, %lld accepted",
                          (long long)n, (long long)s->n_history);
    /* A token whose count drops to 0 stays in seen[]: its penalties then evaluate to nothing. */
    for (int64_t i = 0; i < n; i++) s->out_count[s->history[--s->n_history]]--;
    return GLM53_OK;
}

int64_t glm53_sampler_n_accepted(const glm53_sampler *s) { return s ? s->n_history : 0; }

/* ------------------------------------------------------------------------------------------------------------
 * Filtering one row
 */
/* True when a ranks before b: larger processed logit first, lower id on ties (a total order, so every sort and
 * selection below is deterministic). */
static bool ranks_before(const cand *a, const cand *b) { return a->x > b->x || (a->x == b->x && a->id < b->id); }

static int cmp_rank(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return ranks_before(a, b) ? -1 : ranks_before(b, a) ? 1 : 0;
}

static int cmp_id(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* Heap order for selection: the root is the worst of the heap (a min-heap by rank). */
static void sift_down(cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t worst = i, l = 2 * i + 1, r = l + 1;
        if (l < n && ranks_before(&h[worst], &h[l])) worst = l;
        if (r < n && ranks_before(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        cand t = h[i]; h[i] = h[worst]; h[worst] = t;
        i = worst;
    }
}

/* Moves the k best of c[0, n) to the front, in rank order. */
static void select_top(cand *c, int32_t n, int32_t k) {
    if (k >= n || (int64_t)k * 8 >= n) {   /* a large share: sorting everything is as cheap */
        qsort(c, (size_t)n, sizeof *c, cmp_rank);
        return;
    }
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    for (int32_t i = k; i < n; i++)
        if (ranks_before(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof *c, cmp_rank);
}

/* Steps 1-2 of the pipeline into s->x; rejects NaN and +inf. */
/* The copy of a row with its bias, 4 logits at a time, and whether every one of them is allowed (neither NaN nor
 * +inf): a batch of decode rows samples every row on the event loop's thread between two steps, so the O(V) passes
 * of a greedy row are written to vectorise (the same values as one logit at a time). 4 lanes, the width the
 * baseline target has: a wider generic vector's compares would be lowered to scalar code. */
typedef float smp_v4f __attribute__((vector_size(16)));
typedef int32_t smp_v4i __attribute__((vector_size(16)));

static bool copy_logits(float *x, const float *logits, const float *bias, int32_t n) {
    smp_v4i bad = {0, 0, 0, 0};
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        smp_v4f v, b;
        smp_v4i bits;
        memcpy(&v, logits + i, sizeof v);
        memcpy(&bits, &v, sizeof bits);
        /* NaN: exponent all ones and a mantissa (|bits| above +inf's); +inf: exactly its bits. As integers, so the
         * compare vectorises (a float != is kept scalar for its NaN rules). */
        bad |= ((bits & 0x7fffffff) > 0x7f800000) | (bits == 0x7f800000);
        if (bias) {
            memcpy(&b, bias + i, sizeof b);
            v = v + b;
        }
        memcpy(x + i, &v, sizeof v);
    }
    bool any = bad[0] || bad[1] || bad[2] || bad[3];
    for (; i < n; i++) {
        float v = logits[i];
        any = any || isnan(v) || v == INFINITY;
        x[i] = bias ? v + bias[i] : v;
    }
    return !any;
}

/* The first index of the largest of x[0, n) (n >= 1, no NaN): the maximum 4 lanes at a time, then its first
 * occurrence (equal values, -0 and +0 included, go to the lower index, as a scan keeping the first maximum does). */
static int32_t first_argmax(const float *x, int32_t n) {
    float best = x[0];
    int32_t i = 0;
    if (n >= 4) {
        smp_v4f m;
        memcpy(&m, x, sizeof m);
        for (i = 4; i + 4 <= n; i += 4) {
            smp_v4f v;
            memcpy(&v, x + i, sizeof v);
            smp_v4i gt = v > m;
            m = (smp_v4f)(((smp_v4i)v & gt) | ((smp_v4i)m & ~gt));
        }
        for (int l = 0; l < 4; l++) best = m[l] > best ? m[l] : best;
    }
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    for (i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

static glm53_status process_logits(glm53_sampler *s, const float *logits) {
    const glm53_sampler_params *p = &s->params;
    int32_t V = s->vocab, valid = p->n_valid > 0 && p->n_valid < V ? p->n_valid : V;
    for (int32_t i = valid; i < V; i++) s->x[i] = -INFINITY;   /* padded vocabulary: never produced */
    if (!copy_logits(s->x, logits, s->bias, valid)) {
        for (int32_t i = 0; i < valid; i++)
            if (isnan(logits[i]) || logits[i] == INFINITY)
                return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: logit of token %d is %g (NaN and +inf are not "
                                  "allowed)", i, logits[i]);
    }
    bool rep = p->repetition_penalty != 1.0f, freq = p->frequency_penalty != 0.0f;
    bool pres = p->presence_penalty != 0.0f;
    if (rep || freq || pres) {
        for (int32_t j = 0; j < s->n_seen; j++) {
            int32_t id = s->seen[j], count = s->out_count[id];
            float v = s->x[id];
            if (rep && (count > 0 || s->in_prompt[id]))
                v = v > 0.0f ? v / p->repetition_penalty : v * p->repetition_penalty;
            if (freq) v -= p->frequency_penalty * (float)count;
            if (pres && count > 0) v -= p->presence_penalty;
            s->x[id] = v;
        }
    }
    return GLM53_OK;
}

static void finish_row(glm53_sampler *s, int32_t n, double total);

/* Runs the whole pipeline on one row: s->kept[0, n_kept) with weights, total kept_total. */
static glm53_status filter_row(glm53_sampler *s, const float *logits) {
    if (!s || !logits) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: sampler and logits are required");
    const glm53_sampler_params *p = &s->params;
    int32_t V = s->vocab;
    GLM53_TRY(process_logits(s, logits));
    float *x = s->x;

    int32_t best = first_argmax(x, V);
    if (x[best] == -INFINITY)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: every token is banned (all logits are -inf)");
    if (p->temperature < GREEDY_BELOW) {
        s->kept[0] = (cand){1.0, x[best], best};
        s->n_kept = 1;
        s->kept_sorted = true;
        s->kept_total = 1.0;
        return GLM53_OK;
    }

    /* Softmax weights relative to the maximum, w = exp((x - x_max) / T) in double; min-p is a cut on them
     * (w / w_max = p / p_max). The kept tokens in id order, their total in id order. */
    double t = p->temperature, xbest = x[best];
    int32_t n = 0;
    double total = 0.0;
    for (int32_t i = 0; i < V; i++) {
        if (x[i] == -INFINITY) continue;
        double w = exp(((double)x[i] - xbest) / t);
        if (w <= 0.0 || w < (double)p->min_p) continue;
        s->kept[n++] = (cand){w, x[i], i};
        total += w;
    }
    finish_row(s, n, total);
    return GLM53_OK;
}

/* Steps 6-8 on s->kept[0, n), which step 5 left in id order with `total` their sum in id order: top-k, top-p;
 * the result in s->kept, n_kept, kept_sorted, kept_total. filter_row (a whole row) and filter_top (a row's best
 * logits) both end here, so the two apply the same filters. */
static void finish_row(glm53_sampler *s, int32_t n, double total) {
    const glm53_sampler_params *p = &s->params;
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < n) {
        select_top(s->kept, n, p->top_k);
        n = p->top_k;
        sorted = true;
        total = 0.0;
        for (int32_t i = 0; i < n; i++) total += s->kept[i].w;
    }
    if (p->top_p < 1.0f && n > 1) {
        if (!sorted) {
            /* Tokens under (1 - top_p) / n of the mass can never be kept; drop them before sorting. */
            double cut = (1.0 - (double)p->top_p) * total / (double)n;
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++)
                if (s->kept[i].w >= cut) s->kept[m++] = s->kept[i];
            qsort(s->kept, (size_t)m, sizeof *s->kept, cmp_rank);
            sorted = true;
            n = m;
        }
        /* Keep while the mass before the token is < top_p (the first token always stays). */
        double limit = (double)p->top_p * total, before = 0.0;
        int32_t m = 0;
        while (m < n && (m == 0 || before < limit)) before += s->kept[m++].w;
        n = m;
        total = before;
    }
    s->n_kept = n;
    s->kept_sorted = sorted;
    s->kept_total = total;
}

int32_t glm53_sampler_top_needed(const glm53_sampler *s) {
    if (!s) return 0;
    const glm53_sampler_params *p = &s->params;
    if (s->bias || p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f)
        return 0;   /* the processed logits are not the row's: its best ones may not hold the answer */
    if (p->temperature < GREEDY_BELOW) return 1;
    if (p->top_k <= 0 || p->top_k >= s->vocab || p->top_k >= GLM53_MAX_TOP_K) return 0;
    return p->top_k + 1;
}

/* filter_row's result from the row's n best logits (ids[n], logits[n]: best first, the lower id on equal values,
 * over the valid ids), n >= glm53_sampler_top_needed(s) > 0. Why it is the same: every token step 5 keeps from
 * the whole row and is not among the n has a logit at most the n-th one's. If a candidate is dropped by step 5
 * (or is -inf), so is every token after it, inside the n or not: the kept set is complete, the same id-ordered
 * list filter_row builds. If none is dropped, filter_row keeps more than n > top_k tokens, so top-k runs and keeps
 * the top_k best, which are the first top_k candidates either way. The weights are the same doubles
 * (exp((x - x_max) / T) with x_max = logits[0]), summed in the same order. */
static glm53_status filter_top(glm53_sampler *s, const int32_t *ids, const float *logits, int32_t n) {
    if (!s || !ids || !logits) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_top: sampler, ids and logits "
                                                 "are required");
    const glm53_sampler_params *p = &s->params;
    const int32_t needed = glm53_sampler_top_needed(s);
    if (needed == 0)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "sampler_sample_top: these settings need the whole row (a logit "
                          "bias, a penalty, or sampling without a top_k below %d)", GLM53_MAX_TOP_K);
    if (n < needed)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_top: %d candidates; top_k %d needs %d", n, p->top_k,
                          needed);
    const int32_t valid = p->n_valid > 0 && p->n_valid < s->vocab ? p->n_valid : s->vocab;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= valid)
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "sampler_sample_top: candidate %d is token %d, outside the "
                              "valid ids [0, %d)", i, ids[i], valid);
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: logit of token %d is %g (NaN and +inf are not "
                              "allowed)", ids[i], logits[i]);
        if (i > 0 && !(logits[i] < logits[i - 1] || (logits[i] == logits[i - 1] && ids[i] > ids[i - 1])))
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_top: candidates %d and %d are not best first "
                              "(ties: the lower id first)", i - 1, i);
    }
    const double xbest = logits[0];
    if (logits[0] == -INFINITY)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler: every token is banned (all logits are -inf)");
    if (p->temperature < GREEDY_BELOW) {
        s->kept[0] = (cand){1.0, logits[0], ids[0]};
        s->n_kept = 1;
        s->kept_sorted = true;
        s->kept_total = 1.0;
        return GLM53_OK;
    }
    const double t = p->temperature;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (logits[i] == -INFINITY) continue;
        double w = exp(((double)logits[i] - xbest) / t);
        if (w <= 0.0 || w < (double)p->min_p) continue;
        s->kept[m++] = (cand){w, logits[i], ids[i]};
    }
    qsort(s->kept, (size_t)m, sizeof *s->kept, cmp_id);
    double total = 0.0;
    for (int32_t i = 0; i < m; i++) total += s->kept[i].w;
    finish_row(s, m, total);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Distributions and draws
 */
glm53_status glm53_sampler_probs(glm53_sampler *s, const float *logits, float *probs) {
    if (!probs) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_probs: probs is required");
    GLM53_TRY(filter_row(s, logits));
    for (int32_t i = 0; i < s->vocab; i++) probs[i] = 0.0f;
    for (int32_t i = 0; i < s->n_kept; i++) probs[s->kept[i].id] = (float)(s->kept[i].w / s->kept_total);
    return GLM53_OK;
}

/* The token where the running sum of w[] passes u * total, walking ids in ascending order; the last token with
 * positive weight if rounding leaves the sum short. */
static int32_t draw_ascending(const float *w, int32_t V, double total, double u) {
    double target = u * total, run = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < V; i++) {
        if (w[i] <= 0.0f) continue;
        run += w[i];
        last = i;
        if (run > target) return i;
    }
    return last;
}

/* The draw from the kept tokens filter_row or filter_top left. */
static int32_t draw_kept(glm53_sampler *s) {
    if (s->params.temperature < GREEDY_BELOW) return s->kept[0].id;   /* greedy: no draw */
    /* Walk the kept tokens in id order, whatever order the filters left them in, so that a draw depends on
     * the distribution and the stream only. */
    if (s->kept_sorted) qsort(s->kept, (size_t)s->n_kept, sizeof *s->kept, cmp_id);
    double target = rng_uniform(s->rng) * s->kept_total, run = 0.0;
    for (int32_t i = 0; i < s->n_kept; i++) {
        run += s->kept[i].w;
        if (run > target) return s->kept[i].id;
    }
    return s->kept[s->n_kept - 1].id;   /* rounding left the running sum short */
}

glm53_status glm53_sampler_sample(glm53_sampler *s, const float *logits, int32_t *token) {
    if (!token) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample: token is required");
    GLM53_TRY(filter_row(s, logits));
    *token = draw_kept(s);
    return GLM53_OK;
}

glm53_status glm53_sampler_sample_top(glm53_sampler *s, const int32_t *ids, const float *logits, int32_t n,
                                      int32_t *token) {
    if (!token) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_top: token is required");
    GLM53_TRY(filter_top(s, ids, logits, n));
    *token = draw_kept(s);
    return GLM53_OK;
}

static glm53_status check_probs(const glm53_sampler *s, const float *probs, const char *what, double *total) {
    double t = 0.0;
    for (int32_t i = 0; i < s->vocab; i++) {
        if (!(probs[i] >= 0.0f) || isinf(probs[i]))
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "%s: probability of token %d is %g", what, i, probs[i]);
        t += probs[i];
    }
    *total = t;
    return GLM53_OK;
}

glm53_status glm53_sampler_sample_probs(glm53_sampler *s, const float *probs, int32_t *token) {
    if (!s || !probs || !token)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_probs: sampler, probs and token are required");
    double total;
    GLM53_TRY(check_probs(s, probs, "sampler_sample_probs", &total));
    if (!(total > 0.0)) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_probs: probabilities sum to 0");
    *token = draw_ascending(probs, s->vocab, total, rng_uniform(s->rng));
    return GLM53_OK;
}

glm53_status glm53_sampler_sample_residual(glm53_sampler *s, const float *p, const float *q, int32_t *token) {
    if (!s || !p || !q || !token)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_residual: sampler, p, q and token are required");
    double total_p, total_q;
    GLM53_TRY(check_probs(s, p, "sampler_sample_residual (p)", &total_p));
    GLM53_TRY(check_probs(s, q, "sampler_sample_residual (q)", &total_q));
    if (!(total_p > 0.0)) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_sample_residual: p sums to 0");
    /* max(0, p - q) lives in the scratch row (as floats, the same walk as draw_ascending). */
    float *r = s->x;
    double total = 0.0;
    for (int32_t i = 0; i < s->vocab; i++) {
        float d = p[i] - q[i];
        r[i] = d > 0.0f ? d : 0.0f;
        total += r[i];
    }
    double u = rng_uniform(s->rng);
    *token = total > 0.0 ? draw_ascending(r, s->vocab, total, u) : draw_ascending(p, s->vocab, total_p, u);
    return GLM53_OK;
}

glm53_status glm53_sampler_candidates(glm53_sampler *s, const float *logits, int32_t max_n, int32_t *ids,
                                      float *cand_logits, float *cand_probs, int32_t *n_out) {
    if (max_n < 1 || !ids || !cand_logits || !cand_probs || !n_out)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_candidates: need max_n >= 1 and ids, logits, probs, "
                          "n_out buffers");
    GLM53_TRY(filter_row(s, logits));
    const bool greedy = s->params.temperature < GREEDY_BELOW;
    int32_t n = s->n_kept < max_n ? s->n_kept : max_n;
    if (!s->kept_sorted) select_top(s->kept, s->n_kept, n);
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += s->kept[i].w;
    for (int32_t i = 0; i < n; i++) {
        ids[i] = s->kept[i].id;
        /* the processed logit after the temperature (step 4); greedy stops before it */
        cand_logits[i] = greedy ? s->kept[i].x : (float)((double)s->kept[i].x / s->params.temperature);
        cand_probs[i] = (float)(s->kept[i].w / total);
    }
    *n_out = n;
    return GLM53_OK;
}

glm53_status glm53_sampler_uniform(glm53_sampler *s, double *out) {
    if (!s || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "sampler_uniform: sampler and out are required");
    *out = rng_uniform(s->rng);
    return GLM53_OK;
}
