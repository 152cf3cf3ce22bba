/*
 * tokenizer_split.c - the pre-tokenizer: the regex splits of HF's Split(behavior "Isolated") and
 * ByteLevel(use_regex) steps, with HF's exact semantics and Unicode version.
 *
 * Two engines:
 *   - a hand-written scanner for the cl100k family of patterns (GLM-5.3, llama3, qwen2/3), the hot path: it
 *     walks the text once, classifying each code point through the two-stage class table;
 *   - PCRE2 (UTF + UCP, JIT) for any other pattern (deepseek_v3's splits, GPT-2's). Before compiling, every
 *     \p{L} \p{N} \p{P} \p{S} \p{M} \s (and their negations) is replaced by an explicit class built from HF's
 *     tables, because PCRE2's own Unicode tables are of another version than HF's Oniguruma.
 * tests/c/test_tokenizer.c checks that both engines agree on the cl100k pattern.
 */
#include "core/text/tokenizer_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>

const char glm53_split_pattern_cl100k[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Qwen2/3: the same with single digits. */
static const char split_pattern_cl100k_1digit[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char glm53_split_pattern_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct glm53_split_stage {
    int         max_digits;   /* scanner: digits per number piece (3 or 1); 0 for PCRE2 */
    pcre2_code *code;         /* PCRE2 stage */
};

/* ------------------------------------------------------------------------------------------------------------
 * The cl100k scanner
 *
 * Alternatives, tried in order at each position (the first that matches wins, as in a backtracking engine):
 *   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)     case-insensitive by Unicode folding: only U+017F joins the ASCII letters
 *   2 [^\r\n\p{L}\p{N}]?\p{L}+          letters, with one optional non-letter/digit/newline before them
 *   3 \p{N}{1,3}                        up to max_digits digits
 *   4 ' '?[^\s\p{L}\p{N}]+[\r\n]*       symbols, with an optional ASCII space before and newlines after
 *   5 \s*[\r\n]+                        whitespace up to and including its last \r or \n
 *   6 \s+(?!\S)                         whitespace at the end of text, or all but its last character
 *   7 \s+                               a single whitespace character before a non-space
 */
enum { UC_LNW = GLM53_UC_L | GLM53_UC_N | GLM53_UC_WS };

static inline uint32_t bits_at(const uint8_t *s, size_t i, int *len, uint32_t *cp) {
    *cp = glm53_uc_decode(s + i, len);
    return glm53_uc_bits(*cp);
}

/* The ASCII letter a code point folds to under the contractions' case folding, or 0. */
static inline uint32_t contraction_fold(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    if (cp >= 'a' && cp <= 'z') return cp;
    return cp == 0x17F ? 's' : 0;
}

static size_t letters_end(const uint8_t *s, size_t n, size_t j) {
    while (j < n) {
        int len;
        uint32_t cp;
        if (!(bits_at(s, j, &len, &cp) & GLM53_UC_L)) break;
        j += (size_t)len;
    }
    return j;
}

/* End of the piece that starts at i < n. */
static size_t cl100k_next(const uint8_t *s, size_t n, size_t i, int max_digits) {
    int l0, l1 = 0, len;
    uint32_t c0, c1 = 0, cp;
    uint32_t b0 = bits_at(s, i, &l0, &c0), b1 = 0;
    size_t j = i + (size_t)l0;
    if (j < n) b1 = bits_at(s, j, &l1, &c1);

    if (c0 == '\'' && j < n) {                                                         /* 1 */
        uint32_t f1 = contraction_fold(c1);
        if (f1 == 's' || f1 == 't' || f1 == 'm' || f1 == 'd') return j + (size_t)l1;
        size_t k = j + (size_t)l1;
        if ((f1 == 'r' || f1 == 'v' || f1 == 'l') && k < n) {
            uint32_t f2 = contraction_fold(glm53_uc_decode(s + k, &len));
            if (f2 == (f1 == 'l' ? 'l' : 'e')) return k + (size_t)len;
        }
    }
    if (b0 & GLM53_UC_L) return letters_end(s, n, j);                                 /* 2 */
    if (c0 != '\r' && c0 != '\n' && !(b0 & GLM53_UC_N) && j < n && (b1 & GLM53_UC_L))
        return letters_end(s, n, j + (size_t)l1);
    if (b0 & GLM53_UC_N) {                                                            /* 3 */
        for (int d = 1; d < max_digits && j < n; d++) {
            if (!(bits_at(s, j, &len, &cp) & GLM53_UC_N)) break;
            j += (size_t)len;
        }
        return j;
    }
    size_t k = SIZE_MAX;                                                              /* 4 */
    if (!(b0 & UC_LNW)) k = j;
    else if (c0 == ' ' && j < n && !(b1 & UC_LNW)) k = j + (size_t)l1;
    if (k != SIZE_MAX) {
        while (k < n && !(bits_at(s, k, &len, &cp) & UC_LNW)) k += (size_t)len;
        while (k < n && (s[k] == '\r' || s[k] == '\n')) k++;
        return k;
    }
    /* c0 is whitespace */
    size_t end = i, last_start = i, after_newline = 0, count = 0;
    while (end < n) {
        if (!(bits_at(s, end, &len, &cp) & GLM53_UC_WS)) break;
        last_start = end;
        end += (size_t)len;
        if (cp == '\r' || cp == '\n') after_newline = end;
        count++;
    }
    if (after_newline) return after_newline;                                          /* 5 */
    if (end == n) return n;                                                           /* 6 */
    return count >= 2 ? last_start : end;                                             /* 6, 7 */
}

/* ------------------------------------------------------------------------------------------------------------
 * PCRE2 stages: class rewriting
 */
typedef struct {
    char  *buf;
    size_t len, cap;
    int    oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *p = realloc(b->buf, cap);
        if (!p) { b->oom = 1; return; }
        b->buf = p;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

static void sb_range(strbuf *b, uint32_t lo, uint32_t hi) {
    char tmp[40];
    int n = lo == hi ? snprintf(tmp, sizeof tmp, "\\x{%X}", lo) : snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", lo, hi);
    sb_put(b, tmp, (size_t)n);
}

/* Appends [lo, hi] minus the surrogates (which UTF mode forbids in a class). */
static void sb_range_scalars(strbuf *b, uint32_t lo, uint32_t hi) {
    if (lo < 0xD800 && hi >= 0xD800) {
        sb_range(b, lo, 0xD7FF);
        lo = 0xE000;
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
        lo = 0xE000;
    }
    if (lo <= hi) sb_range(b, lo, hi);
}

/* Appends the code points whose class bits meet `mask` (or, negated, all other scalar values) as class items
 * "\x{lo}-\x{hi}...". */
static void sb_class_items(strbuf *b, uint32_t mask, int negate) {
    uint32_t next = 0;   /* first code point not yet covered, for the negated form */
    int32_t r = 0;
    while (r < glm53_uc_n_class_ranges) {
        if (!(glm53_uc_class_ranges[r][2] & mask)) { r++; continue; }
        uint32_t lo = glm53_uc_class_ranges[r][0], hi = glm53_uc_class_ranges[r][1];
        for (r++; r < glm53_uc_n_class_ranges && glm53_uc_class_ranges[r][0] == hi + 1 &&
                  (glm53_uc_class_ranges[r][2] & mask); r++)
            hi = glm53_uc_class_ranges[r][1];
        if (!negate) sb_range(b, lo, hi);
        else if (lo > next) sb_range_scalars(b, next, lo - 1);
        next = hi + 1;
    }
    if (negate && next <= 0x10FFFF) sb_range_scalars(b, next, 0x10FFFF);
}

/* The class bits a property name stands for, or 0 when it is not one of ours (left to PCRE2). */
static uint32_t property_mask(const char *name, size_t n) {
    if (n != 1) return 0;
    switch (name[0]) {
    case 'L': return GLM53_UC_L;
    case 'N': return GLM53_UC_N;
    case 'P': return GLM53_UC_P;
    case 'S': return GLM53_UC_S;
    case 'M': return GLM53_UC_M;
    default:  return 0;
    }
}

/* Rewrites pattern into *out (malloc'ed). */
static glm53_status rewrite_classes(const char *pat, char **out) {
    strbuf b = {0};
    int in_class = 0;
    for (size_t i = 0; pat[i];) {
        char c = pat[i];
        if (c == '\\' && pat[i + 1]) {
            char e = pat[i + 1];
            uint32_t mask = 0;
            int negate = 0;
            size_t skip = 2;
            if (e == 's' || e == 'S') {
                mask = GLM53_UC_WS;
                negate = e == 'S';
            } else if (e == 'p' || e == 'P') {
                const char *name = pat + i + 2;
                size_t n = 1;
                if (*name == '{') {
                    const char *close = strchr(name, '}');
                    if (!close) { free(b.buf); return GLM53_FAIL(GLM53_ERR_FORMAT, "split regex: unclosed \\p{"); }
                    n = (size_t)(close - name - 1);
                    mask = property_mask(name + 1, n);
                    skip = 2 + n + 2;
                } else {
                    mask = property_mask(name, 1);
                    skip = 3;
                }
                negate = e == 'P';
            }
            if (!mask) {   /* some other escape: copy it as it is */
                sb_put(&b, pat + i, 2);
                i += 2;
                continue;
            }
            if (!in_class) sb_put(&b, negate ? "[^" : "[", negate ? 2 : 1);
            sb_class_items(&b, mask, in_class && negate);
            if (!in_class) sb_put(&b, "]", 1);
            i += skip;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            size_t j = i + 1;
            if (pat[j] == '^') j++;
            if (pat[j] == ']') j++;   /* a ']' first in a class is a literal */
            sb_put(&b, pat + i, j - i);
            i = j;
            continue;
        }
        if (c == '[' && in_class && pat[i + 1] == ':') {   /* POSIX [:name:] inside a class */
            const char *close = strstr(pat + i, ":]");
            size_t n = close ? (size_t)(close - (pat + i)) + 2 : 1;
            sb_put(&b, pat + i, n);
            i += n;
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        sb_put(&b, pat + i, 1);
        i++;
    }
    if (b.oom || !b.buf) {
        free(b.buf);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "split regex: out of memory");
    }
    *out = b.buf;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Stages
 */
glm53_status glm53_split_stage_create(const char *pattern, glm53_split_stage **out) {
    *out = NULL;
    GLM53_TRY(glm53_uc_init());
    glm53_split_stage *st = calloc(1, sizeof *st);
    if (!st) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "split regex: out of memory");
    if (strcmp(pattern, glm53_split_pattern_cl100k) == 0) {
        st->max_digits = 3;
    } else if (strcmp(pattern, split_pattern_cl100k_1digit) == 0) {
        st->max_digits = 1;
    } else {
        char *rewritten;
        glm53_status s = rewrite_classes(pattern, &rewritten);
        if (s != GLM53_OK) { free(st); return s; }
        int err;
        PCRE2_SIZE off;
        /* \C (one byte, even in UTF mode) would cut characters apart: the next stages and BPE expect whole ones */
        st->code = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &err, &off, NULL);
        free(rewritten);
        if (!st->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            free(st);
            return GLM53_FAIL(GLM53_ERR_FORMAT, "split regex \"%.80s\": %s", pattern, (const char *)msg);
        }
        /* JIT is an optimisation: where it is unavailable PCRE2 interprets the same pattern */
        (void)pcre2_jit_compile(st->code, PCRE2_JIT_COMPLETE);
    }
    *out = st;
    return GLM53_OK;
}

void glm53_split_stage_free(glm53_split_stage *stage) {
    if (!stage) return;
    pcre2_code_free(stage->code);
    free(stage);
}

int glm53_split_stage_is_scanner(const glm53_split_stage *stage) { return stage->code == NULL; }

typedef struct {
    glm53_split_stage *const *stages;
    pcre2_match_data        **match;   /* one per stage: match data must not be shared between threads */
    int32_t                   n_stages;
    glm53_piece_fn            fn;
    void                     *ctx;
} split_run;

static glm53_status run_stage(split_run *r, int32_t k, const uint8_t *s, size_t n) {
    if (n == 0) return GLM53_OK;
    if (k == r->n_stages) return r->fn(r->ctx, s, n);
    const glm53_split_stage *st = r->stages[k];
    if (!st->code) {
        for (size_t i = 0; i < n;) {
            size_t e = cl100k_next(s, n, i, st->max_digits);
            GLM53_TRY(run_stage(r, k + 1, s + i, e - i));
            i = e;
        }
        return GLM53_OK;
    }
    size_t done = 0, pos = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->match[k]);
    while (pos < n) {
        int rc = pcre2_match(st->code, s, n, pos, PCRE2_NO_UTF_CHECK, r->match[k], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return GLM53_FAIL(GLM53_ERR_BACKEND, "split regex: match failed: %s", (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {   /* an empty match makes no piece: step over one character (none at the end: "$") */
            if (ms >= n) break;
            int len;
            glm53_uc_decode(s + ms, &len);
            pos = ms + (size_t)len;
            continue;
        }
        if (ms > done) GLM53_TRY(run_stage(r, k + 1, s + done, ms - done));
        GLM53_TRY(run_stage(r, k + 1, s + ms, me - ms));
        done = pos = me;
    }
    if (done < n) GLM53_TRY(run_stage(r, k + 1, s + done, n - done));
    return GLM53_OK;
}

glm53_status glm53_split_run(glm53_split_stage *const *stages, int32_t n_stages, const uint8_t *text, size_t n,
                             glm53_piece_fn fn, void *ctx) {
    if (n_stages > GLM53_SPLIT_MAX_STAGES)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "more than %d split stages", GLM53_SPLIT_MAX_STAGES);
    pcre2_match_data *match[GLM53_SPLIT_MAX_STAGES] = {0};
    split_run r = {stages, match, n_stages, fn, ctx};
    glm53_status s = GLM53_OK;
    for (int32_t k = 0; k < n_stages && s == GLM53_OK; k++) {
        if (!stages[k]->code) continue;
        match[k] = pcre2_match_data_create(1, NULL);
        if (!match[k]) s = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "split regex: out of memory");
    }
    if (s == GLM53_OK) s = run_stage(&r, 0, text, n);
    for (int32_t k = 0; k < n_stages; k++) pcre2_match_data_free(match[k]);
    return s;
}
