/*
 * tokenizer_unicode.c - the Unicode the tokenizer needs: UTF-8 repair exactly as HF/Rust/Python do it, code
 * point classes as HF's regex engine sees them, and HF's NFC.
 *
 * The class and normalisation data are generated (tokenizer_tables.c) from what HF tokenizers itself does, so the
 * Unicode version is HF's, not the C library's or PCRE2's. Classes are looked up through a two-stage table built
 * once from the generated ranges; NFC is the textbook decompose / reorder / compose, taken only when a quick
 * check finds a code point that could change.
 */
#include "core/text/tokenizer_internal.h"

#include <pthread.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * Class lookup
 */
enum { UC_BLOCKS = 0x110000 >> 8 };

const uint16_t *glm53_uc_stage1;
const uint8_t  *glm53_uc_stage2;
static pthread_once_t uc_once = PTHREAD_ONCE_INIT;
static glm53_status   uc_init_status = GLM53_ERR_OUT_OF_MEMORY;

/* Blocks of one repeated value (unassigned planes, CJK, Hangul) share one copy; the rest get their own. */
static void uc_build(void) {
    uint16_t *stage1 = malloc(sizeof(uint16_t) * UC_BLOCKS);
    uint8_t  *blocks = malloc((size_t)256 * UC_BLOCKS);
    uint8_t  *bits   = calloc(0x110000, 1);
    if (!stage1 || !blocks || !bits) {
        free(stage1); free(blocks); free(bits);
        return;
    }
    for (int32_t r = 0; r < glm53_uc_n_class_ranges; r++)
        for (uint32_t cp = glm53_uc_class_ranges[r][0]; cp <= glm53_uc_class_ranges[r][1]; cp++)
            bits[cp] = (uint8_t)glm53_uc_class_ranges[r][2];
    int32_t uniform_block[256];
    for (int v = 0; v < 256; v++) uniform_block[v] = -1;
    int32_t n_blocks = 0;
    for (int32_t b = 0; b < UC_BLOCKS; b++) {
        const uint8_t *src = bits + (size_t)b * 256;
        int uniform = 1;
        for (int i = 1; i < 256 && uniform; i++) uniform = src[i] == src[0];
        if (uniform && uniform_block[src[0]] >= 0) {
            stage1[b] = (uint16_t)uniform_block[src[0]];
            continue;
        }
        memcpy(blocks + (size_t)n_blocks * 256, src, 256);
        if (uniform) uniform_block[src[0]] = n_blocks;
        stage1[b] = (uint16_t)n_blocks++;
    }
    free(bits);
    uint8_t *shrunk = realloc(blocks, (size_t)n_blocks * 256);
    glm53_uc_stage2 = shrunk ? shrunk : blocks;
    glm53_uc_stage1 = stage1;
    uc_init_status = GLM53_OK;
}

glm53_status glm53_uc_init(void) {
    pthread_once(&uc_once, uc_build);
    if (uc_init_status != GLM53_OK)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: no memory for the Unicode class table");
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * UTF-8
 */
int glm53_uc_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | cp >> 6); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12); out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18); out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Well-formed sequences (Unicode table 3-7): the length a lead byte announces (0: never a lead), and the
 * range its second byte must fall in (the later ones are always 80..BF). */
static int utf8_need(uint8_t b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

static int utf8_second_ok(uint8_t lead, uint8_t b) {
    switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default:   return b >= 0x80 && b <= 0xBF;
    }
}

/* Bytes of the sequence at s[0, n) that are well-formed so far (the maximal subpart), and whether they make a
 * whole character. */
static size_t utf8_subpart(const uint8_t *s, size_t n, int *complete) {
    int need = utf8_need(s[0]);
    *complete = 0;
    if (need == 0) return 1;
    if (need == 1) { *complete = 1; return 1; }
    size_t k = 1;
    while (k < (size_t)need && k < n) {
        int ok = k == 1 ? utf8_second_ok(s[0], s[1]) : (s[k] >= 0x80 && s[k] <= 0xBF);
        if (!ok) return k;
        k++;
    }
    *complete = k == (size_t)need;
    return k;
}

size_t glm53_uc_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int complete;
        size_t k = utf8_subpart(s + i, n - i, &complete);
        if (!complete) return i;
        i += k;
    }
    return n;
}

size_t glm53_uc_utf8_lossy(const uint8_t *s, size_t n, uint8_t *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        if (s[i] < 0x80) { out[o++] = s[i++]; continue; }
        int complete;
        size_t k = utf8_subpart(s + i, n - i, &complete);
        if (complete) {
            memcpy(out + o, s + i, k);
            o += k;
        } else {
            out[o++] = 0xEF; out[o++] = 0xBF; out[o++] = 0xBD;
        }
        i += k;
    }
    return o;
}

size_t glm53_uc_utf8_incomplete_tail(const uint8_t *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const uint8_t *p = s + n - back;
        if (*p >= 0x80 && *p <= 0xBF) continue;   /* a continuation byte: the lead is further back */
        int complete;
        size_t k = utf8_subpart(p, back, &complete);
        return (!complete && k == back && utf8_need(*p) > (int)back) ? back : 0;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * NFC
 */
enum {
    HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
    HANGUL_NL = 19, HANGUL_NV = 21, HANGUL_NT = 28, HANGUL_N = HANGUL_NL * HANGUL_NV * HANGUL_NT,
};

static int uc_ccc(uint32_t cp) {
    int32_t lo = 0, hi = glm53_uc_n_ccc - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (glm53_uc_ccc[mid][0] == cp) return (int)glm53_uc_ccc[mid][1];
        if (glm53_uc_ccc[mid][0] < cp) lo = mid + 1; else hi = mid - 1;
    }
    return 0;
}

/* The full canonical decomposition of cp into out (room for 18), or 0 when cp does not decompose. */
static int uc_decompose(uint32_t cp, uint32_t *out) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_N) {
        uint32_t s = cp - HANGUL_S;
        out[0] = HANGUL_L + s / (HANGUL_NV * HANGUL_NT);
        out[1] = HANGUL_V + (s % (HANGUL_NV * HANGUL_NT)) / HANGUL_NT;
        if (s % HANGUL_NT == 0) return 2;
        out[2] = HANGUL_T + s % HANGUL_NT;
        return 3;
    }
    int32_t lo = 0, hi = glm53_uc_n_decomp - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (glm53_uc_decomp_index[mid][0] == cp) {
            uint32_t off = glm53_uc_decomp_index[mid][1], len = glm53_uc_decomp_index[mid][2];
            memcpy(out, glm53_uc_decomp_data + off, sizeof(uint32_t) * len);
            return (int)len;
        }
        if (glm53_uc_decomp_index[mid][0] < cp) lo = mid + 1; else hi = mid - 1;
    }
    return 0;
}

/* The primary composite of (a, b), or 0. */
static uint32_t uc_compose(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_NL && b >= HANGUL_V && b < HANGUL_V + HANGUL_NV)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_NV + (b - HANGUL_V)) * HANGUL_NT;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_N && (a - HANGUL_S) % HANGUL_NT == 0 && b > HANGUL_T &&
        b < HANGUL_T + HANGUL_NT)
        return a + (b - HANGUL_T);
    uint64_t key = ((uint64_t)a << 21) | b;
    int32_t lo = 0, hi = glm53_uc_n_compose - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (glm53_uc_compose[mid][0] == key) return (uint32_t)glm53_uc_compose[mid][1];
        if (glm53_uc_compose[mid][0] < key) lo = mid + 1; else hi = mid - 1;
    }
    return 0;
}

/* NFC of one span (decompose, reorder, compose), appended to out; cps / ccc have room for 18 code points per
 * byte of the span. Returns the bytes written. */
static size_t nfc_span(const uint8_t *s, size_t n, uint32_t *cps, int32_t *ccc, uint8_t *out) {
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        int len;
        uint32_t cp = glm53_uc_decode(s + i, &len);
        int k = uc_decompose(cp, cps + m);
        if (k == 0) {
            cps[m] = cp;
            k = 1;
        }
        m += (size_t)k;
        i += (size_t)len;
    }
    for (size_t i = 0; i < m; i++) ccc[i] = uc_ccc(cps[i]);

    /* canonical ordering: a stable sort by combining class of every run of non-starters */
    for (size_t i = 1; i < m; i++) {
        if (ccc[i] == 0) continue;
        for (size_t j = i; j > 0 && ccc[j - 1] > ccc[j]; j--) {
            uint32_t tc = cps[j]; cps[j] = cps[j - 1]; cps[j - 1] = tc;
            int32_t tk = ccc[j]; ccc[j] = ccc[j - 1]; ccc[j - 1] = tk;
        }
    }

    /* canonical composition: a character joins the last starter unless something between blocks it */
    size_t w = 0, starter = 0;
    int have_starter = 0, last_ccc = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t cp = cps[i];
        int c = ccc[i];
        if (have_starter && (last_ccc < c || (last_ccc == 0 && w == starter + 1))) {
            uint32_t comp = uc_compose(cps[starter], cp);
            if (comp) {
                cps[starter] = comp;
                continue;
            }
        }
        if (c == 0) {
            starter = w;
            have_starter = 1;
        }
        last_ccc = c;
        cps[w] = cp;
        ccc[w] = c;
        w++;
    }
    size_t o = 0;
    for (size_t i = 0; i < w; i++) o += (size_t)glm53_uc_encode(cps[i], out + o);
    return o;
}

/* Offset of the first code point at or after i that carries GLM53_UC_NFC_CHECK, or n. */
static size_t next_check(const uint8_t *s, size_t n, size_t i) {
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int len;
        if (glm53_uc_bits(glm53_uc_decode(s + i, &len)) & GLM53_UC_NFC_CHECK) return i;
        i += (size_t)len;
    }
    return n;
}

/* Only the spans around code points that NFC may change are normalised: a code point without NFC_CHECK is a
 * starter that is its own NFC and combines with nothing before it, so text can be cut before it. A span runs from
 * the code point before a run of NFC_CHECK code points (which they may combine with) to the end of the run. */
glm53_status glm53_uc_nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    size_t i = next_check(s, n, 0);
    if (i == n) return GLM53_OK;

    size_t cap = 2 * n + 64, o = 0, done = 0, scratch_cap = 0;
    uint8_t *res = malloc(cap);
    uint32_t *cps = NULL;
    int32_t *ccc = NULL;
    glm53_status st = res ? GLM53_OK : GLM53_ERR_OUT_OF_MEMORY;
    while (st == GLM53_OK && i < n) {
        size_t start = i, end = i;
        if (start > done) {
            start--;
            while (start > done && (s[start] & 0xC0) == 0x80) start--;
        }
        while (end < n) {
            int len;
            if (!(glm53_uc_bits(glm53_uc_decode(s + end, &len)) & GLM53_UC_NFC_CHECK)) break;
            end += (size_t)len;
        }
        size_t span = end - start, need = o + (start - done) + 72 * span + (n - end);
        if (need > cap) {
            uint8_t *p = realloc(res, need);
            if (!p) { st = GLM53_ERR_OUT_OF_MEMORY; break; }
            res = p;
            cap = need;
        }
        if (18 * span > scratch_cap) {
            free(cps);
            free(ccc);
            scratch_cap = 18 * span;
            cps = malloc(sizeof(uint32_t) * scratch_cap);
            ccc = malloc(sizeof(int32_t) * scratch_cap);
            if (!cps || !ccc) { st = GLM53_ERR_OUT_OF_MEMORY; break; }
        }
        memcpy(res + o, s + done, start - done);
        o += start - done;
        o += nfc_span(s + start, span, cps, ccc, res + o);
        done = end;
        i = next_check(s, n, end);
    }
    free(cps);
    free(ccc);
    if (st != GLM53_OK) {
        free(res);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: NFC of %zu bytes: out of memory", n);
    }
    memcpy(res + o, s + done, n - done);
    *out = res;
    *out_len = o + (n - done);
    return GLM53_OK;
}
