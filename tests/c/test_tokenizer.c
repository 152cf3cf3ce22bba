/*
 * test_tokenizer.c - unit tests of the tokenizer core on handmade files (no network, no references):
 * BPE merges and ignore_merges, leftmost-longest added tokens, special tokens as text, the long-word (heap) path,
 * decode's U+FFFD repair, the encode/decode capacity protocol, batch encoding on threads, the tiktoken form,
 * malformed and unsupported files, UTF-8 repair cases, the Unicode tables against the HF probe they came from,
 * and the hand-written cl100k scanner against PCRE2 running the same regex.
 * Parity with HF on real files is tests/lua/tokenizer_spec.lua.
 */
#include "test_util.h"
#include "core/text/tokenizer_internal.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------------------
 * Helpers
 */
typedef struct {
    char  *s;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)need + 1 > b->cap) {
        b->cap = (b->n + (size_t)need + 1) * 2;
        b->s = realloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)need + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)need;
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *d = malloc((size_t)n + 1);
    if (fread(d, 1, (size_t)n, f) != (size_t)n) n = 0;
    d[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return d;
}

static char tmp_path[64];

static const char *write_tmp(const char *data, size_t n) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/glm53_tok_test_XXXXXX");
    int fd = mkstemp(tmp_path);
    if (fd < 0) return NULL;
    if (write(fd, data, n) != (ssize_t)n) n = 0;
    close(fd);
    return tmp_path;
}

/* The byte-level spelling of byte b (GPT-2's alphabet), as UTF-8. */
static void spell_byte(int b, char *out) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = (uint32_t)b;
    if (!printable) {
        cp = 256;
        for (int k = 0; k < b; k++)
            if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) cp++;
    }
    int n = glm53_uc_encode(cp, (uint8_t *)out);
    out[n] = '\0';
}

/* A small tokenizer.json: the 256 bytes (id = byte), ab=256 abab=257 Ġab=258 cd=259 abcd=260 (no merge makes
 * abcd), merges a+b, ab+ab, Ġ+ab, c+d; added tokens <a> <a><b> <b> (special) and <think> (not special), written
 * with ids first_added.. (HF numbers them 261..264 whatever the file says). */
static char *handmade_json(int ignore_merges, const char *normalizer, const char *pre_tokenizer, int first_added) {
    sbuf b = {0};
    sb_printf(&b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
    const char *added[] = {"<a>", "<a><b>", "<b>", "<think>"};
    for (int k = 0; k < 4; k++)
        sb_printf(&b, "%s{\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false,"
                      " \"normalized\": false, \"special\": %s}", k ? ", " : "", first_added + k, added[k],
                  k < 3 ? "true" : "false");
    sb_printf(&b, "], \"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": null,", normalizer, pre_tokenizer);
    sb_printf(&b, " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true,"
                  " \"use_regex\": true},");
    sb_printf(&b, " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\":"
                  " null, \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false,"
                  " \"ignore_merges\": %s, \"vocab\": {", ignore_merges ? "true" : "false");
    for (int c = 0; c < 256; c++) {
        char sp[8];
        spell_byte(c, sp);
        if (c == '"' || c == '\\') sb_printf(&b, "\"\\%s\": %d, ", sp, c);
        else sb_printf(&b, "\"%s\": %d, ", sp, c);
    }
    sb_printf(&b, "\"ab\": 256, \"abab\": 257, \"\\u0120ab\": 258, \"cd\": 259, \"abcd\": 260},"
                  " \"merges\": [\"a b\", [\"ab\", \"ab\"], \"\xC4\xA0 ab\", [\"c\", \"d\"]]}}");
    return b.s;
}

static const char *GLM_PRE =
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
    " \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
    "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false},"
    " {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]}";

static glm53_tokenizer *load_json_text(const char *json) {
    const char *path = write_tmp(json, strlen(json));
    glm53_tokenizer *tok = NULL;
    glm53_status s = glm53_tokenizer_load(path, &tok);
    if (s != GLM53_OK) fprintf(stderr, "load: %s\n", glm53_last_error());
    unlink(path);
    return tok;
}

/* Encodes text and compares with want[n]. */
static int encodes_to(const glm53_tokenizer *tok, const char *text, int32_t flags, const int32_t *want, int64_t n) {
    int32_t ids[4096];
    int64_t got = -1;
    glm53_status s = glm53_tokenizer_encode(tok, text, strlen(text), flags, ids, 4096, &got);
    if (s != GLM53_OK || got != n) {
        fprintf(stderr, "  encode(\"%s\"): status %d, %lld ids:", text, s, (long long)got);
        for (int64_t k = 0; k < got && k < 16; k++) fprintf(stderr, " %d", ids[k]);
        fputc('\n', stderr);
        return 0;
    }
    for (int64_t k = 0; k < n; k++)
        if (ids[k] != want[k]) {
            fprintf(stderr, "  encode(\"%s\"): id %lld is %d, want %d\n", text, (long long)k, ids[k], want[k]);
            return 0;
        }
    return 1;
}

static int decodes_to(const glm53_tokenizer *tok, const int32_t *ids, int64_t n, int32_t flags, const char *want) {
    char out[256];
    int64_t len = -1;
    glm53_status s = glm53_tokenizer_decode(tok, ids, n, flags, out, sizeof out, &len);
    if (s != GLM53_OK || len != (int64_t)strlen(want) || memcmp(out, want, (size_t)len) != 0) {
        fprintf(stderr, "  decode: status %d, \"%.*s\", want \"%s\"\n", s, (int)(len > 0 ? len : 0), out, want);
        return 0;
    }
    return 1;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int64_t)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

/* ------------------------------------------------------------------------------------------------------------
 * BPE, added tokens, decode
 */
static void test_handmade(void) {
    char *json = handmade_json(1, "null", GLM_PRE, 261);
    glm53_tokenizer *tok = load_json_text(json);
    free(json);
    CHECK(tok != NULL, "handmade tokenizer.json loads");
    if (!tok) return;

    TEST_CASE("ignore_merges: a word that is a token is that token") {
        CHECK(encodes_to(tok, "abcd", 0, IDS(260)), "abcd");
        CHECK(encodes_to(tok, "abab", 0, IDS(257)), "abab");
        CHECK(encodes_to(tok, "abcdab", 0, IDS(256, 259, 256)), "abcdab merges");
        CHECK(encodes_to(tok, "x ab", 0, IDS('x', 258)), "space joins the word");
        CHECK(encodes_to(tok, "ba", 0, IDS('b', 'a')), "no merge");
    }
    TEST_CASE("added tokens: leftmost-longest, before pre-tokenization") {
        CHECK(encodes_to(tok, "<a><b>", 0, IDS(262)), "longest");
        CHECK(encodes_to(tok, "<a><a><b><b>", 0, IDS(261, 262, 263)), "leftmost, then longest");
        CHECK(encodes_to(tok, "x<a>y", 0, IDS('x', 261, 'y')), "inside a word");
        CHECK(encodes_to(tok, "<a", 0, IDS('<', 'a')), "a prefix is text");
        CHECK(encodes_to(tok, "ab<think>ab", 0, IDS(256, 264, 256)), "non-special added token");
        CHECK(encodes_to(tok, "<a>", GLM53_ENCODE_SPECIAL_AS_TEXT, IDS('<', 'a', '>')), "special as text");
        CHECK(encodes_to(tok, "<think>", GLM53_ENCODE_SPECIAL_AS_TEXT, IDS(264)), "non-special stays");
    }
    TEST_CASE("decode: bytes joined, invalid UTF-8 as U+FFFD, special tokens skipped on request") {
        CHECK(decodes_to(tok, IDS(258, 261, 264), 0, " ab<a><think>"), "pieces");
        CHECK(decodes_to(tok, IDS(258, 261, 264), GLM53_DECODE_SKIP_SPECIAL, " ab<think>"), "skip special");
        CHECK(decodes_to(tok, IDS(0xC3, 0xA9), 0, "\xC3\xA9"), "two byte tokens make a character");
        CHECK(decodes_to(tok, IDS(0xC3), 0, "\xEF\xBF\xBD"), "a lone lead byte");
        CHECK(decodes_to(tok, IDS(0xC3, 261, 0xA9), 0, "\xEF\xBF\xBD<a>\xEF\xBF\xBD"), "split by a token");
        CHECK(decodes_to(tok, IDS(0xC3, 261, 0xA9), GLM53_DECODE_SKIP_SPECIAL, "\xC3\xA9"), "joined when skipped");
        CHECK(decodes_to(tok, IDS(0xF0, 0x9F, 0x98), 0, "\xEF\xBF\xBD"), "truncated emoji: one U+FFFD");
        char out[8];
        int64_t n;
        CHECK(glm53_tokenizer_decode(tok, IDS(270), 0, out, sizeof out, &n) == GLM53_ERR_OUT_OF_RANGE, "unused id");
        CHECK(strstr(glm53_last_error(), "270") != NULL, "the message names the id: %s", glm53_last_error());
        CHECK(glm53_tokenizer_decode(tok, IDS(-1), 0, out, sizeof out, &n) == GLM53_ERR_OUT_OF_RANGE, "negative id");
    }
    TEST_CASE("invalid input UTF-8 is encoded as U+FFFD") {
        int32_t a[16], b[16];
        int64_t na, nb;
        CHECK(glm53_tokenizer_encode(tok, "a\xFF" "b", 3, 0, a, 16, &na) == GLM53_OK, "encode");
        CHECK(glm53_tokenizer_encode(tok, "a\xEF\xBF\xBD" "b", 5, 0, b, 16, &nb) == GLM53_OK, "encode");
        CHECK(na == nb && memcmp(a, b, sizeof(int32_t) * (size_t)na) == 0, "same ids");
    }
    TEST_CASE("capacity protocol") {
        int32_t ids[2];
        int64_t n = 0;
        CHECK(glm53_tokenizer_encode(tok, "ba ba ba", 8, 0, ids, 2, &n) == GLM53_ERR_OUT_OF_RANGE, "too small");
        CHECK(n == 8, "needed count %lld", (long long)n);   /* b a | Ġ b a | Ġ b a */
        CHECK(ids[0] == 'b' && ids[1] == 'a', "first ids written");
        CHECK(glm53_tokenizer_encode(tok, "", 0, 0, NULL, 0, &n) == GLM53_OK && n == 0, "empty text");
        char out[4];
        CHECK(glm53_tokenizer_decode(tok, IDS(258, 258), 0, out, sizeof out, &n) == GLM53_ERR_OUT_OF_RANGE, "small");
        CHECK(n == 6, "needed bytes %lld", (long long)n);
        CHECK(glm53_tokenizer_decode(tok, IDS(258), 0, out, sizeof out, &n) == GLM53_OK && out[3] == '\0',
              "NUL when it fits");
    }
    TEST_CASE("lookups") {
        const char *piece;
        int64_t len;
        CHECK(glm53_tokenizer_token_to_piece(tok, 258, &piece, &len) == GLM53_OK && len == 3 &&
              memcmp(piece, " ab", 3) == 0, "piece of Ġab");
        CHECK(glm53_tokenizer_token_to_piece(tok, 280, &piece, &len) == GLM53_ERR_OUT_OF_RANGE, "unused id");
        CHECK(strcmp(glm53_tokenizer_token_string(tok, 258), "\xC4\xA0" "ab") == 0, "spelling");
        CHECK(glm53_tokenizer_token_string(tok, 280) == NULL, "no spelling");
        CHECK(glm53_tokenizer_token_id(tok, "\xC4\xA0" "ab") == 258, "id of a spelling");
        CHECK(glm53_tokenizer_token_id(tok, "<a><b>") == 262, "id of an added token");
        CHECK(glm53_tokenizer_token_id(tok, "zzz") == -1, "absent");
        CHECK(glm53_tokenizer_n_vocab(tok) == 265, "n_vocab %d", glm53_tokenizer_n_vocab(tok));
        CHECK(glm53_tokenizer_is_special(tok, 261) && !glm53_tokenizer_is_special(tok, 264), "special flags");
        CHECK(glm53_tokenizer_is_added(tok, 264) && !glm53_tokenizer_is_added(tok, 258), "added flags");
        CHECK(!glm53_tokenizer_is_special(tok, 99999) && !glm53_tokenizer_is_special(tok, -3), "bad ids");
    }
    TEST_CASE("added tokens are numbered as HF numbers them, not as the file says") {
        char *odd = handmade_json(1, "null", GLM_PRE, 300);
        glm53_tokenizer *t2 = load_json_text(odd);
        free(odd);
        CHECK(t2 && glm53_tokenizer_token_id(t2, "<a>") == 261 && glm53_tokenizer_token_id(t2, "<think>") == 264 &&
              glm53_tokenizer_n_vocab(t2) == 265, "renumbered");
        glm53_tokenizer_free(t2);
    }
    TEST_CASE("batch encoding on threads equals one by one") {
        const char *texts[] = {"abcd", "<a><b>x", "", "ba ba", "abab abab<think>", "\xFF"};
        size_t lens[6];
        for (int k = 0; k < 6; k++) lens[k] = strlen(texts[k]);
        for (int threads = 1; threads <= 4; threads++) {
            int32_t ids[64];
            int64_t off[7];
            CHECK(glm53_tokenizer_encode_batch(tok, texts, lens, 6, 0, threads, ids, 64, off) == GLM53_OK, "batch");
            for (int k = 0; k < 6; k++) {
                int32_t one[16];
                int64_t n;
                glm53_tokenizer_encode(tok, texts[k], lens[k], 0, one, 16, &n);
                CHECK(off[k + 1] - off[k] == n && memcmp(ids + off[k], one, sizeof(int32_t) * (size_t)n) == 0,
                      "text %d on %d threads", k, threads);
            }
            int64_t small[7];
            CHECK(glm53_tokenizer_encode_batch(tok, texts, lens, 6, 0, threads, ids, 3, small) == GLM53_ERR_OUT_OF_RANGE
                  && small[6] == off[6], "batch capacity");
        }
    }
    glm53_tokenizer_free(tok);

    TEST_CASE("without ignore_merges every word is merged from bytes; long words take the heap path") {
        json = handmade_json(0, "null", GLM_PRE, 261);
        tok = load_json_text(json);
        free(json);
        CHECK(tok != NULL, "loads");
        if (!tok) return;
        CHECK(encodes_to(tok, "abcd", 0, IDS(256, 259)), "abcd from merges");
        char word[601];
        int32_t want[150];
        for (int k = 0; k < 300; k++) memcpy(word + 2 * k, "ab", 2);
        word[600] = '\0';
        for (int k = 0; k < 150; k++) want[k] = 257;
        CHECK(encodes_to(tok, word, 0, want, 150), "600-byte word");
        word[599] = 'c';   /* 299 x "ab" then "ac": 149 x abab, one ab left over, then a c */
        int32_t want2[152];
        memcpy(want2, want, sizeof(int32_t) * 149);
        want2[149] = 256;
        want2[150] = 'a';
        want2[151] = 'c';
        CHECK(encodes_to(tok, word, 0, want2, 152), "600-byte word ending in ac");
        glm53_tokenizer_free(tok);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * The tiktoken form
 */
static void test_tiktoken(void) {
    /* bytes at rank = byte, then ab=256 cd=257 abcd=258; "YWI=" is base64 of "ab" */
    sbuf b = {0};
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int c = 0; c < 256; c++) sb_printf(&b, "%c%c== %d\n", b64[c >> 2], b64[(c & 3) << 4], c);
    sb_printf(&b, "YWI= 256\nY2Q= 257\nYWJjZA== 258\n");
    const char *path = write_tmp(b.s, b.n);
    free(b.s);
    const char *special[] = {"<|end|>", "<|endless|>"};
    const int32_t special_ids[] = {300, 301};
    glm53_tokenizer *tok = NULL;
    TEST_CASE("tiktoken: lowest rank of the concatenation merges first; whole pieces are looked up") {
        CHECK(glm53_tokenizer_load_tiktoken(path, NULL, special, special_ids, 2, &tok) == GLM53_OK, "%s",
              glm53_last_error());
        if (!tok) break;
        CHECK(encodes_to(tok, "abcd", 0, IDS(258)), "whole piece");
        CHECK(encodes_to(tok, "abcdab", 0, IDS(258, 256)), "merges by rank");
        CHECK(encodes_to(tok, "x<|endless|>y<|end|>", 0, IDS('x', 301, 'y', 300)), "special tokens");
        CHECK(glm53_tokenizer_n_vocab(tok) == 302, "n_vocab");
        CHECK(glm53_tokenizer_is_special(tok, 301), "special");
        CHECK(strcmp(glm53_tokenizer_token_string(tok, 32), "\xC4\xA0") == 0, "byte-level spelling of a space");
        CHECK(decodes_to(tok, IDS(258, 32, 300), GLM53_DECODE_SKIP_SPECIAL, "abcd "), "decode");
        glm53_tokenizer_free(tok);
        tok = NULL;
        CHECK(glm53_tokenizer_load(path, &tok) == GLM53_OK, "detected as tiktoken");
        CHECK(tok && encodes_to(tok, "<|end|>", 0, IDS('<', '|', 'e', 'n', 'd', '|', '>')), "no special tokens");
        glm53_tokenizer_free(tok);
    }
    unlink(path);
    TEST_CASE("tiktoken: malformed files") {
        const char *bad[] = {"YWI=\n", "YWI= -4\n", "!!!! 3\n", "YWI= 1\nYWI= 2\n", ""};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            path = write_tmp(bad[k], strlen(bad[k]));
            tok = NULL;
            CHECK(glm53_tokenizer_load(path, &tok) == GLM53_ERR_FORMAT && tok == NULL, "bad file %zu: %s", k,
                  glm53_last_error());
            unlink(path);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Bad and unsupported files
 */
static void test_bad_files(void) {
    TEST_CASE("every truncation of a valid file fails cleanly") {
        char *json = handmade_json(1, "null", GLM_PRE, 261);
        size_t n = strlen(json);
        int failures = 0;
        for (size_t cut = 0; cut < n; cut += 37) {
            const char *path = write_tmp(json, cut);
            glm53_tokenizer *tok = NULL;
            glm53_status s = glm53_tokenizer_load(path, &tok);
            unlink(path);
            if (s == GLM53_OK || tok != NULL) failures++;
            glm53_tokenizer_free(tok);
        }
        CHECK(failures == 0, "%d truncated files loaded", failures);
        free(json);
    }
    TEST_CASE("unsupported settings are named") {
        struct { const char *norm, *pre, *needle; } cases[] = {
            {"{\"type\": \"Lowercase\"}", NULL, "Lowercase"},
            {"null", "{\"type\": \"Whitespace\"}", "Whitespace"},
            {"null", "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Isolated\"}", "Regex"},
            {"null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}", "Removed"},
            {"null", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", "add_prefix_space"},
            {"null", "null", "pre-tokenizer"},
            {"null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}", "ByteLevel"},
            {"null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}", "regex"},
            /* fuzz_tokenizer: \C matched single bytes of characters, and later stages read past their pieces */
            {"null", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\":"
                     " {\"Regex\": \"\\\\C\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}", "\\C"},
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            char *json = handmade_json(1, cases[k].norm, cases[k].pre ? cases[k].pre : GLM_PRE, 261);
            const char *path = write_tmp(json, strlen(json));
            glm53_tokenizer *tok = NULL;
            glm53_status s = glm53_tokenizer_load(path, &tok);
            unlink(path);
            CHECK(s != GLM53_OK && tok == NULL && strstr(glm53_last_error(), cases[k].needle),
                  "case %zu: status %d, \"%s\"", k, s, glm53_last_error());
            free(json);
        }
        /* fuzz_tokenizer: 17 splits loaded, then every encode failed */
        sbuf many = {0};
        sb_printf(&many, "{\"type\": \"Sequence\", \"pretokenizers\": [");
        for (int k = 0; k < 17; k++)
            sb_printf(&many, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}, ");
        sb_printf(&many, "{\"type\": \"ByteLevel\", \"use_regex\": false}]}");
        char *json = handmade_json(1, "null", many.s, 261);
        free(many.s);
        glm53_tokenizer *tok = load_json_text(json);
        free(json);
        CHECK(tok == NULL && strstr(glm53_last_error(), "more than 16"), "17 splits: %s", glm53_last_error());
        CHECK(glm53_tokenizer_load("/nonexistent/tokenizer.json", &tok) == GLM53_ERR_IO, "missing file");
        CHECK(glm53_tokenizer_load(NULL, &tok) == GLM53_ERR_INVALID_ARG, "NULL path");
        glm53_tokenizer_free(NULL);
    }
    TEST_CASE("ids that sparse are refused, not allocated (fuzz_tokenizer: one id of 2e9 asked for 40 GB)") {
        const char *files[] = {"YQ== 0\nYg== 2000000000\n",
                               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2000000000},"
                               " \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"},"
                               " \"decoder\": {\"type\": \"ByteLevel\"}}"};
        for (int k = 0; k < 2; k++) {
            const char *path = write_tmp(files[k], strlen(files[k]));
            glm53_tokenizer *tok = NULL;
            glm53_status s = glm53_tokenizer_load(path, &tok);
            unlink(path);
            CHECK(s == GLM53_ERR_UNSUPPORTED && tok == NULL && strstr(glm53_last_error(), "sparse"), "file %d: %s", k,
                  glm53_last_error());
        }
        const char *gap = "YQ== 0\nYg== 65537\n";   /* 65536 unused ids are still fine */
        const char *path = write_tmp(gap, strlen(gap));
        glm53_tokenizer *tok = NULL;
        CHECK(glm53_tokenizer_load(path, &tok) == GLM53_OK && glm53_tokenizer_n_vocab(tok) == 65538, "a gap: %s",
              glm53_last_error());
        unlink(path);
        glm53_tokenizer_free(tok);
    }
    TEST_CASE("an added token whose HF id another token has is refused (fuzz_tokenizer: decoded as the other)") {
        /* The vocabulary skips id 5, so HF numbers the added token model_size = 6, which "f" has. */
        const char *json = "{\"added_tokens\": [{\"id\": 7, \"content\": \"<x>\", \"special\": true}],"
                           " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"d\": 3,"
                           " \"e\": 4, \"f\": 6}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"},"
                           " \"decoder\": {\"type\": \"ByteLevel\"}}";
        const char *path = write_tmp(json, strlen(json));
        glm53_tokenizer *tok = NULL;
        glm53_status s = glm53_tokenizer_load(path, &tok);
        unlink(path);
        CHECK(s == GLM53_ERR_FORMAT && tok == NULL && strstr(glm53_last_error(), "\"f\" already has"), "%s",
              glm53_last_error());
    }
    TEST_CASE("a split regex that matches empty at the end reads nothing past the text (fuzz_tokenizer)") {
        char *json = handmade_json(1, "null",
                                   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\":"
                                   " {\"Regex\": \"$\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\","
                                   " \"use_regex\": false}]}", 261);
        glm53_tokenizer *tok = load_json_text(json);
        free(json);
        CHECK(tok != NULL, "loads");
        char *text = malloc(4);   /* exactly the text: ASan sees a read past it */
        memcpy(text, "abab", 4);
        int32_t ids[8];
        int64_t n = 0;
        CHECK(tok && glm53_tokenizer_encode(tok, text, 4, 0, ids, 8, &n) == GLM53_OK && n == 1 && ids[0] == 257,
              "abab is one token");
        free(text);
        glm53_tokenizer_free(tok);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * UTF-8 and Unicode
 */
static void test_utf8(void) {
    TEST_CASE("UTF-8 repair follows the maximal-subpart rule") {
        struct { const char *in, *out; } cases[] = {
            {"abc", "abc"}, {"\xE2\x82", "\xEF\xBF\xBD"}, {"\xE2\x82" "A", "\xEF\xBF\xBD" "A"},
            {"\xF0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"}, {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
            {"\xC0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"},
            {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
            {"\xF0\x9F\x98", "\xEF\xBF\xBD"}, {"a\xFF" "b", "a\xEF\xBF\xBD" "b"}, {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            uint8_t out[64];
            size_t n = glm53_uc_utf8_lossy((const uint8_t *)cases[k].in, strlen(cases[k].in), out);
            CHECK(n == strlen(cases[k].out) && memcmp(out, cases[k].out, n) == 0, "case %zu", k);
        }
        struct { const char *in; size_t tail; } tails[] = {
            {"\xF0\x9F\x98", 3}, {"\xE2", 1}, {"a\xC3", 1}, {"a", 0}, {"\xE0\x80", 0}, {"\xF0\x9F\x98\x80", 0},
            {"\x80\x80", 0}, {"\xED\x9F", 2}, {"\xED\xA0", 0},
        };
        for (size_t k = 0; k < sizeof tails / sizeof tails[0]; k++)
            CHECK(glm53_uc_utf8_incomplete_tail((const uint8_t *)tails[k].in, strlen(tails[k].in)) == tails[k].tail,
                  "tail case %zu", k);
    }
}

static void test_unicode_tables(void) {
    size_t len;
    char *text = read_text("tests/tokenizer/hf_unicode.json", &len);
    CHECK(text != NULL, "tests/tokenizer/hf_unicode.json readable (run from the repository root)");
    if (!text) return;
    cJSON *probe = cJSON_Parse(text);
    free(text);
    CHECK(glm53_uc_init() == GLM53_OK, "class table");
    TEST_CASE("class table = HF's regex classes, every code point") {
        static const char *names[] = {"L", "N", "P", "S", "M", "WS"};
        uint8_t *want = calloc(0x110000, 1);
        for (int k = 0; k < 6; k++) {
            const cJSON *r;
            cJSON_ArrayForEach(r, cJSON_GetObjectItem(cJSON_GetObjectItem(probe, "classes"), names[k])) {
                for (int cp = cJSON_GetArrayItem(r, 0)->valueint; cp <= cJSON_GetArrayItem(r, 1)->valueint; cp++)
                    want[cp] |= (uint8_t)(1 << k);
            }
        }
        int bad = 0;
        for (uint32_t cp = 0; cp < 0x110000; cp++)
            if ((glm53_uc_bits(cp) & 63) != want[cp] && bad++ < 5) fprintf(stderr, "  U+%04X\n", cp);
        CHECK(bad == 0, "%d code points differ", bad);
        free(want);
    }
    TEST_CASE("NFC = HF's NFC for every code point it changes") {
        int bad = 0, checked = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(probe, "nfc")) {
            uint8_t in[4], want[64], *out;
            size_t n_in = (size_t)glm53_uc_encode((uint32_t)atoi(e->string), in), n_want = 0, n_out;
            const cJSON *c;
            cJSON_ArrayForEach(c, e) n_want += (size_t)glm53_uc_encode((uint32_t)c->valueint, want + n_want);
            glm53_uc_nfc(in, n_in, &out, &n_out);
            if (!out || n_out != n_want || memcmp(out, want, n_out) != 0) bad++;
            free(out);
            checked++;
        }
        CHECK(checked > 1000 && bad == 0, "%d of %d differ", bad, checked);
        /* text that needs composition, reordering and Hangul */
        struct { const char *in, *out; } cases[] = {
            {"e\xCC\x81", "\xC3\xA9"}, {"a\xCC\x81\xCC\xA8", "\xC4\x85\xCC\x81"}, {"a\xCC\xA8\xCC\x81", "\xC4\x85\xCC\x81"},
            {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"}, {"\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81"},
            {"\xCC\x81" "a", "\xCC\x81" "a"},
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            uint8_t *out;
            size_t n;
            glm53_uc_nfc((const uint8_t *)cases[k].in, strlen(cases[k].in), &out, &n);
            const char *got = out ? (const char *)out : cases[k].in;
            size_t gn = out ? n : strlen(cases[k].in);
            CHECK(gn == strlen(cases[k].out) && memcmp(got, cases[k].out, gn) == 0, "NFC case %zu", k);
            free(out);
        }
    }
    cJSON_Delete(probe);
}

/* ------------------------------------------------------------------------------------------------------------
 * Scanner vs PCRE2
 */
typedef struct {
    size_t ends[8192];
    int    n;
    const uint8_t *base;
} piece_log;

static glm53_status log_piece(void *ctx, const uint8_t *piece, size_t len) {
    piece_log *l = ctx;
    if (l->n < 8192) l->ends[l->n++] = (size_t)(piece - l->base) + len;
    return GLM53_OK;
}

static int same_split(glm53_split_stage *a, glm53_split_stage *b, const uint8_t *s, size_t n) {
    static piece_log la, lb;
    la.n = lb.n = 0;
    la.base = lb.base = s;
    glm53_split_run(&a, 1, s, n, log_piece, &la);
    glm53_split_run(&b, 1, s, n, log_piece, &lb);
    return la.n == lb.n && memcmp(la.ends, lb.ends, sizeof(size_t) * (size_t)la.n) == 0;
}

static void test_scanner_vs_pcre2(void) {
    /* The same regex twice: as written it selects the scanner, wrapped in a group it goes to PCRE2. */
    const char *patterns[] = {glm53_split_pattern_cl100k,
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    size_t len;
    char *text = read_text("tests/tokenizer/corpus.json", &len);
    cJSON *corpus = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(corpus != NULL, "tests/tokenizer/corpus.json readable");
    /* characters that meet every rule of the pattern, for random strings */
    static const uint32_t pool[] = {'\'', 's', 'S', 0x17F, 't', 'T', 'r', 'R', 'e', 'E', 'v', 'l', 'L', 'm', 'd', 'D',
        'a', 'x', 0xE9, 0x3B1, 0x4E2D, 0xAC00, 0x31350, '0', '7', 0x661, 0xFF11, 0xBD, 0x2167, ' ', ' ', '\t', '\n',
        '\r', 0xA0, 0x2003, 0x3000, 0x85, 0x2028, 0x0B, '!', '.', '<', '|', 0x301, 0x1F600, 0x200D, 0xFE0F, 0x10FFFF,
        0xE000, 0x1C, 0};
    for (int p = 0; p < 2; p++) {
        glm53_split_stage *scan = NULL, *pcre = NULL;
        char wrapped[512];
        snprintf(wrapped, sizeof wrapped, "(?:%s)", patterns[p]);
        CHECK(glm53_split_stage_create(patterns[p], &scan) == GLM53_OK, "scanner stage");
        CHECK(glm53_split_stage_create(wrapped, &pcre) == GLM53_OK, "PCRE2 stage: %s", glm53_last_error());
        if (!scan || !pcre) return;
        CHECK(glm53_split_stage_is_scanner(scan) && !glm53_split_stage_is_scanner(pcre), "engines");
        TEST_CASE("the scanner splits like PCRE2 with HF's classes") {
            int bad = 0, n = 0;
            const cJSON *item;
            cJSON_ArrayForEach(item, corpus) {
                if (!cJSON_IsString(item)) continue;
                const uint8_t *s = (const uint8_t *)item->valuestring;
                size_t sl = strlen(item->valuestring);
                if (!same_split(scan, pcre, s, sl) && bad++ < 3) fprintf(stderr, "  corpus: %.40s\n", s);
                n++;
            }
            test_seed(42 + (uint64_t)p);
            for (int k = 0; k < 20000; k++) {
                uint8_t s[200];
                size_t sl = 0;
                int chars = 1 + (int)(test_next() % 40);
                for (int c = 0; c < chars; c++) {
                    uint32_t cp = pool[test_next() % (sizeof pool / sizeof pool[0])];
                    if (cp == 0) cp = 1 + (uint32_t)(test_next() % 0x2FFFF);
                    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'q';
                    sl += (size_t)glm53_uc_encode(cp, s + sl);
                }
                if (!same_split(scan, pcre, s, sl) && bad++ < 3) fprintf(stderr, "  random string %d\n", k);
                n++;
            }
            CHECK(bad == 0, "pattern %d: %d of %d strings split differently", p, bad, n);
        }
        glm53_split_stage_free(scan);
        glm53_split_stage_free(pcre);
    }
    cJSON_Delete(corpus);
}

int main(void) {
    test_handmade();
    test_tiktoken();
    test_bad_files();
    test_utf8();
    test_unicode_tables();
    test_scanner_vs_pcre2();
    return test_finish("test_tokenizer");
}
