/*
 * tokenizer.c - byte-level BPE as HF tokenizers runs it: loading tokenizer.json or a tiktoken rank file,
 * encode, decode, and token lookups (the public glm53_tokenizer_* API).
 *
 * Encoding a text follows HF's pipeline step by step:
 *   0. invalid UTF-8 becomes U+FFFD (HF only ever sees valid strings);
 *   1. added tokens that are not "normalized" are cut out of the raw text, leftmost-longest;
 *   2. each remaining segment is normalised (NFC, when the file asks for it), and the "normalized" added
 *      tokens are cut out of it;
 *   3. the pre-tokenizer splits each piece of text (tokenizer_split.c);
 *   4. each piece, as raw bytes, becomes ids by BPE: with ignore_merges a piece that is itself a token is that
 *      token; otherwise start from single bytes and repeatedly merge the adjacent pair of lowest rank (the
 *      leftmost on ties) until no pair has a rank.
 * BPE works on raw bytes and token ids throughout. HF works on byte-level strings (each byte shown as a
 * printable character, "Ġ" for a space); since that mapping is one-to-one the results are the same, and the
 * vocabulary is converted once at load time. Merges live in one open-addressing hash of (left id, right id)
 * -> (rank, merged id); a tiktoken file gets the same table (pair -> rank of its concatenation), so both forms
 * run the same code.
 *
 * Decoding concatenates the tokens' bytes and repairs invalid UTF-8 the way HF's ByteLevel decoder does.
 */
#include "core/text/tokenizer_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------------------------------------------------
 * The byte-level alphabet (GPT-2's bytes_to_unicode): printable Latin-1 bytes stand for themselves, the other
 * 68 bytes for U+0100.. in byte order.
 */
static uint32_t byte_char[256];       /* byte -> code point */
static int16_t  char_byte[0x144];     /* code point -> byte, -1 when not in the alphabet */
static pthread_once_t alphabet_once = PTHREAD_ONCE_INIT;

static void alphabet_build(void) {
    for (int c = 0; c < 0x144; c++) char_byte[c] = -1;
    uint32_t extra = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_char[b] = printable ? (uint32_t)b : extra++;
        char_byte[byte_char[b]] = (int16_t)b;
    }
}

/* The bytes a byte-level spelling stands for, into out (room for len bytes); -1 when some character is not in
 * the alphabet. s must be valid UTF-8. */
static int64_t bytelevel_decode(const uint8_t *s, size_t len, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int l;
        uint32_t cp = glm53_uc_decode(s + i, &l);
        if (cp >= 0x144 || char_byte[cp] < 0) return -1;
        out[o++] = (uint8_t)char_byte[cp];
        i += (size_t)l;
    }
    return (int64_t)o;
}

/* ------------------------------------------------------------------------------------------------------------
 * Storage
 */
enum { TOK_USED = 1, TOK_ADDED = 2, TOK_SPECIAL = 4 };

typedef struct {
    uint32_t piece_off, piece_len;   /* raw bytes, in arena */
    uint32_t str_off, str_len;       /* spelling (NUL-terminated), in arena */
    uint8_t  flags;
} token;

/* A hash slot for a byte-string key stored in the arena. id1 = id + 1, so a zeroed table is empty (calloc'ed
 * pages stay untouched until used, which keeps loading quick). */
typedef struct {
    uint32_t hash;
    uint32_t id1;
    uint32_t off, len;
} key_slot;

typedef struct {
    key_slot *slots;
    uint32_t  mask;
} key_table;

typedef struct {
    uint64_t key;      /* left << 32 | right */
    int32_t  rank;
    int32_t  merged1;  /* merged id + 1; 0: free slot */
} pair_slot;

/* Added-token matcher: a byte trie. */
typedef struct {
    int32_t first_child, next_sibling;
    int32_t added;        /* index into tok->added of the token ending here, or -1 */
    uint8_t byte;
} trie_node;

typedef struct {
    trie_node *nodes;
    int32_t    n_nodes, cap_nodes;
    uint8_t    first[256];   /* bytes some token starts with */
    int32_t    n_tokens;
} matcher;

typedef struct {
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} added_token;

struct glm53_tokenizer {
    uint64_t    serial;              /* unique per load (word-cache key), from 1 */
    int32_t     n_vocab;
    token      *tokens;              /* [n_vocab] */
    char       *arena;
    size_t      arena_len, arena_cap;
    key_table   by_bytes;            /* base-vocabulary tokens by raw bytes (what BPE produces) */
    key_table   by_string;           /* every token by spelling; added tokens win */
    pair_slot  *pairs;
    uint32_t    pairs_mask;
    int32_t     byte_id[256];        /* the token of each single byte, -1 when the vocabulary lacks it */
    int         ignore_merges;
    int         nfc;
    glm53_split_stage **stages;
    int32_t     n_stages;
    added_token *added;
    int32_t     n_added;
    matcher     raw_added;           /* added tokens matched on the raw text */
    matcher     norm_added;          /* "normalized" added tokens, matched after normalisation */
};

static uint32_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

static inline uint32_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 32) ^ (uint32_t)key;
}

void *glm53_tok_table_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (bytes < 2 * huge) return calloc(1, bytes ? bytes : 1);
    size_t rounded = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, rounded);
    if (!p) return NULL;
    madvise(p, rounded, MADV_HUGEPAGE);   /* advice only: without huge pages the table still works */
    memset(p, 0, rounded);
    return p;
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

static glm53_status key_table_init(key_table *t, uint64_t n_keys) {
    uint32_t cap = pow2_at_least(n_keys * 2);
    t->slots = glm53_tok_table_alloc(sizeof(key_slot) * cap);
    if (!t->slots) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %llu keys",
                                     (unsigned long long)n_keys);
    t->mask = cap - 1;
    return GLM53_OK;
}

static int32_t key_table_get(const key_table *t, const char *arena, const uint8_t *key, size_t len) {
    uint32_t h = hash_bytes(key, len);
    for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
        const key_slot *s = &t->slots[i];
        if (!s->id1) return -1;
        if (s->hash == h && s->len == len && memcmp(arena + s->off, key, len) == 0) return (int32_t)s->id1 - 1;
    }
}

/* Inserts or overwrites; the table never fills (it holds at most half its size by construction). */
static void key_table_put(key_table *t, const char *arena, uint32_t off, uint32_t len, int32_t id) {
    const uint8_t *key = (const uint8_t *)arena + off;
    uint32_t h = hash_bytes(key, len);
    for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
        key_slot *s = &t->slots[i];
        if (!s->id1 || (s->hash == h && s->len == len && memcmp(arena + s->off, key, len) == 0)) {
            *s = (key_slot){h, (uint32_t)id + 1, off, len};
            return;
        }
    }
}

static inline int pair_get(const glm53_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint32_t i = hash_pair(key) & t->pairs_mask;; i = (i + 1) & t->pairs_mask) {
        const pair_slot *s = &t->pairs[i];
        if (!s->merged1) return 0;
        if (s->key == key) { *rank = s->rank; *merged = s->merged1 - 1; return 1; }
    }
}

/* Later duplicates overwrite earlier ones, as HF's HashMap does when it collects the merges. */
static void pair_put(glm53_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint32_t i = hash_pair(key) & t->pairs_mask;; i = (i + 1) & t->pairs_mask) {
        pair_slot *s = &t->pairs[i];
        if (!s->merged1 || s->key == key) { *s = (pair_slot){key, rank, merged + 1}; return; }
    }
}

static glm53_status pairs_init(glm53_tokenizer *t, uint64_t n_pairs) {
    uint32_t cap = pow2_at_least(n_pairs * 2);
    t->pairs = glm53_tok_table_alloc(sizeof(pair_slot) * cap);
    if (!t->pairs) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %llu merges",
                                     (unsigned long long)n_pairs);
    t->pairs_mask = cap - 1;
    return GLM53_OK;
}

/* Appends bytes (and a NUL) to the arena; *off receives their offset. */
static glm53_status arena_put(glm53_tokenizer *t, const void *data, size_t len, uint32_t *off) {
    if (t->arena_len + len + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (t->arena_len + len + 1 > cap) cap *= 2;
        if (cap > UINT32_MAX) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "tokenizer: vocabulary text over 4 GiB");
        char *p = realloc(t->arena, cap);
        if (!p) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        t->arena = p;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, data, len);
    t->arena[t->arena_len + len] = '\0';
    *off = (uint32_t)t->arena_len;
    t->arena_len += len + 1;
    return GLM53_OK;
}

/* Records token `id`: its spelling, and its bytes as the ByteLevel decoder yields them (the spelling decoded
 * through the alphabet when every character is in it, else the spelling's own UTF-8). Base-vocabulary tokens
 * with a byte-level spelling become encodable (by_bytes). */
static glm53_status token_set(glm53_tokenizer *t, int32_t id, const char *spelling, size_t len, int base) {
    token *tk = &t->tokens[id];
    GLM53_TRY(arena_put(t, spelling, len, &tk->str_off));
    tk->str_len = (uint32_t)len;
    uint8_t stack[256];
    uint8_t *buf = len <= sizeof stack ? stack : malloc(len);
    if (!buf) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    int64_t n = bytelevel_decode((const uint8_t *)spelling, len, buf);
    glm53_status s = GLM53_OK;
    if (n < 0) {
        tk->piece_off = tk->str_off;
        tk->piece_len = (uint32_t)len;
    } else {
        s = arena_put(t, buf, (size_t)n, &tk->piece_off);
        tk->piece_len = (uint32_t)n;
    }
    if (buf != stack) free(buf);
    GLM53_TRY(s);
    tk->flags |= TOK_USED;
    key_table_put(&t->by_string, t->arena, tk->str_off, tk->str_len, id);
    if (base && n >= 0) key_table_put(&t->by_bytes, t->arena, tk->piece_off, tk->piece_len, id);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Added tokens
 */
static glm53_status matcher_add(matcher *m, const uint8_t *s, size_t len, int32_t added) {
    if (m->n_nodes == 0) {
        m->cap_nodes = 64;
        m->nodes = malloc(sizeof(trie_node) * (size_t)m->cap_nodes);
        if (!m->nodes) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        m->nodes[0] = (trie_node){-1, -1, -1, 0};
        m->n_nodes = 1;
    }
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t c = m->nodes[node].first_child;
        while (c >= 0 && m->nodes[c].byte != s[i]) c = m->nodes[c].next_sibling;
        if (c < 0) {
            if (m->n_nodes == m->cap_nodes) {
                trie_node *p = realloc(m->nodes, sizeof(trie_node) * (size_t)m->cap_nodes * 2);
                if (!p) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
                m->nodes = p;
                m->cap_nodes *= 2;
            }
            c = m->n_nodes++;
            m->nodes[c] = (trie_node){-1, m->nodes[node].first_child, -1, s[i]};
            m->nodes[node].first_child = c;
        }
        node = c;
    }
    m->nodes[node].added = added;
    m->first[s[0]] = 1;
    m->n_tokens++;
    return GLM53_OK;
}

/* The leftmost-longest match in s[from, n): returns 1 with [*ms, *me) and the added-token index. */
static int matcher_find(const glm53_tokenizer *t, const matcher *m, const uint8_t *s, size_t n, size_t from,
                        int skip_special, size_t *ms, size_t *me, int32_t *which) {
    if (m->n_tokens == 0) return 0;
    for (size_t p = from; p < n; p++) {
        if (!m->first[s[p]]) continue;
        int32_t node = 0, best = -1;
        size_t best_end = 0;
        for (size_t q = p; q < n; q++) {
            int32_t c = m->nodes[node].first_child;
            while (c >= 0 && m->nodes[c].byte != s[q]) c = m->nodes[c].next_sibling;
            if (c < 0) break;
            node = c;
            int32_t a = m->nodes[node].added;
            if (a >= 0 && !(skip_special && t->added[a].special)) {
                best = a;
                best_end = q + 1;
            }
        }
        if (best >= 0) {
            *ms = p;
            *me = best_end;
            *which = best;
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Encoding
 */
typedef struct {
    const glm53_tokenizer *tok;
    int32_t  flags;
    int32_t *ids;
    int64_t  cap, n;
    int      grow;      /* realloc ids when full (batch encoding) instead of only counting */
    struct wc_entry *cache;   /* this thread's word cache, or NULL */
} encoder;

static inline glm53_status emit(encoder *e, int32_t id) {
    if (e->n >= e->cap && e->grow) {
        int64_t cap = e->cap ? e->cap * 2 : 256;
        int32_t *p = realloc(e->ids, sizeof(int32_t) * (size_t)cap);
        if (!p) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %lld ids", (long long)cap);
        e->ids = p;
        e->cap = cap;
    }
    if (e->n < e->cap) e->ids[e->n] = id;
    e->n++;
    return GLM53_OK;
}

enum { BPE_SMALL = 256 };   /* pieces up to this many bytes merge by linear scans, longer ones through a heap */

/* Short pieces: rank[i] caches the rank of pair (sym[i], sym[i + 1]); each merge rescans the ranks (cheap
 * integer compares) and looks up only the two pairs it changed. The ids land in sym[0, return value). */
static int bpe_small(const glm53_tokenizer *t, const uint8_t *w, size_t n, int32_t *sym) {
    int32_t rank[BPE_SMALL], merged[BPE_SMALL];
    int m = 0;
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[w[i]] >= 0) sym[m++] = t->byte_id[w[i]];
    for (int i = 0; i + 1 < m; i++)
        if (!pair_get(t, sym[i], sym[i + 1], &rank[i], &merged[i])) rank[i] = INT32_MAX;
    while (m > 1) {
        int best = -1;
        int32_t best_rank = INT32_MAX;
        for (int i = 0; i + 1 < m; i++)
            if (rank[i] < best_rank) { best_rank = rank[i]; best = i; }
        if (best < 0) break;
        sym[best] = merged[best];
        int tail = m - best - 2;   /* symbols after the absorbed one, and pairs after the merged one */
        memmove(sym + best + 1, sym + best + 2, sizeof(int32_t) * (size_t)tail);
        memmove(rank + best, rank + best + 1, sizeof(int32_t) * (size_t)tail);
        memmove(merged + best, merged + best + 1, sizeof(int32_t) * (size_t)tail);
        m--;
        if (best > 0 && !pair_get(t, sym[best - 1], sym[best], &rank[best - 1], &merged[best - 1]))
            rank[best - 1] = INT32_MAX;
        if (best + 1 < m && !pair_get(t, sym[best], sym[best + 1], &rank[best], &merged[best]))
            rank[best] = INT32_MAX;
    }
    return m;
}

/* Word cache: natural text repeats a few thousand words, and merging one from bytes costs a pair-table lookup
 * (a likely cache miss) per merge, so results for short pieces are remembered, as HF's BPE does. One
 * direct-mapped table per thread (no locking; 256 KiB, freed when the thread exits); entries carry the
 * tokenizer's load serial, so a freed tokenizer's entries never match another. */
enum { WC_SLOTS = 4096, WC_MAX_BYTES = 24, WC_MAX_IDS = 6 };

typedef struct wc_entry {
    uint64_t serial;                  /* tokenizer serial; 0: empty */
    uint32_t hash;
    uint8_t  len, n_ids;
    uint8_t  bytes[WC_MAX_BYTES];
    int32_t  ids[WC_MAX_IDS];
} wc_entry;

static pthread_key_t  wc_key;
static pthread_once_t wc_once = PTHREAD_ONCE_INIT;
static int            wc_key_ok;

static void wc_key_create(void) { wc_key_ok = pthread_key_create(&wc_key, free) == 0; }

/* This thread's cache, or NULL (then pieces are simply merged every time). */
static wc_entry *word_cache(void) {
    pthread_once(&wc_once, wc_key_create);
    if (!wc_key_ok) return NULL;
    wc_entry *c = pthread_getspecific(wc_key);
    if (!c && (c = calloc(WC_SLOTS, sizeof(wc_entry))) != NULL && pthread_setspecific(wc_key, c) != 0) {
        free(c);
        c = NULL;
    }
    return c;
}

/* Long pieces (a 10k-letter word): symbols in a linked list, candidate merges in a min-heap ordered by
 * (rank, position), stale entries skipped when popped, as HF's word.rs does. */
typedef struct {
    int32_t rank, pos, left, right;   /* left/right: the ids the pair had when pushed */
} heap_entry;

static inline int heap_less(const heap_entry *a, const heap_entry *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_entry *h, int64_t *n, heap_entry x) {
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!heap_less(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static heap_entry heap_pop(heap_entry *h, int64_t *n) {
    heap_entry top = h[0], x = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = x;
    return top;
}

static glm53_status bpe_large(encoder *e, const uint8_t *w, size_t n) {
    const glm53_tokenizer *t = e->tok;
    int32_t *sym = malloc(sizeof(int32_t) * n * 3);
    heap_entry *heap = malloc(sizeof(heap_entry) * n * 3);   /* n initial pairs + 2 per merge */
    if (!sym || !heap) {
        free(sym); free(heap);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for a %zu-byte word", n);
    }
    int32_t *prev = sym + n, *next = sym + 2 * n;
    int32_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[w[i]] >= 0) sym[m++] = t->byte_id[w[i]];
    for (int32_t i = 0; i < m; i++) { prev[i] = i - 1; next[i] = i + 1 < m ? i + 1 : -1; }
    int64_t hn = 0;
    int32_t r = 0, merged = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        if (pair_get(t, sym[i], sym[i + 1], &r, &merged)) heap_push(heap, &hn, (heap_entry){r, i, sym[i], sym[i + 1]});
    while (hn > 0) {
        heap_entry top = heap_pop(heap, &hn);
        int32_t p = top.pos, q = next[p];
        if (sym[p] != top.left || q < 0 || sym[q] != top.right) continue;   /* stale */
        pair_get(t, sym[p], sym[q], &r, &merged);
        sym[p] = merged;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0 && pair_get(t, sym[prev[p]], sym[p], &r, &merged))
            heap_push(heap, &hn, (heap_entry){r, prev[p], sym[prev[p]], sym[p]});
        if (next[p] >= 0 && pair_get(t, sym[p], sym[next[p]], &r, &merged))
            heap_push(heap, &hn, (heap_entry){r, p, sym[p], sym[next[p]]});
    }
    glm53_status s = GLM53_OK;
    for (int32_t i = m > 0 ? 0 : -1; i >= 0 && s == GLM53_OK; i = next[i]) s = emit(e, sym[i]);
    free(sym);
    free(heap);
    return s;
}

static glm53_status bpe_piece(void *ctx, const uint8_t *w, size_t n) {
    encoder *e = ctx;
    const glm53_tokenizer *t = e->tok;
    if (t->ignore_merges || n == 1) {
        int32_t id = key_table_get(&t->by_bytes, t->arena, w, n);
        if (id >= 0) return emit(e, id);
        if (n == 1) return GLM53_OK;   /* a byte with no token is dropped, as HF does without unk_token */
    }
    if (n > BPE_SMALL) return bpe_large(e, w, n);
    wc_entry *slot = NULL;
    uint32_t h = 0;
    if (e->cache && n <= WC_MAX_BYTES) {
        h = hash_bytes(w, n);
        slot = &e->cache[h & (WC_SLOTS - 1)];
        if (slot->serial == t->serial && slot->hash == h && slot->len == n && memcmp(slot->bytes, w, n) == 0) {
            for (int i = 0; i < slot->n_ids; i++) GLM53_TRY(emit(e, slot->ids[i]));
            return GLM53_OK;
        }
    }
    int32_t sym[BPE_SMALL];
    int m = bpe_small(t, w, n, sym);
    if (slot && m <= WC_MAX_IDS) {
        slot->serial = t->serial;
        slot->hash = h;
        slot->len = (uint8_t)n;
        slot->n_ids = (uint8_t)m;
        memcpy(slot->bytes, w, n);
        memcpy(slot->ids, sym, sizeof(int32_t) * (size_t)m);
    }
    for (int i = 0; i < m; i++) GLM53_TRY(emit(e, sym[i]));
    return GLM53_OK;
}

static glm53_status pretokenize(encoder *e, const uint8_t *s, size_t n) {
    return glm53_split_run(e->tok->stages, e->tok->n_stages, s, n, bpe_piece, e);
}

static int is_word_char(uint32_t cp) {
    return cp == '_' || (glm53_uc_bits(cp) & (GLM53_UC_L | GLM53_UC_N | GLM53_UC_M)) != 0;
}

/* The code point that ends at s[end] (end > 0) of valid UTF-8. */
static uint32_t cp_before(const uint8_t *s, size_t end, size_t *start) {
    size_t i = end - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
    int len;
    *start = i;
    return glm53_uc_decode(s + i, &len);
}

typedef glm53_status (*segment_fn)(encoder *e, const uint8_t *s, size_t n);

/* Cuts the added tokens of `m` out of s[0, n): their ids are emitted, the text between them goes to gap().
 * lstrip / rstrip widen a match over neighbouring whitespace; single_word drops a match inside a word. */
static glm53_status split_added(encoder *e, const matcher *m, const uint8_t *s, size_t n, segment_fn gap) {
    const glm53_tokenizer *t = e->tok;
    int skip_special = (e->flags & GLM53_ENCODE_SPECIAL_AS_TEXT) != 0;
    size_t done = 0, from = 0, ms, me;
    int32_t a;
    while (matcher_find(t, m, s, n, from, skip_special, &ms, &me, &a)) {
        const added_token *at = &t->added[a];
        int len;
        size_t start = ms, end = me, k;
        if (at->single_word && ((ms > 0 && is_word_char(cp_before(s, ms, &k))) ||
                                (me < n && is_word_char(glm53_uc_decode(s + me, &len))))) {
            from = me;
            continue;
        }
        while (at->lstrip && start > done && (glm53_uc_bits(cp_before(s, start, &k)) & GLM53_UC_WS)) start = k;
        while (at->rstrip && end < n && (glm53_uc_bits(glm53_uc_decode(s + end, &len)) & GLM53_UC_WS))
            end += (size_t)len;
        if (start > done) GLM53_TRY(gap(e, s + done, start - done));
        GLM53_TRY(emit(e, at->id));
        done = from = end;
    }
    if (done < n) GLM53_TRY(gap(e, s + done, n - done));
    return GLM53_OK;
}

static glm53_status normalized_segment(encoder *e, const uint8_t *s, size_t n) {
    uint8_t *norm = NULL;
    size_t norm_len = 0;
    if (e->tok->nfc) GLM53_TRY(glm53_uc_nfc(s, n, &norm, &norm_len));
    if (norm) { s = norm; n = norm_len; }
    glm53_status st = e->tok->norm_added.n_tokens ? split_added(e, &e->tok->norm_added, s, n, pretokenize)
                                                  : pretokenize(e, s, n);
    free(norm);
    return st;
}

static glm53_status encode_text(encoder *e, const uint8_t *s, size_t n) {
    e->cache = word_cache();
    uint8_t *fixed = NULL;
    if (glm53_uc_utf8_valid_prefix(s, n) < n) {
        fixed = malloc(3 * n);
        if (!fixed) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %zu bytes", n);
        n = glm53_uc_utf8_lossy(s, n, fixed);
        s = fixed;
    }
    glm53_status st = split_added(e, &e->tok->raw_added, s, n, normalized_segment);
    free(fixed);
    return st;
}

/* ------------------------------------------------------------------------------------------------------------
 * Loading: shared parts
 */
static void tokenizer_release(glm53_tokenizer *t) {
    if (!t) return;
    free(t->tokens);
    free(t->arena);
    free(t->by_bytes.slots);
    free(t->by_string.slots);
    free(t->pairs);
    for (int32_t i = 0; i < t->n_stages; i++) glm53_split_stage_free(t->stages[i]);
    free(t->stages);
    free(t->added);
    free(t->raw_added.nodes);
    free(t->norm_added.nodes);
    free(t);
}

/* Ids index a dense table (one entry per id), so a file may leave only so many ids unused: without a limit, one
 * token numbered 2e9 would claim 40 GB. Real vocabularies are dense (GLM-5.3: 154856 ids, all used). */
enum { TOK_MAX_UNUSED_IDS = 1 << 16 };

static glm53_status tokenizer_new(int32_t n_vocab, uint64_t n_keys, const char *path, glm53_tokenizer **out) {
    if ((uint64_t)n_vocab > 2 * n_keys + TOK_MAX_UNUSED_IDS)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: ids up to %d for %llu tokens: numberings that sparse are not "
                          "supported", path, n_vocab - 1, (unsigned long long)n_keys);
    pthread_once(&alphabet_once, alphabet_build);
    GLM53_TRY(glm53_uc_init());
    static atomic_uint_fast64_t serials;
    glm53_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->serial = (uint64_t)atomic_fetch_add(&serials, 1) + 1;
    t->n_vocab = n_vocab;
    t->tokens = calloc((size_t)n_vocab, sizeof(token));
    glm53_status s = t->tokens ? GLM53_OK : GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    if (s == GLM53_OK) s = key_table_init(&t->by_bytes, n_keys);
    if (s == GLM53_OK) s = key_table_init(&t->by_string, n_keys);
    if (s != GLM53_OK) { tokenizer_release(t); return s; }
    *out = t;
    return GLM53_OK;
}

static glm53_status add_stage(glm53_tokenizer *t, const char *pattern) {
    if (t->n_stages == GLM53_SPLIT_MAX_STAGES)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "tokenizer: more than %d pre-tokenizer splits",
                          GLM53_SPLIT_MAX_STAGES);
    glm53_split_stage **p = realloc(t->stages, sizeof(*p) * (size_t)(t->n_stages + 1));
    if (!p) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->stages = p;
    GLM53_TRY(glm53_split_stage_create(pattern, &t->stages[t->n_stages]));
    t->n_stages++;
    return GLM53_OK;
}

/* Registers added token (content, id): its spelling, bytes and flags, and its place in one of the matchers. */
static glm53_status add_added(glm53_tokenizer *t, const char *content, int32_t id, added_token props,
                              const char *path) {
    size_t len = strlen(content);
    if (len == 0) return GLM53_OK;   /* HF ignores empty added tokens */
    if (id < 0 || id >= t->n_vocab) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: added token id %d", path, id);
    if (glm53_uc_utf8_valid_prefix((const uint8_t *)content, len) != len)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: added token %d is not UTF-8", path, id);
    /* An added token may be a vocabulary token (same spelling, same id); another token's id it cannot take. HF
     * would let both share the id (a file whose vocabulary skips ids, so that HF's numbering of the added tokens
     * runs into it), and decode one as the other. */
    const token *tk = &t->tokens[id];
    if ((tk->flags & TOK_USED) && (tk->str_len != len || memcmp(t->arena + tk->str_off, content, len) != 0))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: added token \"%.60s\" gets id %d, which \"%.60s\" already has",
                          path, content, id, t->arena + tk->str_off);
    added_token *p = realloc(t->added, sizeof(*p) * (size_t)(t->n_added + 1));
    if (!p) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->added = p;
    props.id = id;
    int32_t index = t->n_added++;
    t->added[index] = props;
    GLM53_TRY(token_set(t, id, content, len, 0));
    t->tokens[id].flags |= TOK_ADDED | (props.special ? TOK_SPECIAL : 0);
    if (!props.normalized) return matcher_add(&t->raw_added, (const uint8_t *)content, len, index);
    /* a normalized token is matched by its normalised form */
    uint8_t *norm = NULL;
    size_t norm_len = 0;
    if (t->nfc) GLM53_TRY(glm53_uc_nfc((const uint8_t *)content, len, &norm, &norm_len));
    glm53_status s = norm ? matcher_add(&t->norm_added, norm, norm_len, index)
                          : matcher_add(&t->norm_added, (const uint8_t *)content, len, index);
    free(norm);
    return s;
}

static void find_byte_tokens(glm53_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        t->byte_id[b] = key_table_get(&t->by_bytes, t->arena, &byte, 1);
    }
}

/* Reads a whole file into a malloc'ed, NUL-terminated buffer. */
static glm53_status read_file(const char *path, char **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return GLM53_FAIL(GLM53_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return GLM53_FAIL(GLM53_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) { fclose(f); return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", path); }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) { free(buf); return GLM53_FAIL(GLM53_ERR_IO, "%s: short read", path); }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Loading tokenizer.json
 */
typedef struct {
    const tj_doc *doc;
    const char   *path;
} json_ctx;

#define TJ_EACH(j, child, parent) \
    for (const tj_node *child = (parent) && (parent)->first >= 0 ? &(j)->doc->nodes[(parent)->first] : NULL; \
         child; child = child->next >= 0 ? &(j)->doc->nodes[child->next] : NULL)

static const tj_node *jget(const json_ctx *j, const tj_node *obj, const char *key) {
    return glm53_tj_get(j->doc, obj, key);
}

static const char *json_type(const json_ctx *j, const tj_node *obj) {
    const tj_node *t = jget(j, obj, "type");
    return t && t->type == TJ_STRING ? t->str : "";
}

static int json_bool(const json_ctx *j, const tj_node *obj, const char *key, int dflt) {
    const tj_node *v = jget(j, obj, key);
    return v && (v->type == TJ_TRUE || v->type == TJ_FALSE) ? v->type == TJ_TRUE : dflt;
}

static int json_set(const json_ctx *j, const tj_node *obj, const char *key) {
    const tj_node *v = jget(j, obj, key);
    return v && v->type != TJ_NULL;
}

/* A non-negative int32 id, or -1. */
static int32_t json_id(const tj_node *v) {
    if (!v || v->type != TJ_NUMBER || v->num < 0 || v->num >= INT32_MAX || v->num != (double)(int32_t)v->num)
        return -1;
    return (int32_t)v->num;
}

static glm53_status load_normalizer(glm53_tokenizer *t, const json_ctx *j, const tj_node *n) {
    if (!n || n->type == TJ_NULL) return GLM53_OK;
    const char *type = json_type(j, n);
    if (strcmp(type, "NFC") == 0) {
        t->nfc = 1;
        return GLM53_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        TJ_EACH(j, item, jget(j, n, "normalizers")) GLM53_TRY(load_normalizer(t, j, item));
        return GLM53_OK;
    }
    return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: normalizer \"%s\" is not supported (only NFC)", j->path, type);
}

/* Flattens the pre-tokenizer into split stages; *byte_level is set once it ends with ByteLevel. */
static glm53_status load_pre_tokenizer(glm53_tokenizer *t, const json_ctx *j, const tj_node *p, int *byte_level) {
    if (!p || p->type == TJ_NULL)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: no pre-tokenizer (byte-level BPE needs ByteLevel)", j->path);
    const char *type = json_type(j, p);
    if (*byte_level)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: pre-tokenizer \"%s\" after ByteLevel is not supported",
                          j->path, type);
    if (strcmp(type, "Sequence") == 0) {
        TJ_EACH(j, item, jget(j, p, "pretokenizers")) GLM53_TRY(load_pre_tokenizer(t, j, item, byte_level));
        return GLM53_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const tj_node *regex = jget(j, jget(j, p, "pattern"), "Regex");
        const tj_node *behavior = jget(j, p, "behavior");
        if (!regex || regex->type != TJ_STRING)
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: Split pre-tokenizer without a Regex pattern", j->path);
        if (!behavior || behavior->type != TJ_STRING || strcmp(behavior->str, "Isolated") != 0)
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: Split behavior \"%s\" is not supported (only Isolated)",
                              j->path, behavior && behavior->type == TJ_STRING ? behavior->str : "?");
        if (json_bool(j, p, "invert", 0))
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: Split with invert is not supported", j->path);
        if (strlen(regex->str) != regex->len)
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: Split regex contains a NUL", j->path);
        glm53_status s = add_stage(t, regex->str);
        if (s != GLM53_OK) {
            char msg[512];   /* the message lives in the buffer GLM53_FAIL writes: copy it first */
            snprintf(msg, sizeof msg, "%s", glm53_last_error());
            return GLM53_FAIL(s, "%s: %s", j->path, msg);
        }
        return GLM53_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_bool(j, p, "add_prefix_space", 0))
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: ByteLevel add_prefix_space is not supported", j->path);
        if (json_bool(j, p, "use_regex", 1)) GLM53_TRY(add_stage(t, glm53_split_pattern_gpt2));
        *byte_level = 1;
        return GLM53_OK;
    }
    return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: pre-tokenizer \"%s\" is not supported", j->path, type);
}

/* A merge as "left right" or ["left", "right"]. */
static int merge_parts(const json_ctx *j, const tj_node *m, const char **a, size_t *alen, const char **b,
                       size_t *blen) {
    if (m->type == TJ_STRING) {
        const char *sp = memchr(m->str, ' ', m->len);
        if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str))) return 0;
        *a = m->str; *alen = (size_t)(sp - m->str);
        *b = sp + 1; *blen = m->len - *alen - 1;
        return 1;
    }
    if (m->type != TJ_ARRAY || m->len != 2) return 0;
    const tj_node *x = &j->doc->nodes[m->first], *y = &j->doc->nodes[x->next];
    if (x->type != TJ_STRING || y->type != TJ_STRING) return 0;
    *a = x->str; *alen = x->len;
    *b = y->str; *blen = y->len;
    return 1;
}

static glm53_status load_merges(glm53_tokenizer *t, const json_ctx *j, const tj_node *merges) {
    GLM53_TRY(pairs_init(t, merges->len));
    char stack[512];
    int32_t rank = 0;
    TJ_EACH(j, m, merges) {
        const char *a, *b;
        size_t alen, blen;
        if (!merge_parts(j, m, &a, &alen, &b, &blen))
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: merge %d is not \"a b\" or [\"a\", \"b\"]", j->path, rank);
        char *both = alen + blen <= sizeof stack ? stack : malloc(alen + blen);
        if (!both) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        memcpy(both, a, alen);
        memcpy(both + alen, b, blen);
        int32_t ia = key_table_get(&t->by_string, t->arena, (const uint8_t *)a, alen);
        int32_t ib = key_table_get(&t->by_string, t->arena, (const uint8_t *)b, blen);
        int32_t im = key_table_get(&t->by_string, t->arena, (const uint8_t *)both, alen + blen);
        if (both != stack) free(both);
        if (ia < 0 || ib < 0 || im < 0)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: merge %d (\"%.*s\" \"%.*s\") uses a token not in the vocabulary",
                              j->path, rank, (int)alen, a, (int)blen, b);
        pair_put(t, ia, ib, rank, im);
        rank++;
    }
    return GLM53_OK;
}

static glm53_status check_model(const json_ctx *j, const tj_node *root) {
    const tj_node *model = jget(j, root, "model");
    const char *mtype = json_type(j, model);
    if (!model || model->type != TJ_OBJECT || (*mtype && strcmp(mtype, "BPE") != 0))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: model type \"%s\" is not supported (only BPE)", j->path, mtype);
    const tj_node *vocab = jget(j, model, "vocab"), *merges = jget(j, model, "merges");
    if (!vocab || vocab->type != TJ_OBJECT || !merges || merges->type != TJ_ARRAY)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: model.vocab / model.merges missing", j->path);
    if (json_set(j, model, "dropout") || json_set(j, model, "unk_token") || json_bool(j, model, "byte_fallback", 0) ||
        json_bool(j, model, "fuse_unk", 0))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED,
                          "%s: BPE dropout, unk_token, byte_fallback and fuse_unk are not supported", j->path);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const tj_node *v = jget(j, model, affixes[k]);
        if (v && v->type != TJ_NULL && !(v->type == TJ_STRING && v->len == 0))
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: BPE %s is not supported", j->path, affixes[k]);
    }
    if (json_set(j, root, "truncation") || json_set(j, root, "padding"))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: truncation / padding settings are not supported", j->path);
    const char *dtype = json_type(j, jget(j, root, "decoder"));
    if (strcmp(dtype, "ByteLevel") != 0)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: decoder \"%s\" is not supported (only ByteLevel)", j->path,
                          dtype);
    return GLM53_OK;
}

static glm53_status load_json(glm53_tokenizer **out, const json_ctx *j) {
    const tj_node *root = &j->doc->nodes[0];
    GLM53_TRY(check_model(j, root));
    const tj_node *model = jget(j, root, "model");
    const tj_node *vocab = jget(j, model, "vocab"), *merges = jget(j, model, "merges");
    const tj_node *added = jget(j, root, "added_tokens");
    if (added && added->type != TJ_ARRAY && added->type != TJ_NULL)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: added_tokens is not an array", j->path);

    int64_t max_base = -1;
    TJ_EACH(j, item, vocab) {
        int32_t id = json_id(item);
        if (id < 0) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: vocab entry \"%.60s\" has no valid id", j->path, item->key);
        if (id > max_base) max_base = id;
    }
    TJ_EACH(j, item, added) {
        const tj_node *content = jget(j, item, "content");
        if (json_id(jget(j, item, "id")) < 0 || !content || content->type != TJ_STRING)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: added token without a valid id and content", j->path);
        if (strlen(content->str) != content->len)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: added token content contains a NUL", j->path);
    }
    int64_t model_size = vocab->len, n_added = added ? added->len : 0;
    if (max_base < 0 && n_added == 0) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: empty vocabulary", j->path);
    /* room for every id HF can hand out: see the added-token numbering below */
    int64_t bound = (max_base > model_size ? max_base : model_size) + n_added + 1;
    if (bound > INT32_MAX) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: too many tokens", j->path);

    glm53_tokenizer *t;
    GLM53_TRY(tokenizer_new((int32_t)bound, (uint64_t)(model_size + n_added), j->path, &t));
    glm53_status s = GLM53_OK;
    TJ_EACH(j, item, vocab) {
        int32_t id = json_id(item);
        size_t len = item->key_len;
        if (t->tokens[id].flags & TOK_USED)
            s = GLM53_FAIL(GLM53_ERR_FORMAT, "%s: vocab id %d appears twice", j->path, id);
        else if (glm53_uc_utf8_valid_prefix((const uint8_t *)item->key, len) != len)
            s = GLM53_FAIL(GLM53_ERR_FORMAT, "%s: vocab entry %d is not UTF-8", j->path, id);
        else
            s = token_set(t, id, item->key, len, 1);
        if (s != GLM53_OK) break;
    }
    t->ignore_merges = json_bool(j, model, "ignore_merges", 0);
    int byte_level = 0;
    if (s == GLM53_OK) s = load_merges(t, j, merges);
    if (s == GLM53_OK) s = load_normalizer(t, j, jget(j, root, "normalizer"));
    if (s == GLM53_OK) s = load_pre_tokenizer(t, j, jget(j, root, "pre_tokenizer"), &byte_level);
    if (s == GLM53_OK && !byte_level)
        s = GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: the pre-tokenizer does not end with ByteLevel", j->path);
    /* Added tokens, numbered as HF numbers them when it reads the file (the "id" written there is only
     * checked, with a warning): in file order, a content already known keeps its id, a new one gets the
     * vocabulary size, or one past the largest added id once that is at or beyond it; a repeated added
     * token is ignored. In well-formed files this is exactly the written id. */
    int64_t max_added = -1;
    TJ_EACH(j, item, added) {
        if (s != GLM53_OK) break;
        const tj_node *content = jget(j, item, "content");
        if (content->len == 0) continue;   /* HF ignores empty added tokens */
        int32_t id = key_table_get(&t->by_string, t->arena, (const uint8_t *)content->str, content->len);
        if (id >= 0 && (t->tokens[id].flags & TOK_ADDED)) continue;
        if (id < 0) id = (int32_t)(max_added < 0 ? model_size : max_added >= model_size ? max_added + 1 : model_size);
        if (id > max_added) max_added = id;
        added_token props = {
            .special = (uint8_t)json_bool(j, item, "special", 0),
            .lstrip = (uint8_t)json_bool(j, item, "lstrip", 0),
            .rstrip = (uint8_t)json_bool(j, item, "rstrip", 0),
            .single_word = (uint8_t)json_bool(j, item, "single_word", 0),
            .normalized = (uint8_t)json_bool(j, item, "normalized", 1),
        };
        s = add_added(t, content->str, id, props, j->path);
    }
    t->n_vocab = (int32_t)((max_base > max_added ? max_base : max_added) + 1);
    if (s != GLM53_OK) { tokenizer_release(t); return s; }
    find_byte_tokens(t);
    *out = t;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Loading tiktoken rank files
 */
static int b64_value(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes base64 s[0, n) into out (room for n bytes); -1 when malformed. */
static int64_t b64_decode(const uint8_t *s, size_t n, uint8_t *out) {
    while (n > 0 && s[n - 1] == '=') n--;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(s[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return (int64_t)o;
}

/* The byte-level spelling of raw bytes (at most 2 bytes per byte), NUL-terminated. */
static size_t bytelevel_spell(const uint8_t *b, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)glm53_uc_encode(byte_char[b[i]], (uint8_t *)out + o);
    out[o] = '\0';
    return o;
}

static glm53_status load_tiktoken(glm53_tokenizer **out, const char *path, char *data, size_t len,
                                  const char *pattern, const char *const *special, const int32_t *special_ids,
                                  int32_t n_special) {
    pthread_once(&alphabet_once, alphabet_build);
    /* pass 1: count lines and find the largest rank */
    int64_t max_id = -1, n_lines = 0;
    for (char *line = data; line < data + len;) {
        char *eol = memchr(line, '\n', (size_t)(data + len - line));
        if (!eol) eol = data + len;
        char *sp = memchr(line, ' ', (size_t)(eol - line));
        if (eol > line) {
            char *end;
            long long rank = sp ? strtoll(sp + 1, &end, 10) : -1;
            if (!sp || rank < 0 || rank >= INT32_MAX)
                return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: line %lld is not \"<base64> <rank>\"", path,
                                  (long long)n_lines + 1);
            if (rank > max_id) max_id = rank;
            n_lines++;
        }
        line = eol + 1;
    }
    for (int32_t i = 0; i < n_special; i++)
        if (special_ids[i] > max_id) max_id = special_ids[i];
    if (max_id < 0) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: no tokens", path);

    glm53_tokenizer *t;
    GLM53_TRY(tokenizer_new((int32_t)(max_id + 1), (uint64_t)(n_lines + n_special), path, &t));
    t->ignore_merges = 1;   /* tiktoken looks a whole piece up before merging */
    glm53_status s = add_stage(t, pattern ? pattern : glm53_split_pattern_cl100k);
    uint8_t *bytes = malloc(len + 1);
    char *spelling = malloc(2 * len + 1);
    if (s == GLM53_OK && (!bytes || !spelling)) s = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    int64_t line_no = 0, n_pairs_max = 0;
    for (char *line = data; s == GLM53_OK && line < data + len;) {
        char *eol = memchr(line, '\n', (size_t)(data + len - line));
        if (!eol) eol = data + len;
        if (eol > line) {
            line_no++;
            char *sp = memchr(line, ' ', (size_t)(eol - line));
            int32_t id = (int32_t)strtoll(sp + 1, NULL, 10);
            int64_t n = b64_decode((const uint8_t *)line, (size_t)(sp - line), bytes);
            if (n <= 0)
                s = GLM53_FAIL(GLM53_ERR_FORMAT, "%s: line %lld: bad base64 token", path, (long long)line_no);
            else if (t->tokens[id].flags & TOK_USED)
                s = GLM53_FAIL(GLM53_ERR_FORMAT, "%s: rank %d appears twice", path, id);
            else if (key_table_get(&t->by_bytes, t->arena, bytes, (size_t)n) >= 0)
                s = GLM53_FAIL(GLM53_ERR_FORMAT, "%s: line %lld repeats a token", path, (long long)line_no);
            if (s == GLM53_OK) {
                size_t sl = bytelevel_spell(bytes, (size_t)n, spelling);
                s = token_set(t, id, spelling, sl, 1);
                n_pairs_max += n - 1;
            }
        }
        line = eol + 1;
    }
    /* merges: every split of a token into two tokens is a pair whose rank is the token's */
    if (s == GLM53_OK) s = pairs_init(t, (uint64_t)(n_pairs_max > 0 ? n_pairs_max : 1));
    for (int32_t id = 0; s == GLM53_OK && id < t->n_vocab; id++) {
        const token *tk = &t->tokens[id];
        if (!(tk->flags & TOK_USED)) continue;
        const uint8_t *b = (const uint8_t *)t->arena + tk->piece_off;
        for (uint32_t k = 1; k < tk->piece_len; k++) {
            int32_t left = key_table_get(&t->by_bytes, t->arena, b, k);
            if (left < 0) continue;
            int32_t right = key_table_get(&t->by_bytes, t->arena, b + k, tk->piece_len - k);
            if (right >= 0) pair_put(t, left, right, id, id);
        }
    }
    free(bytes);
    free(spelling);
    for (int32_t i = 0; s == GLM53_OK && i < n_special; i++) {
        if (!special[i]) { s = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "special token %d is NULL", i); break; }
        added_token props = {.special = 1};
        s = add_added(t, special[i], special_ids[i], props, path);
    }
    if (s != GLM53_OK) { tokenizer_release(t); return s; }
    find_byte_tokens(t);
    *out = t;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Public API
 */
glm53_status glm53_tokenizer_load_tiktoken(const char *path, const char *pattern, const char *const *special_tokens,
                                           const int32_t *special_ids, int32_t n_special, glm53_tokenizer **out) {
    if (!path || !out || n_special < 0 || (n_special > 0 && (!special_tokens || !special_ids)))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "glm53_tokenizer_load_tiktoken: bad arguments");
    *out = NULL;
    char *data;
    size_t len;
    GLM53_TRY(read_file(path, &data, &len));
    glm53_status s = load_tiktoken(out, path, data, len, pattern, special_tokens, special_ids, n_special);
    free(data);
    return s;
}

glm53_status glm53_tokenizer_load(const char *path, glm53_tokenizer **out) {
    if (!path || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "glm53_tokenizer_load: NULL argument");
    *out = NULL;
    char *data;
    size_t len;
    GLM53_TRY(read_file(path, &data, &len));
    glm53_status s = glm53_tokenizer_load_buffer(data, len, path, out);
    free(data);
    return s;
}

glm53_status glm53_tokenizer_load_buffer(char *data, size_t len, const char *path, glm53_tokenizer **out) {
    *out = NULL;
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n')) i++;
    glm53_status s;
    if (i < len && data[i] == '{') {
        tj_doc doc;
        s = glm53_tj_parse(data, len, path, &doc);
        if (s == GLM53_OK) {
            json_ctx j = {&doc, path};
            s = load_json(out, &j);
            glm53_tj_free(&doc);
        }
    } else {
        s = load_tiktoken(out, path, data, len, NULL, NULL, NULL, 0);
    }
    return s;
}

void glm53_tokenizer_free(glm53_tokenizer *tok) { tokenizer_release(tok); }

glm53_status glm53_tokenizer_encode(const glm53_tokenizer *tok, const char *text, size_t len, int32_t flags,
                                    int32_t *ids, int64_t cap, int64_t *n_out) {
    if (!tok || (!text && len) || (!ids && cap > 0) || cap < 0 || !n_out)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "glm53_tokenizer_encode: bad arguments");
    encoder e = {.tok = tok, .flags = flags, .ids = ids, .cap = cap};
    glm53_status s = len ? encode_text(&e, (const uint8_t *)text, len) : GLM53_OK;
    *n_out = e.n;
    if (s != GLM53_OK) return s;
    if (e.n > cap)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "glm53_tokenizer_encode: %lld ids do not fit in %lld",
                          (long long)e.n, (long long)cap);
    return GLM53_OK;
}

typedef struct {
    const glm53_tokenizer *tok;
    const char *const     *texts;
    const size_t          *lengths;
    int32_t                n_texts, flags, n_threads, worker;
    int32_t              **results;   /* [n_texts] ids, malloc'ed */
    int64_t               *counts;    /* [n_texts] */
    glm53_status           status;
    char                   error[512];
} batch_job;

static void *batch_worker(void *arg) {
    batch_job *j = arg;
    for (int32_t i = j->worker; i < j->n_texts && j->status == GLM53_OK; i += j->n_threads) {
        encoder e = {.tok = j->tok, .flags = j->flags, .grow = 1};
        const char *text = j->texts[i];
        glm53_status s = j->lengths[i] ? (text ? encode_text(&e, (const uint8_t *)text, j->lengths[i])
                                               : GLM53_FAIL(GLM53_ERR_INVALID_ARG, "text %d is NULL", i))
                                       : GLM53_OK;
        j->results[i] = e.ids;
        j->counts[i] = e.n;
        if (s != GLM53_OK) {
            j->status = s;
            snprintf(j->error, sizeof j->error, "%s", glm53_last_error());
        }
    }
    return NULL;
}

glm53_status glm53_tokenizer_encode_batch(const glm53_tokenizer *tok, const char *const *texts,
                                          const size_t *lengths, int32_t n_texts, int32_t flags, int32_t n_threads,
                                          int32_t *ids, int64_t cap, int64_t *offsets) {
    if (!tok || n_texts < 0 || (n_texts > 0 && (!texts || !lengths)) || (!ids && cap > 0) || cap < 0 || !offsets)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "glm53_tokenizer_encode_batch: bad arguments");
    if (n_threads < 1) n_threads = 1;
    if (n_threads > n_texts) n_threads = n_texts > 0 ? n_texts : 1;
    int32_t **results = calloc((size_t)n_texts + 1, sizeof(int32_t *));
    int64_t *counts = calloc((size_t)n_texts + 1, sizeof(int64_t));
    batch_job *jobs = calloc((size_t)n_threads, sizeof(batch_job));
    pthread_t *threads = calloc((size_t)n_threads, sizeof(pthread_t));
    glm53_status s = GLM53_OK;
    if (!results || !counts || !jobs || !threads) s = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "encode_batch: out of memory");
    int32_t started = 0;
    for (int32_t w = 0; s == GLM53_OK && w < n_threads; w++) {
        jobs[w] = (batch_job){tok, texts, lengths, n_texts, flags, n_threads, w, results, counts, GLM53_OK, ""};
        if (w == 0) continue;   /* worker 0 runs on this thread */
        if (pthread_create(&threads[w], NULL, batch_worker, &jobs[w]) != 0) {
            s = GLM53_FAIL(GLM53_ERR_BACKEND, "encode_batch: cannot start a thread");
            break;
        }
        started = w;
    }
    if (s == GLM53_OK) batch_worker(&jobs[0]);
    for (int32_t w = 1; w <= started; w++) pthread_join(threads[w], NULL);
    for (int32_t w = 0; s == GLM53_OK && w < n_threads; w++)
        if (jobs[w].status != GLM53_OK) s = GLM53_FAIL(jobs[w].status, "encode_batch: %s", jobs[w].error);
    if (s == GLM53_OK) {
        offsets[0] = 0;
        for (int32_t i = 0; i < n_texts; i++) {
            int64_t o = offsets[i];
            for (int64_t k = 0; k < counts[i] && o + k < cap; k++) ids[o + k] = results[i][k];
            offsets[i + 1] = o + counts[i];
        }
        if (offsets[n_texts] > cap)
            s = GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "encode_batch: %lld ids do not fit in %lld",
                           (long long)offsets[n_texts], (long long)cap);
    }
    for (int32_t i = 0; results && i < n_texts; i++) free(results[i]);
    free(results);
    free(counts);
    free(jobs);
    free(threads);
    return s;
}

glm53_status glm53_tokenizer_decode(const glm53_tokenizer *tok, const int32_t *ids, int64_t n, int32_t flags,
                                    char *out, int64_t cap, int64_t *n_out) {
    if (!tok || (!ids && n > 0) || n < 0 || (!out && cap > 0) || cap < 0 || !n_out)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "glm53_tokenizer_decode: bad arguments");
    *n_out = 0;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab || !(tok->tokens[ids[i]].flags & TOK_USED))
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "glm53_tokenizer_decode: id %d (position %lld) has no token",
                              ids[i], (long long)i);
        total += tok->tokens[ids[i]].piece_len;
    }
    uint8_t *buf = malloc(4 * total + 1);   /* the raw bytes, then their repaired UTF-8 (at most 3x) */
    if (!buf) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "glm53_tokenizer_decode: out of memory");
    size_t raw = 0;
    for (int64_t i = 0; i < n; i++) {
        const token *tk = &tok->tokens[ids[i]];
        if ((flags & GLM53_DECODE_SKIP_SPECIAL) && (tk->flags & TOK_SPECIAL)) continue;
        memcpy(buf + raw, tok->arena + tk->piece_off, tk->piece_len);
        raw += tk->piece_len;
    }
    size_t len = glm53_uc_utf8_lossy(buf, raw, buf + total);
    if (cap > 0) memcpy(out, buf + total, (size_t)cap < len ? (size_t)cap : len);
    if ((size_t)cap > len) out[len] = '\0';
    free(buf);
    *n_out = (int64_t)len;
    if ((size_t)cap < len)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "glm53_tokenizer_decode: %zu bytes do not fit in %lld", len,
                          (long long)cap);
    return GLM53_OK;
}

glm53_status glm53_tokenizer_token_to_piece(const glm53_tokenizer *tok, int32_t id, const char **piece,
                                            int64_t *len) {
    if (!tok || !piece || !len) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "glm53_tokenizer_token_to_piece: NULL");
    if (id < 0 || id >= tok->n_vocab || !(tok->tokens[id].flags & TOK_USED))
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "glm53_tokenizer_token_to_piece: id %d has no token", id);
    *piece = tok->arena + tok->tokens[id].piece_off;
    *len = tok->tokens[id].piece_len;
    return GLM53_OK;
}

const char *glm53_tokenizer_token_string(const glm53_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_vocab || !(tok->tokens[id].flags & TOK_USED)) return NULL;
    return tok->arena + tok->tokens[id].str_off;
}

int32_t glm53_tokenizer_token_id(const glm53_tokenizer *tok, const char *str) {
    if (!tok || !str) return -1;
    return key_table_get(&tok->by_string, tok->arena, (const uint8_t *)str, strlen(str));
}

int32_t glm53_tokenizer_n_vocab(const glm53_tokenizer *tok) { return tok ? tok->n_vocab : 0; }

int32_t glm53_tokenizer_is_special(const glm53_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_vocab && (tok->tokens[id].flags & TOK_SPECIAL) ? 1 : 0;
}

int32_t glm53_tokenizer_is_added(const glm53_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_vocab && (tok->tokens[id].flags & TOK_ADDED) ? 1 : 0;
}
