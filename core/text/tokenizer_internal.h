/*
 * tokenizer_internal.h - what the tokenizer's files share: Unicode helpers (tokenizer_unicode.c, with the
 * generated tables of tokenizer_tables.c) and the pre-tokenizer (tokenizer_split.c). Never installed.
 *
 * All text here is UTF-8. Code that calls the helpers marked "valid UTF-8" repairs its input first
 * (glm53_uc_utf8_lossy), so they decode without checks.
 */
#ifndef GLM53_TOKENIZER_INTERNAL_H
#define GLM53_TOKENIZER_INTERNAL_H

#include "core/base/base.h"

#include <stddef.h>
#include <stdint.h>

/* glm53_tokenizer_load on the bytes of a file: data[0, len), NUL-terminated at data[len], which the JSON reader
 * unescapes in place (so data is changed and may be freed once this returns). path names the file in messages.
 * glm53_tokenizer_load is read_file + this; the fuzzer (tests/fuzz/fuzz_tokenizer.c) calls it directly. */
glm53_status glm53_tokenizer_load_buffer(char *data, size_t len, const char *path, glm53_tokenizer **out);

/* ------------------------------------------------------------------------------------------------------------
 * Unicode classes, as HF tokenizers' regex engine (Oniguruma) sees them
 */
enum {
    GLM53_UC_L  = 1,    /* \p{L} */
    GLM53_UC_N  = 2,    /* \p{N} */
    GLM53_UC_P  = 4,    /* \p{P} */
    GLM53_UC_S  = 8,    /* \p{S} */
    GLM53_UC_M  = 16,   /* \p{M} */
    GLM53_UC_WS = 32,   /* \s: the 25 White_Space code points */
    GLM53_UC_NFC_CHECK = 64,   /* NFC may change text containing this code point */
};

extern const uint32_t glm53_uc_class_ranges[][3];
extern const int32_t  glm53_uc_n_class_ranges;
extern const uint32_t glm53_uc_ccc[][2];
extern const int32_t  glm53_uc_n_ccc;
extern const uint32_t glm53_uc_decomp_index[][3];
extern const int32_t  glm53_uc_n_decomp;
extern const uint32_t glm53_uc_decomp_data[];
extern const uint64_t glm53_uc_compose[][2];
extern const int32_t  glm53_uc_n_compose;

/* Two-stage lookup built once from the ranges: bits of code point cp = stage2[stage1[cp >> 8]][cp & 255]. */
extern const uint16_t *glm53_uc_stage1;
extern const uint8_t  *glm53_uc_stage2;
/* Builds the lookup (idempotent, thread-safe); GLM53_ERR_OUT_OF_MEMORY if it cannot. */
glm53_status glm53_uc_init(void);

static inline uint32_t glm53_uc_bits(uint32_t cp) {
    if (cp >= 0x110000) return 0;
    return glm53_uc_stage2[(size_t)glm53_uc_stage1[cp >> 8] * 256 + (cp & 255)];
}

/* Decodes the code point at s[0] of valid UTF-8; *len receives its byte length (1-4). */
static inline uint32_t glm53_uc_decode(const uint8_t *s, int *len) {
    uint8_t b = s[0];
    if (b < 0x80) { *len = 1; return b; }
    if (b < 0xE0) { *len = 2; return ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F); }
    if (b < 0xF0) { *len = 3; return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); }
    *len = 4;
    return ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
           (s[3] & 0x3F);
}

/* Writes cp as UTF-8 to out (room for 4 bytes), returns the byte count. */
int glm53_uc_encode(uint32_t cp, uint8_t *out);

/* Length of the longest prefix of s[0, n) that is well-formed UTF-8. */
size_t glm53_uc_utf8_valid_prefix(const uint8_t *s, size_t n);

/* Copies s[0, n) to out, replacing each maximal ill-formed subsequence with U+FFFD (EF BF BD), the rule of
 * Rust's String::from_utf8_lossy, Python's decode(errors="replace") and WHATWG. out needs room for 3 * n bytes.
 * Returns the bytes written. */
size_t glm53_uc_utf8_lossy(const uint8_t *s, size_t n, uint8_t *out);

/* Bytes at the end of s[0, n) that begin a well-formed sequence but stop before its end (0-3): what a
 * streaming decoder must hold back until more bytes arrive. */
size_t glm53_uc_utf8_incomplete_tail(const uint8_t *s, size_t n);

/* NFC of valid UTF-8 s[0, n), as HF's NFC normalizer computes it. When the text is already NFC for sure (no code
 * point with GLM53_UC_NFC_CHECK) returns GLM53_OK with *out = NULL; otherwise *out is a malloc'ed result of
 * *out_len bytes that the caller frees. */
glm53_status glm53_uc_nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len);

/* ------------------------------------------------------------------------------------------------------------
 * Pre-tokenizer: the regex splits of HF's Split(behavior Isolated) and ByteLevel(use_regex) steps
 */
typedef struct glm53_split_stage glm53_split_stage;

enum { GLM53_SPLIT_MAX_STAGES = 16 };   /* stages one split may run (GLM-5.3 has one, deepseek_v3 three) */

/* Compiles one split regex. The cl100k family (GLM-5.3, llama3: \p{N}{1,3}; qwen2/3: \p{N}) runs on a
 * hand-written scanner; any other pattern runs on PCRE2 (UTF, UCP, JIT) with \p{L} \p{N} \p{P} \p{S} \p{M} \s
 * replaced by HF's class tables, so both follow HF's Unicode version. */
glm53_status glm53_split_stage_create(const char *pattern, glm53_split_stage **out);
void         glm53_split_stage_free(glm53_split_stage *stage);
/* 1 when the stage runs on the hand-written scanner. */
int          glm53_split_stage_is_scanner(const glm53_split_stage *stage);

/* Called for each piece, in order; a non-OK status stops the split and is returned from it. */
typedef glm53_status (*glm53_piece_fn)(void *ctx, const uint8_t *piece, size_t len);

/* Splits valid UTF-8 text[0, n) with stages[0, n_stages <= GLM53_SPLIT_MAX_STAGES): every match of stage 0 and
 * every gap between matches is a piece, and each piece goes through the next stage; pieces of the last stage go
 * to fn. */
glm53_status glm53_split_run(glm53_split_stage *const *stages, int32_t n_stages, const uint8_t *text, size_t n,
                             glm53_piece_fn fn, void *ctx);

/* The split regex of GLM-5.3 (and of llama3 / cl100k): the default of tiktoken files. */
extern const char glm53_split_pattern_cl100k[];
/* The GPT-2 regex that ByteLevel(use_regex = true) applies. */
extern const char glm53_split_pattern_gpt2[];

/* Zeroed memory for large tables (free with free()): from 4 MiB on, 2 MiB-aligned and marked for transparent
 * huge pages, which saves most page faults and TLB misses of the random accesses hash tables make. */
void *glm53_tok_table_alloc(size_t bytes);

/* ------------------------------------------------------------------------------------------------------------
 * JSON (tokenizer_json.c): an in-place reader fast enough for million-value tokenizer files
 */
enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUMBER, TJ_STRING, TJ_ARRAY, TJ_OBJECT };

typedef struct {
    uint8_t     type;          /* TJ_* */
    uint32_t    len;           /* string bytes, or number of children */
    const char *str;           /* TJ_STRING: unescaped, NUL-terminated (may hold NULs; use len) */
    double      num;           /* TJ_NUMBER */
    const char *key;           /* member name when the parent is an object, else NULL */
    uint32_t    key_len;
    int32_t     first, next;   /* first child, next sibling: indices into the node array, -1 for none */
} tj_node;

typedef struct {
    tj_node *nodes;            /* nodes[0] is the root */
    int32_t  n_nodes;
} tj_doc;

/* Parses text[0, len) (NUL-terminated at text[len]) in place: the strings of the document point into text,
 * which must outlive it. Errors are GLM53_ERR_FORMAT naming path and the byte offset. */
glm53_status   glm53_tj_parse(char *text, size_t len, const char *path, tj_doc *doc);
void           glm53_tj_free(tj_doc *doc);
/* The member `key` of an object, or NULL (also when obj is NULL or not an object). */
const tj_node *glm53_tj_get(const tj_doc *doc, const tj_node *obj, const char *key);

#endif /* GLM53_TOKENIZER_INTERNAL_H */
