/*
 * tokenizer_json.c - a small in-place JSON reader for tokenizer.json.
 *
 * Why not cJSON (used elsewhere in the core): a 150k-entry vocabulary with 300k merges is about a million
 * JSON values, and cJSON's one malloc per value made loading take most of a second. This reader parses the
 * file buffer in place: strings are unescaped where they stand (an escape is never shorter than what it
 * stands for) and NUL-terminated over their closing quote, and values are rows of one growing array.
 * It accepts exactly RFC 8259 JSON (nesting up to 128 levels); errors name the byte offset.
 */
#include "core/text/tokenizer_internal.h"

#include <stdlib.h>

enum { TJ_MAX_DEPTH = 128 };

typedef struct {
    char      *s;
    size_t     n, i;
    tj_node   *nodes;
    int32_t    n_nodes, cap_nodes;
    const char *path;
} tj_parser;

static glm53_status tj_error(tj_parser *p, const char *what) {
    return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s", p->path, p->i, what);
}

static void tj_skip_ws(tj_parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

/* The node array is sized before parsing, from a bound that needs no parse: every value but the first of its
 * container follows a comma, the first follows a bracket, plus the root (commas inside strings only
 * overcount). */
static glm53_status tj_reserve(tj_parser *p) {
    size_t bound = 1;
    for (size_t i = 0; i < p->n; i++) {
        char c = p->s[i];
        bound += c == ',' || c == '[' || c == '{';
    }
    if (bound > INT32_MAX) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: too many JSON values", p->path);
    p->nodes = glm53_tok_table_alloc(sizeof(tj_node) * bound);
    if (!p->nodes) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory parsing JSON", p->path);
    p->cap_nodes = (int32_t)bound;
    return GLM53_OK;
}

static glm53_status tj_new(tj_parser *p, int32_t *out) {
    if (p->n_nodes == p->cap_nodes) return tj_error(p, "more values than the bound allows");
    *out = p->n_nodes++;
    p->nodes[*out] = (tj_node){.first = -1, .next = -1};
    return GLM53_OK;
}

static int tj_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int tj_hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        int h = tj_hex(s[k]);
        if (h < 0) return 0;
        *v = (*v << 4) | (uint32_t)h;
    }
    return 1;
}

/* At an opening quote: unescapes the string in place; *str / *len receive it (NUL-terminated). Most strings
 * have no escape and are only scanned. */
static glm53_status tj_string(tj_parser *p, const char **str, uint32_t *len) {
    char *s = p->s;
    size_t r = ++p->i;
    while (r < p->n && s[r] != '"' && s[r] != '\\' && (unsigned char)s[r] >= 0x20) r++;
    size_t w = r;
    for (;;) {
        if (r >= p->n) return tj_error(p, "unterminated string");
        unsigned char c = (unsigned char)s[r];
        if (c == '"') break;
        if (c < 0x20) { p->i = r; return tj_error(p, "control character in string"); }
        if (c != '\\') { s[w++] = s[r++]; continue; }
        if (r + 1 >= p->n) return tj_error(p, "unterminated escape");
        char e = s[r + 1];
        r += 2;
        switch (e) {
        case '"': s[w++] = '"'; break;
        case '\\': s[w++] = '\\'; break;
        case '/': s[w++] = '/'; break;
        case 'b': s[w++] = '\b'; break;
        case 'f': s[w++] = '\f'; break;
        case 'n': s[w++] = '\n'; break;
        case 'r': s[w++] = '\r'; break;
        case 't': s[w++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (r + 4 > p->n || !tj_hex4(s + r, &cp)) { p->i = r; return tj_error(p, "bad \\u escape"); }
            r += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && r + 6 <= p->n && s[r] == '\\' && s[r + 1] == 'u' &&
                tj_hex4(s + r + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                r += 6;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD;   /* a lone surrogate is not text; serde_json would reject the file */
            }
            w += (size_t)glm53_uc_encode(cp, (uint8_t *)s + w);
            break;
        }
        default: p->i = r - 2; return tj_error(p, "bad escape");
        }
    }
    s[w] = '\0';
    *str = s + p->i;
    *len = (uint32_t)(w - p->i);
    p->i = r + 1;
    return GLM53_OK;
}

static glm53_status tj_number(tj_parser *p, double *out) {
    char *end;
    const char *start = p->s + p->i;
    size_t k = p->i;
    if (k < p->n && p->s[k] == '-') k++;
    if (k >= p->n || p->s[k] < '0' || p->s[k] > '9') return tj_error(p, "bad value");
    *out = strtod(start, &end);   /* the buffer is NUL-terminated, so strtod stops in it */
    if (end == start) return tj_error(p, "bad number");
    p->i = (size_t)(end - p->s);
    return GLM53_OK;
}

static glm53_status tj_value(tj_parser *p, int32_t *out, int depth);

/* Parses the members of an array or object after its opening bracket. */
static glm53_status tj_children(tj_parser *p, int32_t parent, int is_object, int depth) {
    char close = is_object ? '}' : ']';
    int32_t last = -1;
    tj_skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) { p->i++; return GLM53_OK; }
    for (;;) {
        const char *key = NULL;
        uint32_t key_len = 0;
        tj_skip_ws(p);
        if (is_object) {
            if (p->i >= p->n || p->s[p->i] != '"') return tj_error(p, "expected a key");
            GLM53_TRY(tj_string(p, &key, &key_len));
            tj_skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return tj_error(p, "expected ':'");
            p->i++;
        }
        int32_t child;
        GLM53_TRY(tj_value(p, &child, depth + 1));
        p->nodes[child].key = key;
        p->nodes[child].key_len = key_len;
        if (last < 0) p->nodes[parent].first = child; else p->nodes[last].next = child;
        last = child;
        p->nodes[parent].len++;
        tj_skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == close) { p->i++; return GLM53_OK; }
        return tj_error(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static glm53_status tj_value(tj_parser *p, int32_t *out, int depth) {
    if (depth > TJ_MAX_DEPTH) return tj_error(p, "nested too deeply");
    tj_skip_ws(p);
    if (p->i >= p->n) return tj_error(p, "unexpected end");
    int32_t node = -1;
    GLM53_TRY(tj_new(p, &node));
    *out = node;
    char c = p->s[p->i];
    if (c == 't' || c == 'f' || c == 'n') {
        const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t wl = strlen(word);
        if (p->n - p->i < wl || memcmp(p->s + p->i, word, wl) != 0) return tj_error(p, "bad literal");
        p->nodes[node].type = c == 't' ? TJ_TRUE : c == 'f' ? TJ_FALSE : TJ_NULL;
        p->i += wl;
        return GLM53_OK;
    }
    if (c == '"') {
        const char *str;
        uint32_t len;
        GLM53_TRY(tj_string(p, &str, &len));
        p->nodes[node].type = TJ_STRING;
        p->nodes[node].str = str;
        p->nodes[node].len = len;
        return GLM53_OK;
    }
    if (c == '[' || c == '{') {
        p->i++;
        p->nodes[node].type = c == '[' ? TJ_ARRAY : TJ_OBJECT;
        return tj_children(p, node, c == '{', depth);
    }
    double num = 0;
    GLM53_TRY(tj_number(p, &num));
    p->nodes[node].type = TJ_NUMBER;
    p->nodes[node].num = num;
    return GLM53_OK;
}

glm53_status glm53_tj_parse(char *text, size_t len, const char *path, tj_doc *doc) {
    tj_parser p = {.s = text, .n = len, .path = path};
    GLM53_TRY(tj_reserve(&p));
    int32_t root;
    glm53_status s = tj_value(&p, &root, 0);
    if (s == GLM53_OK) {
        tj_skip_ws(&p);
        if (p.i != p.n) s = tj_error(&p, "text after the value");
    }
    if (s != GLM53_OK) { free(p.nodes); return s; }
    doc->nodes = p.nodes;
    doc->n_nodes = p.n_nodes;
    return GLM53_OK;
}

void glm53_tj_free(tj_doc *doc) {
    free(doc->nodes);
    doc->nodes = NULL;
}

const tj_node *glm53_tj_get(const tj_doc *doc, const tj_node *obj, const char *key) {
    if (!obj || obj->type != TJ_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (int32_t c = obj->first; c >= 0; c = doc->nodes[c].next)
        if (doc->nodes[c].key_len == kl && memcmp(doc->nodes[c].key, key, kl) == 0) return &doc->nodes[c];
    return NULL;
}
