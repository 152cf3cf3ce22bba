/*
 * safetensors.c - parse and validate a safetensors header held in memory.
 *
 * The header is untrusted input (a truncated download, a buggy converter, a fuzzer). Everything it claims is
 * checked against the buffer before anyone turns an entry into a pointer:
 *   - the 8-byte length fits the buffer and a sane bound, the JSON is one object and nothing but whitespace
 *     (writers pad with spaces) follows it;
 *   - every tensor entry has a known dtype, at most GLM53_MAX_DIMS non-negative integer dims and two integer
 *     data_offsets inside the data region, and those offsets hold exactly numel * dtype_size bytes (computed
 *     without overflow);
 *   - no tensor name appears twice and no two tensors share a byte.
 * Gaps between tensors and bytes after the last tensor are allowed (they are harmless padding).
 */
#include "core/io/safetensors.h"

#include "core/io/config.h"

#include <stdio.h>
#include <stdlib.h>

/* JSON numbers arrive as doubles; above 2^53 integers stop being exact, and no file or dimension is that big. */
#define JSON_MAX_EXACT_INTEGER 9007199254740992.0

static bool json_to_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= JSON_MAX_EXACT_INTEGER) || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static bool dtype_from_name(const char *s, glm53_dtype *out) {
    for (int d = 0; d < GLM53_DTYPE_COUNT; d++) {
        if (strcmp(s, glm53_dtype_name((glm53_dtype)d)) == 0) {
            *out = (glm53_dtype)d;
            return true;
        }
    }
    return false;
}


/* Fills *e from one header entry; data_size bounds the offsets. */
static glm53_status parse_entry(const cJSON *item, const char *file, uint64_t data_size, glm53_st_entry *e) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", file, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dtype))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': \"dtype\" is missing or not a string", file, name);
    if (!cJSON_IsArray(shape))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': \"shape\" is missing or not an array", file, name);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is missing or not [begin, end]",
                          file, name);

    glm53_dtype dt;
    if (!dtype_from_name(dtype->valuestring, &dt))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED,
                          "%s: tensor '%s': dtype \"%s\" is not supported (F32, BF16, F16, F8_E4M3, I32, I64, F64)",
                          file, name, dtype->valuestring);
    e->dtype = dt;

    int ndim = cJSON_GetArraySize(shape);
    if (ndim > GLM53_MAX_DIMS)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: tensor '%s': %d dims, at most %d are supported", file, name,
                          ndim, GLM53_MAX_DIMS);
    e->ndim = ndim;
    /* The product of the non-zero dims must fit int64: strides and row counts are computed from it even when
     * another dim is 0 and the tensor is empty. */
    uint64_t nonzero_product = 1;
    bool empty = false;
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t n;
        if (!json_to_u64(d, &n))
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", file,
                              name, i);
        e->shape[i] = (int64_t)n;
        if (n == 0) {
            empty = true;
        } else if (__builtin_mul_overflow(nonzero_product, n, &nonzero_product) ||
                   nonzero_product > (uint64_t)INT64_MAX) {
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': shape has more than 2^63 elements", file, name);
        }
    }
    uint64_t numel = empty ? 0 : nonzero_product;

    uint64_t begin, end;
    if (!json_to_u64(offsets->child, &begin) || !json_to_u64(offsets->child->next, &end))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", file,
                          name);
    if (begin > end)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                          file, name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return GLM53_FAIL(GLM53_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data region "
                          "(%llu bytes; truncated file?)",
                          file, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_size);
    e->begin = begin;
    e->end = end;

    uint64_t nbytes;
    char shape_buf[128];
    if (__builtin_mul_overflow(numel, (uint64_t)glm53_dtype_size(dt), &nbytes) || nbytes != end - begin)
        return GLM53_FAIL(GLM53_ERR_FORMAT,
                          "%s: tensor '%s': shape %s of %s needs %llu x %zu bytes but data_offsets [%llu, %llu] "
                          "hold %llu",
                          file, name, glm53_shape_string(e->ndim, e->shape, shape_buf, sizeof shape_buf),
                          glm53_dtype_name(dt),
                          (unsigned long long)numel, glm53_dtype_size(dt), (unsigned long long)begin,
                          (unsigned long long)end, (unsigned long long)(end - begin));
    return GLM53_OK;
}

static glm53_status check_metadata(const cJSON *meta, const char *file) {
    if (!cJSON_IsObject(meta))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", file);
    for (const cJSON *v = meta->child; v; v = v->next)
        if (!cJSON_IsString(v))
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: \"__metadata__\" value '%s' is not a string", file,
                              v->string);
    return GLM53_OK;
}

static int entry_cmp_name(const void *a, const void *b) {
    return strcmp(((const glm53_st_entry *)a)->name, ((const glm53_st_entry *)b)->name);
}

static int entry_cmp_begin(const void *a, const void *b) {
    const glm53_st_entry *x = *(const glm53_st_entry *const *)a, *y = *(const glm53_st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Entries must already be sorted by name. */
static glm53_status check_unique_and_disjoint(const glm53_st_header *h, const char *file) {
    for (int64_t i = 1; i < h->n_entries; i++)
        if (strcmp(h->entries[i - 1].name, h->entries[i].name) == 0)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", file,
                              h->entries[i].name);

    const glm53_st_entry **by_begin = malloc(sizeof *by_begin * (size_t)(h->n_entries ? h->n_entries : 1));
    if (!by_begin) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory sorting tensors", file);
    int64_t n = 0;
    for (int64_t i = 0; i < h->n_entries; i++)
        if (h->entries[i].end > h->entries[i].begin) by_begin[n++] = &h->entries[i];   /* empty ones own no byte */
    qsort(by_begin, (size_t)n, sizeof *by_begin, entry_cmp_begin);
    glm53_status st = GLM53_OK;
    for (int64_t i = 1; i < n; i++) {
        const glm53_st_entry *prev = by_begin[i - 1], *cur = by_begin[i];
        if (prev->end > cur->begin) {
            st = GLM53_FAIL(GLM53_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]", file,
                            cur->name, (unsigned long long)cur->begin, (unsigned long long)cur->end, prev->name,
                            (unsigned long long)prev->begin, (unsigned long long)prev->end);
            break;
        }
    }
    free(by_begin);
    return st;
}

static glm53_status parse_header_json(const cJSON *root, const char *file, glm53_st_header *h) {
    if (!cJSON_IsObject(root)) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: header is not a JSON object", file);
    int64_t n = 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) GLM53_TRY(check_metadata(item, file));
        else n++;
    }
    h->entries = calloc((size_t)(n ? n : 1), sizeof *h->entries);
    if (!h->entries) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld tensors", file,
                                       (long long)n);
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        glm53_st_entry *e = &h->entries[h->n_entries];
        e->name = strdup(item->string);
        if (!e->name) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", file);
        h->n_entries++;
        GLM53_TRY(parse_entry(item, file, h->data_size, e));
    }
    qsort(h->entries, (size_t)h->n_entries, sizeof *h->entries, entry_cmp_name);
    return check_unique_and_disjoint(h, file);
}

glm53_status glm53_safetensors_parse(const uint8_t *buf, size_t len, const char *display_name,
                                     glm53_st_header *out) {
    const char *file = display_name ? display_name : "(buffer)";
    memset(out, 0, sizeof *out);
    if (!buf && len) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "%s: NULL buffer", file);
    if (len < 8)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length", file,
                          len);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | buf[i];
    if (header_len > GLM53_SAFETENSORS_MAX_HEADER)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: header length %llu is absurd (limit %llu bytes)", file,
                          (unsigned long long)header_len, (unsigned long long)GLM53_SAFETENSORS_MAX_HEADER);
    if (header_len > len - 8)
        return GLM53_FAIL(GLM53_ERR_FORMAT,
                          "%s: header length %llu runs past the end of the file (%zu bytes; truncated file?)", file,
                          (unsigned long long)header_len, len);

    cJSON *root = NULL;
    GLM53_TRY(glm53_json_parse((const char *)buf + 8, (size_t)header_len, file, "header", &root));
    out->data_start = 8 + header_len;
    out->data_size = len - out->data_start;
    glm53_status st = parse_header_json(root, file, out);
    cJSON_Delete(root);
    if (st != GLM53_OK) glm53_safetensors_header_free(out);
    return st;
}

void glm53_safetensors_header_free(glm53_st_header *header) {
    if (!header) return;
    for (int64_t i = 0; i < header->n_entries; i++) free(header->entries[i].name);
    free(header->entries);
    memset(header, 0, sizeof *header);
}
