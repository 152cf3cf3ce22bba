/*
 * fuzz_tokenizer.c - libFuzzer target: loading a tokenizer from arbitrary bytes (tokenizer.json, or a tiktoken
 * rank file: whatever glm53_tokenizer_load would make of the file), then encoding and decoding with what loaded.
 *
 * The input goes through glm53_tokenizer_load_buffer, the body of glm53_tokenizer_load after it has read the
 * file. When the file loads, a few texts are encoded and decoded: fixed ones (ASCII, mixed scripts, whitespace
 * runs, a long word for the heap merge path), windows of the input itself (which spell its tokens) and the
 * decoding of ids the input picks. For each text, what must hold (a violation traps):
 *   - encode succeeds (a regex engine resource limit, GLM53_ERR_BACKEND, is the one clean failure allowed);
 *     every id has a token; a short buffer gets GLM53_ERR_OUT_OF_RANGE with the same count and a prefix of
 *     the same ids; encoding with GLM53_ENCODE_SPECIAL_AS_TEXT succeeds too;
 *   - decode succeeds, with or without GLM53_DECODE_SKIP_SPECIAL, and writes valid UTF-8;
 *   - round trip: decode(encode(t)) == t when t is valid UTF-8 already in NFC, no added token's text occurs in
 *     t, and every byte of t has a plain (not added) single-byte token: then nothing in HF's pipeline may lose
 *     or change a byte;
 *   - batch encoding on two threads gives the ids of encoding one by one.
 * Spellings and ids agree (token_id(token_string(id)) names a token of that spelling). Built and run by
 * tests/fuzz/run.sh (target "tokenizer").
 */
#include "core/text/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>

enum { MAX_IDS = 4096 };

static int32_t ids[MAX_IDS], ids2[MAX_IDS];

#define REQUIRE(cond)                                                            \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz_tokenizer: %s failed (line %d); last error: %s\n", #cond, __LINE__, \
                    glm53_last_error());                                         \
            __builtin_trap();                                                    \
        }                                                                        \
    } while (0)

/* The byte-level spelling of byte b (GPT-2's alphabet), NUL-terminated. */
static void spell_byte(int b, char *sp) {
#define PRINTABLE(k) (((k) >= '!' && (k) <= '~') || ((k) >= 0xA1 && (k) <= 0xAC) || ((k) >= 0xAE && (k) <= 0xFF))
    uint32_t cp = (uint32_t)b;
    if (!PRINTABLE(b)) {
        cp = 256;
        for (int k = 0; k < b; k++) cp += !PRINTABLE(k);
    }
#undef PRINTABLE
    sp[glm53_uc_encode(cp, (uint8_t *)sp)] = '\0';
}

/* Which bytes have a plain single-byte token (the id spelled as the byte, not an added token, piece = the byte). */
static void plain_bytes(const glm53_tokenizer *tok, uint8_t has[256]) {
    for (int b = 0; b < 256; b++) {
        char sp[8];
        spell_byte(b, sp);
        int32_t id = glm53_tokenizer_token_id(tok, sp);
        const char *piece;
        int64_t len;
        has[b] = id >= 0 && !glm53_tokenizer_is_added(tok, id) &&
                 glm53_tokenizer_token_to_piece(tok, id, &piece, &len) == GLM53_OK && len == 1 &&
                 (uint8_t)piece[0] == b;
    }
}

static int contains(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return 0;
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0) return 1;
    return 0;
}

/* Whether decode(encode(t)) must give t back (see the header). */
static int must_round_trip(const glm53_tokenizer *tok, const uint8_t has[256], const char *t, size_t n) {
    if (glm53_uc_utf8_valid_prefix((const uint8_t *)t, n) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!has[(uint8_t)t[i]]) return 0;
    uint8_t *norm = NULL;
    size_t norm_len = 0;
    if (glm53_uc_nfc((const uint8_t *)t, n, &norm, &norm_len) != GLM53_OK) return 0;
    int stable = !norm || (norm_len == n && memcmp(norm, t, n) == 0);
    free(norm);
    if (!stable) return 0;
    int32_t n_vocab = glm53_tokenizer_n_vocab(tok);
    for (int32_t id = 0; id < n_vocab; id++) {
        if (!glm53_tokenizer_is_added(tok, id)) continue;
        const char *s = glm53_tokenizer_token_string(tok, id);
        if (contains(t, n, s, strlen(s))) return 0;
        /* a "normalized" added token is matched by its NFC form */
        if (glm53_uc_nfc((const uint8_t *)s, strlen(s), &norm, &norm_len) != GLM53_OK) return 0;
        int hit = norm && contains(t, n, (const char *)norm, norm_len);
        free(norm);
        if (hit) return 0;
    }
    return 1;
}

/* Decodes ids[n] with flags into a malloc'ed, NUL-terminated string (*len bytes); the count a first call with no
 * buffer reports must be what the second call writes. */
static char *decode(const glm53_tokenizer *tok, const int32_t *ids, int64_t n, int32_t flags, int64_t *len) {
    int64_t need = -1;
    glm53_status s = glm53_tokenizer_decode(tok, ids, n, flags, NULL, 0, &need);
    REQUIRE(need >= 0 && (s == GLM53_OK) == (need == 0));
    char *text = malloc((size_t)need + 1);
    REQUIRE(text != NULL);
    REQUIRE(glm53_tokenizer_decode(tok, ids, n, flags, text, need + 1, len) == GLM53_OK);
    REQUIRE(*len == need && text[need] == '\0');
    REQUIRE(glm53_uc_utf8_valid_prefix((const uint8_t *)text, (size_t)need) == (size_t)need);
    return text;
}

/* Encodes and decodes t[0, n) and checks every property of the header. */
static void check_text(const glm53_tokenizer *tok, const uint8_t has[256], const char *t, size_t n) {
    int32_t n_vocab = glm53_tokenizer_n_vocab(tok);
    int64_t n_ids = -1;
    glm53_status s = glm53_tokenizer_encode(tok, t, n, 0, ids, MAX_IDS, &n_ids);
    if (s == GLM53_ERR_BACKEND) return;   /* PCRE2 match or JIT stack limit on a pathological regex */
    REQUIRE(s == GLM53_OK || (s == GLM53_ERR_OUT_OF_RANGE && n_ids > MAX_IDS));
    if (s != GLM53_OK) return;
    for (int64_t k = 0; k < n_ids; k++) {
        const char *piece;
        int64_t len;
        REQUIRE(ids[k] >= 0 && ids[k] < n_vocab);
        REQUIRE(glm53_tokenizer_token_to_piece(tok, ids[k], &piece, &len) == GLM53_OK);
        REQUIRE(glm53_tokenizer_token_string(tok, ids[k]) != NULL);
    }
    if (n_ids > 1) {   /* the capacity protocol */
        int64_t half = n_ids / 2, again = -1;
        REQUIRE(glm53_tokenizer_encode(tok, t, n, 0, ids2, half, &again) == GLM53_ERR_OUT_OF_RANGE);
        REQUIRE(again == n_ids && memcmp(ids, ids2, sizeof(int32_t) * (size_t)half) == 0);
    }
    int64_t n_plain = -1;
    s = glm53_tokenizer_encode(tok, t, n, GLM53_ENCODE_SPECIAL_AS_TEXT, ids2, MAX_IDS, &n_plain);
    REQUIRE(s == GLM53_OK || s == GLM53_ERR_BACKEND || (s == GLM53_ERR_OUT_OF_RANGE && n_plain > MAX_IDS));

    int64_t len = -1, len2 = -1;
    char *text = decode(tok, ids, n_ids, 0, &len);
    if (must_round_trip(tok, has, t, n) && ((size_t)len != n || memcmp(text, t, n) != 0)) {
        fprintf(stderr, "fuzz_tokenizer: round trip of \"%.*s\" gave \"%.*s\"\n", (int)n, t, (int)len, text);
        __builtin_trap();
    }
    free(text);
    text = decode(tok, ids, n_ids, GLM53_DECODE_SKIP_SPECIAL, &len2);
    REQUIRE(len2 <= len);
    free(text);
}

static void check_batch(const glm53_tokenizer *tok, const char *a, size_t na, const char *b, size_t nb) {
    int64_t n_a = -1, n_b = -1;
    if (glm53_tokenizer_encode(tok, a, na, 0, ids, MAX_IDS / 2, &n_a) != GLM53_OK) return;
    if (glm53_tokenizer_encode(tok, b, nb, 0, ids + n_a, MAX_IDS / 2, &n_b) != GLM53_OK) return;
    const char *texts[2] = {a, b};
    size_t lengths[2] = {na, nb};
    int64_t offsets[3];
    REQUIRE(glm53_tokenizer_encode_batch(tok, texts, lengths, 2, 0, 2, ids2, MAX_IDS, offsets) == GLM53_OK);
    REQUIRE(offsets[0] == 0 && offsets[1] == n_a && offsets[2] == n_a + n_b);
    REQUIRE(memcmp(ids, ids2, sizeof(int32_t) * (size_t)(n_a + n_b)) == 0);
}

static void check_spellings(const glm53_tokenizer *tok, uint32_t seed) {
    int32_t n_vocab = glm53_tokenizer_n_vocab(tok);
    REQUIRE(n_vocab > 0);
    for (int k = 0; k < 512; k++) {
        int32_t id = k < 256 ? k : (int32_t)((seed * 2654435761u + (uint32_t)k * 40503u) % (uint32_t)n_vocab);
        const char *s = glm53_tokenizer_token_string(tok, id);
        if (!s) continue;
        int32_t back = glm53_tokenizer_token_id(tok, s);
        REQUIRE(back >= 0 && strcmp(glm53_tokenizer_token_string(tok, back), s) == 0);
    }
    REQUIRE(glm53_tokenizer_token_string(tok, -1) == NULL && glm53_tokenizer_token_string(tok, n_vocab) == NULL);
    REQUIRE(!glm53_tokenizer_is_special(tok, n_vocab) && !glm53_tokenizer_is_added(tok, -1));
}

static const char *const fixed_texts[] = {
    "Hello, world! It's 2024: 12345 tokens; don't panic.",
    "h\xC3\xA9llo w\xC3\xB6rld \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 caf\x65\xCC\x81 \xE2\x80\x83 x",
    "  \n\n\t  a\r\nb   \n",
    "<|user|>hi<|assistant|><think></think>[gMASK]<sop>",
    "\xFF\xFE invalid \xE2\x82 utf-8 \xC0\xAF",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    glm53_tokenizer *tok = NULL;
    glm53_status s = glm53_tokenizer_load_buffer(buf, size, "fuzz/tokenizer.json", &tok);
    free(buf);
    REQUIRE((s == GLM53_OK) == (tok != NULL));
    if (!tok) return 0;

    uint32_t seed = 2166136261u;
    for (size_t i = 0; i < size; i++) seed = (seed ^ data[i]) * 16777619u;
    uint8_t has[256];
    plain_bytes(tok, has);
    check_spellings(tok, seed);
    for (size_t k = 0; k < sizeof fixed_texts / sizeof fixed_texts[0]; k++)
        check_text(tok, has, fixed_texts[k], strlen(fixed_texts[k]));

    char long_word[600];   /* over BPE_SMALL bytes: the heap merge path */
    for (size_t k = 0; k < sizeof long_word; k++) long_word[k] = "abcab"[k % 5];
    check_text(tok, has, long_word, sizeof long_word);

    /* windows of the input: its start, a window the input picks, its end */
    size_t w = size < 96 ? size : 96, at = size > w ? seed % (size - w + 1) : 0;
    check_text(tok, has, (const char *)data, w);
    check_text(tok, has, (const char *)data + at, w);
    check_text(tok, has, (const char *)data + size - w, w);

    /* the decoding of ids the input picks, encoded again */
    int32_t n_vocab = glm53_tokenizer_n_vocab(tok), picked[16];
    int n_picked = 0;
    for (int k = 0; k < 16; k++) {
        int32_t id = (int32_t)((seed >> (k % 16)) * 2246822519u % (uint32_t)n_vocab) ^ (k & 1);
        if (id < n_vocab && glm53_tokenizer_token_string(tok, id)) picked[n_picked++] = id;
        seed = seed * 1103515245u + 12345u;
    }
    int64_t len = -1;
    char *text = decode(tok, picked, n_picked, 0, &len);
    check_text(tok, has, text, len < 4096 ? (size_t)len : 4096);
    free(text);

    check_batch(tok, fixed_texts[0], strlen(fixed_texts[0]), (const char *)data + at, w);
    glm53_tokenizer_free(tok);
    return 0;
}
