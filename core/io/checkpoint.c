/*
 * checkpoint.c - open a checkpoint, mmap its safetensors shards and index every tensor by name.
 *
 * A checkpoint is a directory holding
 *     config.json                      (optional here; glm53_checkpoint_config needs it)
 *     model.safetensors                or
 *     model.safetensors.index.json     {"weight_map": {"<tensor>": "<shard file>", ...}} plus the shards
 * or a single .safetensors file. Every shard is mapped read-only (MAP_PRIVATE) and its header validated by
 * safetensors.c; tensors point straight into the mapping, so opening costs no copies and no reads of weight
 * bytes. The index and the shards must agree exactly: every mapped tensor is in its shard, every shard tensor
 * is mapped, no tensor is in two shards.
 *
 * FP8: every F8_E4M3 "<x>.weight" [O, I] is paired with its F32 "<x>.weight_scale_inv"
 * [ceil(O/br), ceil(I/bc)], where br x bc is quantization_config.weight_block_size (128 x 128 by default), and
 * carries it in ->scale. The scale tensors stay in the tensor list as well.
 */
#include "core/io/config.h"
#include "core/io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* config.json and the index are small JSON files; anything this big is not one. */
#define MAX_JSON_FILE_BYTES ((size_t)100 * 1000 * 1000)

static const char INDEX_FILE[] = "model.safetensors.index.json";
static const char SINGLE_FILE[] = "model.safetensors";
static const char CONFIG_FILE[] = "config.json";
static const char SCALE_SUFFIX[] = "_scale_inv";

typedef struct shard {
    char           *file;     /* basename: shown in messages and returned by glm53_checkpoint_tensor_file */
    uint8_t        *map;      /* the whole file, read-only */
    size_t          size;
    glm53_st_header header;
} shard;

struct glm53_checkpoint {
    char         *path;
    shard        *shards;
    int32_t       n_shards;
    glm53_tensor *tensors;        /* [n_tensors], sorted by name */
    int32_t      *tensor_shard;   /* [n_tensors] */
    void        **heap_copies;    /* [n_tensors]: NULL, or the aligned copy that tensors[i].data points to */
    int64_t       n_tensors;
    char         *config_json;    /* NUL-terminated, or NULL */
    size_t        config_len;
    int32_t       fp8_block_rows, fp8_block_cols;
};

/* ------------------------------------------------------------------------------------------------------------
 * Files
 */
static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static glm53_status open_failed(const char *display, const char *named_by) {
    int err = errno;
    return GLM53_FAIL(err == ENOENT ? GLM53_ERR_NOT_FOUND : GLM53_ERR_IO, "%s: cannot open: %s%s%s%s", display,
                      strerror(err), named_by ? " (named in " : "", named_by ? named_by : "", named_by ? ")" : "");
}

static glm53_status read_text_file(const char *path, const char *display, char **out, size_t *out_len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return open_failed(display, NULL);
    glm53_status st = GLM53_OK;
    char *text = NULL;
    size_t len = 0;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = GLM53_FAIL(GLM53_ERR_IO, "%s: not a regular file", display);
    } else if ((uint64_t)sb.st_size > MAX_JSON_FILE_BYTES) {
        st = GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %lld bytes is too large for a JSON file (limit %zu)", display,
                        (long long)sb.st_size, MAX_JSON_FILE_BYTES);
    } else if (!(text = malloc((size_t)sb.st_size + 1))) {
        st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", display);
    } else {
        len = fread(text, 1, (size_t)sb.st_size, f);
        if (ferror(f) || len != (size_t)sb.st_size) st = GLM53_FAIL(GLM53_ERR_IO, "%s: read failed", display);
        text[len] = '\0';
    }
    fclose(f);
    if (st != GLM53_OK) {
        free(text);
        return st;
    }
    *out = text;
    *out_len = len;
    return GLM53_OK;
}

/* Maps `path` and parses its header into *s. named_by: the index file that referred to it, for messages. */
static glm53_status map_shard(const char *path, const char *display, const char *named_by, shard *s) {
    s->file = strdup(display);
    if (!s->file) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", display);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return open_failed(display, named_by);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return GLM53_FAIL(GLM53_ERR_IO, "%s: not a regular file", display);
    }
    s->size = (size_t)sb.st_size;
    if (s->size > 0) {   /* mmap refuses empty files; the parser reports them as too short */
        void *map = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            glm53_status st = GLM53_FAIL(GLM53_ERR_IO, "%s: mmap of %zu bytes failed: %s", display, s->size,
                                         strerror(errno));
            close(fd);
            return st;
        }
        s->map = map;
    }
    close(fd);   /* the mapping stays valid */
    return glm53_safetensors_parse(s->map, s->size, display, &s->header);
}

/* ------------------------------------------------------------------------------------------------------------
 * The tensor table
 */
typedef struct tensor_ref {
    const glm53_st_entry *entry;
    int32_t               shard;
} tensor_ref;

static int tensor_ref_cmp(const void *a, const void *b) {
    return strcmp(((const tensor_ref *)a)->entry->name, ((const tensor_ref *)b)->entry->name);
}

static int64_t find_index(const glm53_checkpoint *c, const char *name) {
    int64_t lo = 0, hi = c->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(c->tensors[mid].name, name);
        if (cmp == 0) return mid;
        if (cmp < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Gathers the tensors of all shards into one name-sorted table pointing into the mappings. */
static glm53_status build_tensor_table(glm53_checkpoint *c) {
    int64_t n = 0;
    for (int32_t s = 0; s < c->n_shards; s++) n += c->shards[s].header.n_entries;
    size_t alloc_n = (size_t)(n ? n : 1);
    tensor_ref *refs = malloc(alloc_n * sizeof *refs);
    c->tensors = calloc(alloc_n, sizeof *c->tensors);
    c->tensor_shard = calloc(alloc_n, sizeof *c->tensor_shard);
    c->heap_copies = calloc(alloc_n, sizeof *c->heap_copies);
    if (!refs || !c->tensors || !c->tensor_shard || !c->heap_copies) {
        free(refs);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld tensors", c->path, (long long)n);
    }
    int64_t k = 0;
    for (int32_t s = 0; s < c->n_shards; s++)
        for (int64_t i = 0; i < c->shards[s].header.n_entries; i++)
            refs[k++] = (tensor_ref){.entry = &c->shards[s].header.entries[i], .shard = s};
    qsort(refs, (size_t)n, sizeof *refs, tensor_ref_cmp);

    glm53_status st = GLM53_OK;
    for (int64_t i = 0; i < n && st == GLM53_OK; i++) {
        const glm53_st_entry *e = refs[i].entry;
        const shard *sh = &c->shards[refs[i].shard];
        if (i > 0 && strcmp(refs[i - 1].entry->name, e->name) == 0) {
            st = GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is also stored in %s", sh->file, e->name,
                            c->shards[refs[i - 1].shard].file);
            break;
        }
        glm53_tensor *t = &c->tensors[i];
        t->dtype = e->dtype;
        t->device = GLM53_DEVICE_CPU;
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof t->shape);
        glm53_tensor_set_contiguous(t);
        t->name = e->name;
        t->data = sh->map + sh->header.data_start + e->begin;
        c->tensor_shard[i] = refs[i].shard;
        c->n_tensors = i + 1;
        /* safetensors writers order tensors by dtype size, which keeps every element aligned; a file that does
         * not gets its misaligned tensors copied, so readers can use plain typed loads. */
        size_t elem = glm53_dtype_size((glm53_dtype)t->dtype), nbytes = (size_t)(e->end - e->begin);
        if (nbytes > 0 && (uintptr_t)t->data % elem != 0) {
            void *copy = malloc(nbytes);
            if (!copy) {
                st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: tensor '%s': out of memory", sh->file, e->name);
                break;
            }
            memcpy(copy, t->data, nbytes);
            c->heap_copies[i] = copy;
            t->data = copy;
        }
    }
    free(refs);
    return st;
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static const char *tensor_file(const glm53_checkpoint *c, int64_t i) { return c->shards[c->tensor_shard[i]].file; }

/* Pairs every F8_E4M3 "<x>.weight" with "<x>.weight_scale_inv"; a scale without an FP8 weight is an error too,
 * since nothing would ever apply it. */
static glm53_status link_fp8_scales(glm53_checkpoint *c) {
    int64_t br = c->fp8_block_rows, bc = c->fp8_block_cols;
    char name[1024];
    for (int64_t i = 0; i < c->n_tensors; i++) {
        glm53_tensor *w = &c->tensors[i];
        if (has_suffix(w->name, ".weight_scale_inv")) {
            size_t base_len = strlen(w->name) - (sizeof SCALE_SUFFIX - 1);
            if (base_len >= sizeof name)
                return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': name too long", tensor_file(c, i), w->name);
            memcpy(name, w->name, base_len);
            name[base_len] = '\0';
            int64_t j = find_index(c, name);
            if (j < 0 || c->tensors[j].dtype != GLM53_F8_E4M3)
                return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is a block scale, but '%s' is %s",
                                  tensor_file(c, i), w->name, name, j < 0 ? "missing" : "not F8_E4M3");
            continue;
        }
        if (w->dtype != GLM53_F8_E4M3 || !has_suffix(w->name, ".weight")) continue;
        if (snprintf(name, sizeof name, "%s%s", w->name, SCALE_SUFFIX) >= (int)sizeof name)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s': name too long", tensor_file(c, i), w->name);
        int64_t j = find_index(c, name);
        if (j < 0)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is F8_E4M3 but its scale '%s' is missing",
                              tensor_file(c, i), w->name, name);
        if (w->ndim != 2)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is F8_E4M3 with %d dims; block scales ('%s') need "
                              "a 2-D weight", tensor_file(c, i), w->name, w->ndim, name);
        const glm53_tensor *s = &c->tensors[j];
        int64_t rows = w->shape[0] / br + (w->shape[0] % br != 0), cols = w->shape[1] / bc + (w->shape[1] % bc != 0);
        if (s->dtype != GLM53_F32 || s->ndim != 2 || s->shape[0] != rows || s->shape[1] != cols) {
            char found[96];
            return GLM53_FAIL(GLM53_ERR_FORMAT,
                              "%s: tensor '%s' [%lld, %lld] needs scale '%s' F32 [%lld, %lld] (%lldx%lld blocks), "
                              "found %s %s",
                              tensor_file(c, i), w->name, (long long)w->shape[0], (long long)w->shape[1], name,
                              (long long)rows, (long long)cols, (long long)br, (long long)bc,
                              glm53_dtype_name((glm53_dtype)s->dtype),
                              glm53_shape_string(s->ndim, s->shape, found, sizeof found));
        }
        w->scale = s;
        w->block_rows = (int32_t)br;
        w->block_cols = (int32_t)bc;
    }
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Layouts
 */
static glm53_status add_shards(glm53_checkpoint *c, int32_t n) {
    c->shards = calloc((size_t)(n ? n : 1), sizeof *c->shards);
    if (!c->shards) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
    return GLM53_OK;
}

static glm53_status open_single(glm53_checkpoint *c, const char *file_path) {
    GLM53_TRY(add_shards(c, 1));
    c->n_shards = 1;
    GLM53_TRY(map_shard(file_path, base_name(file_path), NULL, &c->shards[0]));
    return build_tensor_table(c);
}

typedef struct mapped_tensor {
    const char *tensor, *shard;
} mapped_tensor;

static int mapped_cmp_tensor(const void *a, const void *b) {
    return strcmp(((const mapped_tensor *)a)->tensor, ((const mapped_tensor *)b)->tensor);
}

static int string_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The index's weight_map against the shards' own headers, both ways. `map` is sorted by tensor name. */
static glm53_status check_index_matches(const glm53_checkpoint *c, const mapped_tensor *map, int64_t n_map) {
    for (int64_t i = 0; i < n_map; i++) {
        int64_t j = find_index(c, map[i].tensor);
        if (j < 0)
            return GLM53_FAIL(GLM53_ERR_NOT_FOUND, "%s: tensor '%s' is mapped to %s, which does not contain it",
                              INDEX_FILE, map[i].tensor, map[i].shard);
        if (strcmp(tensor_file(c, j), map[i].shard) != 0)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is mapped to %s but stored in %s", INDEX_FILE,
                              map[i].tensor, map[i].shard, tensor_file(c, j));
    }
    /* Every mapped tensor was found in a distinct slot, so equal counts mean nothing is unmapped. */
    for (int64_t j = 0; j < c->n_tensors && c->n_tensors != n_map; j++) {
        mapped_tensor key = {.tensor = c->tensors[j].name};
        if (!bsearch(&key, map, (size_t)n_map, sizeof *map, mapped_cmp_tensor))
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is not listed in %s", tensor_file(c, j),
                              c->tensors[j].name, INDEX_FILE);
    }
    return GLM53_OK;
}

/* Reads weight_map into map[] (sorted by tensor, names validated) and the distinct shard names into shards[]. */
static glm53_status read_weight_map(const cJSON *index, mapped_tensor **map_out, int64_t *n_map_out,
                                    const char ***shards_out, int32_t *n_shards_out) {
    const cJSON *wm = cJSON_IsObject(index) ? cJSON_GetObjectItemCaseSensitive(index, "weight_map") : NULL;
    if (!cJSON_IsObject(wm))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: no \"weight_map\" object", INDEX_FILE);
    int64_t n = cJSON_GetArraySize(wm);
    mapped_tensor *map = malloc(sizeof *map * (size_t)(n ? n : 1));
    const char **shard_names = malloc(sizeof *shard_names * (size_t)(n ? n : 1));
    *map_out = map;
    *shards_out = shard_names;
    if (!map || !shard_names) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", INDEX_FILE);
    int64_t i = 0;
    for (const cJSON *v = wm->child; v; v = v->next, i++) {
        if (!cJSON_IsString(v))
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: weight_map entry for tensor '%s' is not a file name string",
                              INDEX_FILE, v->string);
        const char *file = v->valuestring;
        /* Shards must sit next to the index: a path could reach any file on the machine. */
        if (!file[0] || strchr(file, '/') || strstr(file, ".."))
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is mapped to \"%s\", which is not a plain file "
                              "name in the checkpoint directory", INDEX_FILE, v->string, file);
        map[i] = (mapped_tensor){.tensor = v->string, .shard = file};
        shard_names[i] = file;
    }
    *n_map_out = n;
    qsort(map, (size_t)n, sizeof *map, mapped_cmp_tensor);
    for (i = 1; i < n; i++)
        if (strcmp(map[i - 1].tensor, map[i].tensor) == 0)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: tensor '%s' is listed twice in weight_map", INDEX_FILE,
                              map[i].tensor);
    qsort(shard_names, (size_t)n, sizeof *shard_names, string_cmp);
    int32_t distinct = 0;
    for (i = 0; i < n; i++)
        if (distinct == 0 || strcmp(shard_names[distinct - 1], shard_names[i]) != 0)
            shard_names[distinct++] = shard_names[i];
    *n_shards_out = distinct;
    return GLM53_OK;
}

static glm53_status open_sharded_parts(glm53_checkpoint *c, const char *dir, const cJSON *index) {
    mapped_tensor *map = NULL;
    const char **shard_names = NULL;
    int64_t n_map = 0;
    int32_t n_shards = 0;
    glm53_status st = read_weight_map(index, &map, &n_map, &shard_names, &n_shards);
    if (st == GLM53_OK) st = add_shards(c, n_shards);
    for (int32_t s = 0; s < n_shards && st == GLM53_OK; s++) {
        char *path = join_path(dir, shard_names[s]);
        if (!path) {
            st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", c->path);
            break;
        }
        c->n_shards = s + 1;
        st = map_shard(path, shard_names[s], INDEX_FILE, &c->shards[s]);
        free(path);
    }
    if (st == GLM53_OK) st = build_tensor_table(c);
    if (st == GLM53_OK) st = check_index_matches(c, map, n_map);
    free(map);
    free(shard_names);
    return st;
}

static glm53_status open_sharded(glm53_checkpoint *c, const char *dir, const char *index_path) {
    char *text;
    size_t len;
    GLM53_TRY(read_text_file(index_path, INDEX_FILE, &text, &len));
    cJSON *index;
    glm53_status st = glm53_json_parse(text, len, INDEX_FILE, "the file", &index);
    free(text);
    if (st != GLM53_OK) return st;
    st = open_sharded_parts(c, dir, index);   /* tensor names in the table live in shard headers, not here */
    cJSON_Delete(index);
    return st;
}

static bool is_regular_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static glm53_status open_directory(glm53_checkpoint *c, const char *dir) {
    char *config = join_path(dir, CONFIG_FILE), *single = join_path(dir, SINGLE_FILE),
         *index = join_path(dir, INDEX_FILE);
    glm53_status st = GLM53_OK;
    if (!config || !single || !index) st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", dir);
    if (st == GLM53_OK && is_regular_file(config)) {
        st = read_text_file(config, CONFIG_FILE, &c->config_json, &c->config_len);
        /* Only the FP8 block size is needed to open; the rest is parsed by glm53_checkpoint_config. */
        if (st == GLM53_OK)
            st = glm53_config_fp8_block(c->config_json, c->config_len, CONFIG_FILE, &c->fp8_block_rows,
                                        &c->fp8_block_cols);
    }
    if (st == GLM53_OK && c->fp8_block_rows == 0) c->fp8_block_rows = c->fp8_block_cols = 128;
    if (st == GLM53_OK) {
        /* Like transformers: a single model.safetensors wins over an index. */
        if (is_regular_file(single)) st = open_single(c, single);
        else if (is_regular_file(index)) st = open_sharded(c, dir, index);
        else st = GLM53_FAIL(GLM53_ERR_NOT_FOUND, "%s: neither %s nor %s found", dir, SINGLE_FILE, INDEX_FILE);
    }
    free(config);
    free(single);
    free(index);
    return st;
}

/* ------------------------------------------------------------------------------------------------------------
 * Public API
 */
glm53_status glm53_checkpoint_open(const char *path, glm53_checkpoint **out) {
    if (!path || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "checkpoint_open: NULL argument");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return open_failed(path, NULL);
    glm53_checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    glm53_status st;
    if (S_ISDIR(sb.st_mode)) {
        st = open_directory(c, path);
    } else {
        c->fp8_block_rows = c->fp8_block_cols = 128;   /* no config.json beside a bare file */
        st = open_single(c, path);
    }
    if (st == GLM53_OK) st = link_fp8_scales(c);
    if (st != GLM53_OK) {
        glm53_checkpoint_free(c);
        return st;
    }
    *out = c;
    return GLM53_OK;
}

void glm53_checkpoint_free(glm53_checkpoint *c) {
    if (!c) return;
    for (int32_t s = 0; s < c->n_shards; s++) {
        shard *sh = &c->shards[s];
        if (sh->map) munmap(sh->map, sh->size);
        glm53_safetensors_header_free(&sh->header);
        free(sh->file);
    }
    for (int64_t i = 0; c->heap_copies && i < c->n_tensors; i++) free(c->heap_copies[i]);
    free(c->shards);
    free(c->tensors);
    free(c->tensor_shard);
    free(c->heap_copies);
    free(c->config_json);
    free(c->path);
    free(c);
}

int64_t glm53_checkpoint_n_tensors(const glm53_checkpoint *c) { return c ? c->n_tensors : 0; }

const glm53_tensor *glm53_checkpoint_tensor(const glm53_checkpoint *c, int64_t i) {
    return c && i >= 0 && i < c->n_tensors ? &c->tensors[i] : NULL;
}

const char *glm53_checkpoint_tensor_file(const glm53_checkpoint *c, int64_t i) {
    return c && i >= 0 && i < c->n_tensors ? tensor_file(c, i) : NULL;
}

glm53_status glm53_checkpoint_find(const glm53_checkpoint *c, const char *name, const glm53_tensor **out) {
    if (!c || !name || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "checkpoint_find: NULL argument");
    int64_t i = find_index(c, name);
    *out = i >= 0 ? &c->tensors[i] : NULL;
    if (i < 0) return GLM53_FAIL(GLM53_ERR_NOT_FOUND, "%s: tensor '%s' not found", c->path, name);
    return GLM53_OK;
}

const char *glm53_checkpoint_config_json(const glm53_checkpoint *c) { return c ? c->config_json : NULL; }

glm53_status glm53_checkpoint_config(const glm53_checkpoint *c, glm53_model_config *out) {
    if (!c || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "checkpoint_config: NULL argument");
    if (!c->config_json)
        return GLM53_FAIL(GLM53_ERR_NOT_FOUND, "%s: no %s (a bare .safetensors file has no configuration)", c->path,
                          CONFIG_FILE);
    return glm53_config_parse(c->config_json, c->config_len, CONFIG_FILE, out);
}
