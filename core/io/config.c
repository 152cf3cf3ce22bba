/*
 * config.c - config.json -> glm53_model_config, mirroring Hugging Face's Glm5NextConfig.
 *
 * Two layouts exist and both are accepted:
 *   nested  {"model_type": "glm5_next", "text_config": {...}, "vision_config": {...}, "image_token_id": ...,
 *            "quantization_config": {...}}                       (what save_pretrained writes)
 *   flat    {"model_type": "glm5_next_text", "hidden_size": ..., ...}   (text keys at the top level)
 * Absent keys take the defaults of transformers' configuration_glm5_next.py, and the per-layer schedules are
 * derived the way its __post_init__ derives them (see derive_* below), so a config that loads in HF describes
 * the same model here. JSON null counts as absent, except where HF gives null a meaning (pad_token_id: no pad,
 * linear_lower_bound: no bound, q_lora_rank: forbidden).
 *
 * Values glm53 cannot run are refused with GLM53_ERR_UNSUPPORTED (RoPE in MLA, a non-sigmoid router, an
 * unknown layer type); values no model can have (a negative width, a list of the wrong length, a string where
 * a number belongs) with GLM53_ERR_FORMAT. Every message names the file, the key and the value.
 */
#include "core/io/config.h"

#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

glm53_status glm53_json_parse(const char *text, size_t len, const char *file, const char *what, cJSON **out) {
    *out = NULL;
    /* cJSON gets a NUL-terminated copy: some cJSON releases read one byte past a length-bounded buffer, and
     * a NUL inside the text would otherwise end the parse early and hide the bytes after it. */
    if (memchr(text, '\0', len))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s contains a NUL byte at byte %td", file, what,
                          (const char *)memchr(text, '\0', len) - text);
    char *copy = malloc(len + 1);
    if (!copy) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes of JSON", file, len);
    memcpy(copy, text, len);
    copy[len] = '\0';
    const char *end = NULL;
    /* require_null_terminated: only whitespace may follow the value. */
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
    ptrdiff_t where = end ? end - copy : 0;
    free(copy);
    if (!root)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s is not valid JSON (error near byte %td of %zu)", file, what,
                          where, len);
    *out = root;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Typed key access. A scope is a JSON object plus the path used to name its keys in messages.
 */
typedef struct scope {
    const cJSON *obj;
    const char  *file;     /* "config.json" */
    const char  *prefix;   /* "", "text_config.", "vision_config.", "text_config.linear_attn_config." ... */
} scope;

/* The key's value, or NULL when absent or JSON null. */
static const cJSON *get(const scope *s, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s->obj, key);
    return cJSON_IsNull(v) ? NULL : v;
}

static bool is_null(const scope *s, const char *key) {
    return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s->obj, key));
}

/* A short rendering of a JSON value for messages. */
static const char *describe(const cJSON *v, char *buf, size_t size) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNumber(v)) {
        snprintf(buf, size, "%.10g", v->valuedouble);
        return buf;
    }
    if (cJSON_IsString(v)) {
        snprintf(buf, size, "\"%.48s%s\"", v->valuestring, strlen(v->valuestring) > 48 ? "..." : "");
        return buf;
    }
    return cJSON_IsArray(v) ? "an array" : "an object";
}

static glm53_status wrong_type(const scope *s, const char *key, const cJSON *v, const char *expected) {
    char buf[80];
    return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s is %s, expected %s", s->file, s->prefix, key,
                      describe(v, buf, sizeof buf), expected);
}

static bool json_int32(const cJSON *v, int32_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= INT32_MIN && d <= INT32_MAX) || d != floor(d)) return false;
    *out = (int32_t)d;
    return true;
}

/* An integer key in [min, max]; absent -> dflt. */
static glm53_status read_int_range(const scope *s, const char *key, int32_t dflt, int32_t min, int32_t max,
                                   int32_t *out) {
    const cJSON *v = get(s, key);
    if (!v) {
        *out = dflt;
        return GLM53_OK;
    }
    if (!json_int32(v, out)) return wrong_type(s, key, v, "an integer");
    if (*out < min)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s is %d, must be >= %d", s->file, s->prefix, key, *out, min);
    if (*out > max)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: %s%s is %d, must be <= %d", s->file, s->prefix, key, *out,
                          max);
    return GLM53_OK;
}

/* An integer key >= min; absent -> dflt. */
static glm53_status read_int(const scope *s, const char *key, int32_t dflt, int32_t min, int32_t *out) {
    return read_int_range(s, key, dflt, min, INT32_MAX, out);
}

/* A finite number key in [min, max] (exclusive at min when min_exclusive); absent -> dflt. */
static glm53_status read_float_range(const scope *s, const char *key, float dflt, float min, bool min_exclusive,
                                     float max, float *out) {
    const cJSON *v = get(s, key);
    if (!v) {
        *out = dflt;
        return GLM53_OK;
    }
    if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) <= FLT_MAX))
        return wrong_type(s, key, v, "a finite number in float range");
    *out = (float)v->valuedouble;
    if (min_exclusive ? !(*out > min) : !(*out >= min))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s is %g, must be %s %g", s->file, s->prefix, key,
                          v->valuedouble, min_exclusive ? ">" : ">=", min);
    if (!(*out <= max))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s is %g, must be <= %g", s->file, s->prefix, key,
                          v->valuedouble, max);
    return GLM53_OK;
}

static glm53_status read_bool(const scope *s, const char *key, int32_t dflt, int32_t *out) {
    const cJSON *v = get(s, key);
    if (!v) {
        *out = dflt;
        return GLM53_OK;
    }
    if (!cJSON_IsBool(v)) return wrong_type(s, key, v, "true or false");
    *out = cJSON_IsTrue(v);
    return GLM53_OK;
}

/* An optional string key: *out is NULL when absent. */
static glm53_status read_string(const scope *s, const char *key, const char **out) {
    const cJSON *v = get(s, key);
    *out = NULL;
    if (!v) return GLM53_OK;
    if (!cJSON_IsString(v)) return wrong_type(s, key, v, "a string");
    *out = v->valuestring;
    return GLM53_OK;
}

/* An optional string key that, when present, must be one of `allowed` (NULL-terminated). */
static glm53_status require_string_in(const scope *s, const char *key, const char *const *allowed) {
    const char *value;
    GLM53_TRY(read_string(s, key, &value));
    if (!value) return GLM53_OK;
    char expected[160] = "";
    for (int i = 0; allowed[i]; i++) {
        if (strcmp(value, allowed[i]) == 0) return GLM53_OK;
        size_t n = strlen(expected);
        snprintf(expected + n, sizeof expected - n, "%s\"%s\"", i ? " or " : "", allowed[i]);
    }
    return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: %s%s is \"%s\"; glm53 supports only %s", s->file, s->prefix, key,
                      value, expected);
}

/* An optional sub-object; *out->obj is NULL when absent. */
static glm53_status read_object(const scope *s, const char *key, char *prefix_buf, size_t prefix_size,
                                scope *out) {
    const cJSON *v = get(s, key);
    snprintf(prefix_buf, prefix_size, "%s%s.", s->prefix, key);
    *out = (scope){.obj = NULL, .file = s->file, .prefix = prefix_buf};
    if (!v) return GLM53_OK;
    if (!cJSON_IsObject(v)) return wrong_type(s, key, v, "an object");
    out->obj = v;
    return GLM53_OK;
}

/* Python truthiness of a JSON value, for HF's `dict.get("safe_gate", True)`. */
static bool json_truthy(const cJSON *v) {
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != '\0';
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return false;   /* null */
}

/* ------------------------------------------------------------------------------------------------------------
 * Per-layer lists
 */
typedef struct name_map {
    const char *name;
    int32_t     value;
} name_map;

static const name_map layer_type_names[] = {
    {"linear_attention", GLM53_LAYER_KDA},
    {"deepseek_sparse_attention", GLM53_LAYER_SPARSE_MLA},
    {"full_attention", GLM53_LAYER_SPARSE_MLA},   /* HF and lmdeploy alias */
    {NULL, 0},
};
static const name_map mlp_type_names[] = {{"dense", GLM53_MLP_DENSE}, {"sparse", GLM53_MLP_MOE}, {NULL, 0}};
static const name_map indexer_type_names[] = {
    {"full", GLM53_INDEXER_FULL}, {"shared", GLM53_INDEXER_SHARED}, {NULL, 0}};

static glm53_status wrong_length(const scope *s, const char *key, int n, int n_layers) {
    return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s has %d entries but num_hidden_layers is %d", s->file, s->prefix,
                      key, n, n_layers);
}

/* Reads the list `list` (the value of `key`) of per-layer names into values[0, n_layers). */
static glm53_status read_name_list(const scope *s, const char *key, const cJSON *list, int n_layers,
                                   const name_map *names, int32_t *values) {
    if (!cJSON_IsArray(list)) return wrong_type(s, key, list, "a list of strings");
    int n = cJSON_GetArraySize(list);
    if (n != n_layers) return wrong_length(s, key, n, n_layers);
    int i = 0;
    for (const cJSON *v = list->child; v; v = v->next, i++) {
        if (!cJSON_IsString(v)) {
            char buf[80];
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s[%d] is %s, expected a string", s->file, s->prefix, key, i,
                              describe(v, buf, sizeof buf));
        }
        int k = 0;
        while (names[k].name && strcmp(names[k].name, v->valuestring) != 0) k++;
        if (!names[k].name) {
            char expected[160] = "";
            for (int j = 0; names[j].name; j++) {
                size_t len = strlen(expected);
                snprintf(expected + len, sizeof expected - len, "%s\"%s\"", j ? ", " : "", names[j].name);
            }
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: %s%s[%d] is \"%.64s\", expected one of %s", s->file,
                              s->prefix, key, i, v->valuestring, expected);
        }
        values[i] = names[k].value;
    }
    return GLM53_OK;
}

/* Reads a list of distinct layer indices in [0, n_layers) and marks them in marked[]. */
static glm53_status read_layer_ids(const scope *s, const char *key, const cJSON *list, int n_layers,
                                   uint8_t *marked) {
    if (!cJSON_IsArray(list)) return wrong_type(s, key, list, "a list of layer indices");
    int i = 0;
    for (const cJSON *v = list->child; v; v = v->next, i++) {
        int32_t id;
        char buf[80];
        if (!json_int32(v, &id) || id < 0 || id >= n_layers)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s[%d] is %s, expected a layer index in [0, %d)", s->file,
                              s->prefix, key, i, describe(v, buf, sizeof buf), n_layers);
        if (marked[id])
            return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %s%s lists layer %d twice", s->file, s->prefix, key, id);
        marked[id] = 1;
    }
    return GLM53_OK;
}

/* layer_types: the explicit list; else linear_attn_config.kda_layers / full_attn_layers (lmdeploy's legacy
 * form, 0-based, the two lists partition the layers); else HF's rule: DSA iff i % 4 == 3. */
static glm53_status derive_layer_types(const scope *text, const scope *linear_dict, glm53_text_config *t) {
    int n_layers = t->num_hidden_layers;
    const cJSON *explicit_list = get(text, "layer_types");
    if (explicit_list)
        return read_name_list(text, "layer_types", explicit_list, n_layers, layer_type_names, t->layer_types);

    const cJSON *kda = linear_dict->obj ? get(linear_dict, "kda_layers") : NULL;
    const cJSON *full = linear_dict->obj ? get(linear_dict, "full_attn_layers") : NULL;
    if (!kda && !full) {
        for (int i = 0; i < n_layers; i++) t->layer_types[i] = i % 4 == 3 ? GLM53_LAYER_SPARSE_MLA : GLM53_LAYER_KDA;
        return GLM53_OK;
    }
    uint8_t in_kda[GLM53_MAX_LAYERS] = {0}, in_full[GLM53_MAX_LAYERS] = {0};
    if (kda) GLM53_TRY(read_layer_ids(linear_dict, "kda_layers", kda, n_layers, in_kda));
    if (full) GLM53_TRY(read_layer_ids(linear_dict, "full_attn_layers", full, n_layers, in_full));
    for (int i = 0; i < n_layers; i++) {
        if (kda && full && in_kda[i] == in_full[i])
            return GLM53_FAIL(GLM53_ERR_FORMAT,
                              "%s: %skda_layers and full_attn_layers must partition the %d layers, but layer %d "
                              "is in %s",
                              linear_dict->file, linear_dict->prefix, n_layers, i, in_kda[i] ? "both" : "neither");
        bool is_kda = kda ? in_kda[i] : !in_full[i];
        t->layer_types[i] = is_kda ? GLM53_LAYER_KDA : GLM53_LAYER_SPARSE_MLA;
    }
    return GLM53_OK;
}

/* mlp_layer_types: the explicit list; else the first min(first_k_dense_replace, L) layers dense, the rest MoE
 * (HF hard-codes 3, which is first_k_dense_replace's default). */
static glm53_status derive_mlp_types(const scope *text, glm53_text_config *t) {
    int n_layers = t->num_hidden_layers;
    const cJSON *explicit_list = get(text, "mlp_layer_types");
    if (explicit_list)
        return read_name_list(text, "mlp_layer_types", explicit_list, n_layers, mlp_type_names, t->mlp_types);
    int32_t first_dense, moe_freq;
    GLM53_TRY(read_int(text, "first_k_dense_replace", 3, 0, &first_dense));
    /* lmdeploy's fallback also honours moe_layer_freq; HF ignores it. Rather than pick one silently, a config
     * that relies on a frequency other than 1 must spell out mlp_layer_types. */
    GLM53_TRY(read_int(text, "moe_layer_freq", 1, 1, &moe_freq));
    if (moe_freq != 1)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED,
                          "%s: %smoe_layer_freq is %d; without an explicit mlp_layer_types only 1 is supported",
                          text->file, text->prefix, moe_freq);
    for (int i = 0; i < n_layers; i++) t->mlp_types[i] = i < first_dense ? GLM53_MLP_DENSE : GLM53_MLP_MOE;
    return GLM53_OK;
}

/* indexer_types: the explicit list; else index_topk_pattern ("FSSF..." or a list of names); else layer i runs
 * its own indexer iff max(i - index_skip_topk_offset + 1, 0) % max(index_topk_freq, 1) == 0 (HF). */
static glm53_status derive_indexer_types(const scope *text, glm53_text_config *t) {
    int n_layers = t->num_hidden_layers;
    const cJSON *explicit_list = get(text, "indexer_types");
    if (explicit_list)
        return read_name_list(text, "indexer_types", explicit_list, n_layers, indexer_type_names,
                              t->indexer_types);
    const cJSON *pattern = get(text, "index_topk_pattern");
    if (cJSON_IsString(pattern)) {
        int n = (int)strlen(pattern->valuestring);
        if (n != n_layers) return wrong_length(text, "index_topk_pattern", n, n_layers);
        for (int i = 0; i < n; i++) {
            char c = pattern->valuestring[i];
            if (c != 'F' && c != 'S')
                return GLM53_FAIL(GLM53_ERR_UNSUPPORTED,
                                  "%s: %sindex_topk_pattern has '%c' at position %d, expected 'F' or 'S'",
                                  text->file, text->prefix, c, i);
            t->indexer_types[i] = c == 'F' ? GLM53_INDEXER_FULL : GLM53_INDEXER_SHARED;
        }
        return GLM53_OK;
    }
    if (pattern)
        return read_name_list(text, "index_topk_pattern", pattern, n_layers, indexer_type_names,
                              t->indexer_types);
    int32_t freq, offset;
    GLM53_TRY(read_int(text, "index_topk_freq", 1, INT32_MIN, &freq));
    GLM53_TRY(read_int(text, "index_skip_topk_offset", 2, INT32_MIN, &offset));
    if (freq < 1) freq = 1;
    for (int i = 0; i < n_layers; i++) {
        int64_t k = (int64_t)i - offset + 1;
        t->indexer_types[i] = (k > 0 ? k : 0) % freq == 0 ? GLM53_INDEXER_FULL : GLM53_INDEXER_SHARED;
    }
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Sections
 */
typedef struct int_key {
    const char *key;
    int32_t     dflt, min, max;
    size_t      offset;
} int_key;

/* The ranges: sizes positive and far above any released model, below what the engine's int32 indexing and
 * allocation arithmetic can hold; counts the kernels loop over bounded (a Sinkhorn of 1e9 iterations would
 * hang the step). GLM-5.3-Flash's values are the defaults. */
enum { SIZE_MAX_DIM = 1 << 20, SIZE_MAX_VOCAB = 1 << 24 };
#define TEXT_INT(key, dflt, min, max) {#key, dflt, min, max, offsetof(glm53_text_config, key)}
static const int_key text_int_keys[] = {
    TEXT_INT(vocab_size, 154880, 1, SIZE_MAX_VOCAB),
    TEXT_INT(hidden_size, 4096, 1, 1 << 16),
    TEXT_INT(intermediate_size, 12288, 1, SIZE_MAX_DIM),
    TEXT_INT(moe_intermediate_size, 2048, 1, SIZE_MAX_DIM),
    TEXT_INT(num_experts_per_tok, 8, 1, 1024),
    TEXT_INT(n_shared_experts, 1, 0, 64),
    TEXT_INT(n_group, 1, 1, 1 << 16),
    TEXT_INT(topk_group, 1, 1, 1 << 16),
    TEXT_INT(num_attention_heads, 64, 1, 4096),
    TEXT_INT(kv_lora_rank, 512, 1, 1 << 16),
    TEXT_INT(qk_nope_head_dim, 256, 1, 1 << 14),
    TEXT_INT(qk_rope_head_dim, 0, 0, 1 << 14),
    TEXT_INT(v_head_dim, 256, 1, 1 << 14),
    TEXT_INT(index_n_heads, 32, 1, 4096),
    TEXT_INT(index_head_dim, 128, 1, 1 << 14),
    TEXT_INT(index_topk, 2048, 1, SIZE_MAX_DIM),
    TEXT_INT(index_kpool, 16, 1, 64),                 /* the pool softmax keeps a pool's logits on the stack */
    TEXT_INT(linear_num_heads, 64, 1, 4096),
    TEXT_INT(linear_head_dim, 128, 1, 1 << 12),
    TEXT_INT(linear_conv_kernel_dim, 4, 1, 64),
    TEXT_INT(hc_mult, 4, 1, 16),                      /* the mHC ops keep S x S maps in fixed arrays */
    TEXT_INT(hc_sinkhorn_iters, 20, 0, 1000),
    TEXT_INT(num_nextn_predict_layers, 0, 0, 16),
};
#undef TEXT_INT

static glm53_status read_int_keys(const scope *s, const int_key *keys, size_t n, void *base) {
    for (size_t i = 0; i < n; i++)
        GLM53_TRY(read_int_range(s, keys[i].key, keys[i].dflt, keys[i].min, keys[i].max,
                                 (int32_t *)((char *)base + keys[i].offset)));
    return GLM53_OK;
}

/* The KDA scalars: linear_* keys, overridden by the legacy linear_attn_config dict as HF's __post_init__ does
 * (the dict wins; its bound is gate_lower_bound, or lower_bound in older files; safe_gate, default true,
 * restores the -5 bound when the bound is null). */
static glm53_status read_linear(const scope *text, const scope *dict, glm53_text_config *t) {
    const cJSON *bound = get(text, "linear_lower_bound");
    bool has_bound = !is_null(text, "linear_lower_bound");   /* absent: HF default -5.0; null: no bound */
    float bound_value = -5.0f;
    /* The forget gate is bound * sigmoid(...): a bound above 0 would grow the state instead of decaying it. */
    if (bound) GLM53_TRY(read_float_range(text, "linear_lower_bound", -5.0f, -1e4f, false, 0.0f, &bound_value));
    if (dict->obj) {
        GLM53_TRY(read_int_range(dict, "head_dim", t->linear_head_dim, 1, 1 << 12, &t->linear_head_dim));
        GLM53_TRY(read_int_range(dict, "num_heads", t->linear_num_heads, 1, 4096, &t->linear_num_heads));
        GLM53_TRY(read_int_range(dict, "short_conv_kernel_size", t->linear_conv_kernel_dim, 1, 64,
                                 &t->linear_conv_kernel_dim));
        const char *key = cJSON_GetObjectItemCaseSensitive(dict->obj, "gate_lower_bound") ? "gate_lower_bound"
                          : cJSON_GetObjectItemCaseSensitive(dict->obj, "lower_bound") ? "lower_bound"
                                                                                       : NULL;
        if (key) {
            has_bound = !is_null(dict, key);
            if (has_bound) GLM53_TRY(read_float_range(dict, key, -5.0f, -1e4f, false, 0.0f, &bound_value));
        }
        const cJSON *safe_gate = cJSON_GetObjectItemCaseSensitive(dict->obj, "safe_gate");
        if ((!safe_gate || json_truthy(safe_gate)) && !has_bound) {
            has_bound = true;
            bound_value = -5.0f;
        }
    }
    t->linear_has_lower_bound = has_bound;
    t->linear_lower_bound = has_bound ? bound_value : 0.0f;
    return GLM53_OK;
}

/* Cross-key rules: what HF's validate_architecture checks plus what the engine's kernels rely on. */
static glm53_status validate_text(const scope *s, const glm53_text_config *t, int32_t num_key_value_heads) {
    const char *f = s->file, *p = s->prefix;
    if (t->qk_rope_head_dim != 0)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED,
                          "%s: %sqk_rope_head_dim is %d; GLM-5.3 attention is NoPE and glm53 supports only 0", f, p,
                          t->qk_rope_head_dim);
    if (num_key_value_heads != t->num_attention_heads)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %snum_key_value_heads is %d but num_attention_heads is %d (MLA "
                          "needs them equal)", f, p, num_key_value_heads, t->num_attention_heads);
    if (t->index_topk % t->index_kpool != 0)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %sindex_topk is %d, not divisible by index_kpool (%d)", f, p,
                          t->index_topk, t->index_kpool);
    if (t->num_experts_per_tok > t->n_routed_experts)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %snum_experts_per_tok is %d but there are only %d routed experts",
                          f, p, t->num_experts_per_tok, t->n_routed_experts);
    if (t->n_routed_experts % t->n_group != 0 || t->topk_group > t->n_group)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %sn_group %d / topk_group %d do not fit %d routed experts", f, p,
                          t->n_group, t->topk_group, t->n_routed_experts);
    /* A "shared" layer reuses the selection of the previous "full" DSA layer; the first DSA layer has none. */
    for (int i = 0; i < t->num_hidden_layers; i++) {
        if (t->layer_types[i] != GLM53_LAYER_SPARSE_MLA) continue;
        if (t->indexer_types[i] == GLM53_INDEXER_SHARED)
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED,
                              "%s: %sthe indexer of layer %d, the first sparse-attention layer, is \"shared\", but "
                              "there is no earlier indexer to share (see indexer_types, index_topk_pattern, "
                              "index_topk_freq, index_skip_topk_offset)", f, p, i);
        break;
    }
    return GLM53_OK;
}

static glm53_status parse_text(const scope *text, const scope *root, glm53_text_config *t) {
    static const char *const model_types[] = {"glm5_next_text", "glm5_next", NULL};
    static const char *const scoring[] = {"sigmoid", NULL}, *const topk_methods[] = {"noaux_tc", NULL},
                             *const acts[] = {"silu", NULL};
    if (text != root) GLM53_TRY(require_string_in(text, "model_type", model_types));
    GLM53_TRY(require_string_in(text, "scoring_func", scoring));
    GLM53_TRY(require_string_in(text, "topk_method", topk_methods));
    GLM53_TRY(require_string_in(text, "hidden_act", acts));

    GLM53_TRY(read_int(text, "num_hidden_layers", 45, 1, &t->num_hidden_layers));
    if (t->num_hidden_layers > GLM53_MAX_LAYERS)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: %snum_hidden_layers is %d, glm53 supports at most %d",
                          text->file, text->prefix, t->num_hidden_layers, GLM53_MAX_LAYERS);
    GLM53_TRY(read_int_keys(text, text_int_keys, sizeof text_int_keys / sizeof text_int_keys[0], t));
    /* n_routed_experts has the HF alias num_local_experts (attribute_map). */
    const char *experts_key = get(text, "n_routed_experts") || !get(text, "num_local_experts")
                                  ? "n_routed_experts" : "num_local_experts";
    GLM53_TRY(read_int_range(text, experts_key, 288, 1, 1 << 16, &t->n_routed_experts));
    if (is_null(text, "q_lora_rank"))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %sq_lora_rank is null; sparse attention requires a query LoRA",
                          text->file, text->prefix);
    GLM53_TRY(read_int_range(text, "q_lora_rank", 1536, 1, 1 << 16, &t->q_lora_rank));
    int32_t num_key_value_heads;
    GLM53_TRY(read_int(text, "num_key_value_heads", t->num_attention_heads, 1, &num_key_value_heads));

    GLM53_TRY(read_float_range(text, "routed_scaling_factor", 2.5f, 0.0f, true, 1e6f, &t->routed_scaling_factor));
    GLM53_TRY(read_float_range(text, "rms_norm_eps", 1e-5f, 0.0f, true, 1.0f, &t->rms_norm_eps));
    GLM53_TRY(read_float_range(text, "swiglu_limit", 10.0f, 0.0f, false, 1e30f, &t->swiglu_limit));   /* 0: none */
    GLM53_TRY(read_float_range(text, "hc_eps", 1e-6f, 0.0f, false, 1.0f, &t->hc_eps));
    GLM53_TRY(read_bool(text, "norm_topk_prob", 1, &t->norm_topk_prob));
    GLM53_TRY(read_bool(text, "index_kpool_always_select_tail", 1, &t->index_kpool_always_select_tail));
    /* In the nested form save_pretrained writes tie_word_embeddings at both levels; the text one wins. */
    const scope *tie_scope = get(text, "tie_word_embeddings") ? text : root;
    GLM53_TRY(read_bool(tie_scope, "tie_word_embeddings", 0, &t->tie_word_embeddings));
    if (is_null(text, "pad_token_id")) t->pad_token_id = -1;
    else GLM53_TRY(read_int(text, "pad_token_id", 154820, 0, &t->pad_token_id));

    char dict_prefix[64];
    scope linear_dict;
    GLM53_TRY(read_object(text, "linear_attn_config", dict_prefix, sizeof dict_prefix, &linear_dict));
    GLM53_TRY(read_linear(text, &linear_dict, t));
    GLM53_TRY(derive_layer_types(text, &linear_dict, t));
    GLM53_TRY(derive_mlp_types(text, t));
    GLM53_TRY(derive_indexer_types(text, t));
    return validate_text(text, t, num_key_value_heads);
}

/* patch_size and temporal_patch_size may be an int or (HF) a list; glm53 needs every entry equal. */
static glm53_status read_square_size(const scope *s, const char *key, int32_t dflt, int32_t *out) {
    const cJSON *v = get(s, key);
    if (!cJSON_IsArray(v)) return read_int(s, key, dflt, 1, out);
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        int32_t x;
        if (!json_int32(e, &x) || x < 1) return wrong_type(s, key, v, "a positive integer or a list of them");
        if (i > 0 && x != *out)
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: %s%s has unequal entries (%d and %d); glm53 needs "
                              "square patches", s->file, s->prefix, key, *out, x);
        *out = x;
    }
    if (i == 0) return wrong_type(s, key, v, "a positive integer or a list of them");
    return GLM53_OK;
}

#define VISION_INT(key, dflt) {#key, dflt, 1, 1 << 16, offsetof(glm53_vision_config, key)}
static const int_key vision_int_keys[] = {
    VISION_INT(depth, 24),
    VISION_INT(hidden_size, 1024),
    VISION_INT(num_heads, 16),
    VISION_INT(intermediate_size, 4096),
    VISION_INT(out_hidden_size, 1536),   /* HF default; the released model has 4096 in its config */
    VISION_INT(projection_intermediate_size, 10240),
    VISION_INT(in_channels, 3),
    VISION_INT(spatial_merge_size, 2),
};
#undef VISION_INT

static glm53_status parse_vision(const scope *s, glm53_vision_config *v) {
    static const char *const model_types[] = {"glm5_next_vision", "glm_ocr_vision", NULL},
                             *const acts[] = {"silu", NULL};
    GLM53_TRY(require_string_in(s, "model_type", model_types));
    GLM53_TRY(require_string_in(s, "hidden_act", acts));
    GLM53_TRY(read_int_keys(s, vision_int_keys, sizeof vision_int_keys / sizeof vision_int_keys[0], v));
    GLM53_TRY(read_square_size(s, "patch_size", 14, &v->patch_size));
    GLM53_TRY(read_square_size(s, "temporal_patch_size", 2, &v->temporal_patch_size));
    GLM53_TRY(read_bool(s, "attention_bias", 1, &v->attention_bias));
    GLM53_TRY(read_float_range(s, "rms_norm_eps", 1e-5f, 0.0f, true, 1.0f, &v->rms_norm_eps));
    GLM53_TRY(read_float_range(s, "swiglu_limit", 10.0f, 0.0f, false, 1e30f, &v->swiglu_limit));
    if (v->hidden_size % v->num_heads != 0)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %shidden_size %d is not divisible by num_heads %d", s->file,
                          s->prefix, v->hidden_size, v->num_heads);
    return GLM53_OK;
}

/* quantization_config sits at the top level (HF); lmdeploy-style files copy it into text_config. */
static glm53_status parse_quantization(const scope *root, const scope *text, int32_t *rows, int32_t *cols) {
    static const char *const methods[] = {"fp8", NULL}, *const formats[] = {"e4m3", NULL};
    char prefix[64];
    scope q;
    GLM53_TRY(read_object(root, "quantization_config", prefix, sizeof prefix, &q));
    if (!q.obj && text != root) GLM53_TRY(read_object(text, "quantization_config", prefix, sizeof prefix, &q));
    *rows = *cols = 0;
    if (!q.obj) return GLM53_OK;
    GLM53_TRY(require_string_in(&q, "quant_method", methods));
    GLM53_TRY(require_string_in(&q, "fmt", formats));
    const cJSON *block = get(&q, "weight_block_size");
    if (!block) {
        *rows = *cols = 128;
        return GLM53_OK;
    }
    if (!cJSON_IsArray(block) || cJSON_GetArraySize(block) != 2 || !json_int32(block->child, rows) ||
        !json_int32(block->child->next, cols) || *rows < 1 || *cols < 1) {
        *rows = *cols = 0;
        return wrong_type(&q, "weight_block_size", block, "two positive integers [rows, cols]");
    }
    return GLM53_OK;
}

/* Root scope and text scope (the same object in the flat form). */
static glm53_status open_scopes(const cJSON *json, const char *file, scope *root, scope *text) {
    static const char *const model_types[] = {"glm5_next", "glm5_next_text", NULL};
    *root = (scope){.obj = json, .file = file, .prefix = ""};
    if (!cJSON_IsObject(json)) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: the top level is not a JSON object", file);
    GLM53_TRY(require_string_in(root, "model_type", model_types));
    *text = *root;
    const cJSON *nested = get(root, "text_config");
    if (nested) {
        if (!cJSON_IsObject(nested)) return wrong_type(root, "text_config", nested, "an object");
        *text = (scope){.obj = nested, .file = file, .prefix = "text_config."};
    }
    return GLM53_OK;
}

static glm53_status parse_model(const cJSON *json, const char *file, glm53_model_config *c) {
    scope root, text;
    GLM53_TRY(open_scopes(json, file, &root, &text));
    GLM53_TRY(parse_text(&text, &root, &c->text));

    char vision_prefix[64];
    scope vision;
    GLM53_TRY(read_object(&root, "vision_config", vision_prefix, sizeof vision_prefix, &vision));
    if (vision.obj) {
        c->has_vision = 1;
        GLM53_TRY(parse_vision(&vision, &c->vision));
    }
    GLM53_TRY(read_int(&root, "image_token_id", 154854, 0, &c->image_token_id));
    GLM53_TRY(read_int(&root, "video_token_id", 154855, 0, &c->video_token_id));
    GLM53_TRY(read_int(&root, "image_start_token_id", 154830, 0, &c->image_start_token_id));
    GLM53_TRY(read_int(&root, "image_end_token_id", 154831, 0, &c->image_end_token_id));
    GLM53_TRY(read_int(&root, "video_start_token_id", 154832, 0, &c->video_start_token_id));
    GLM53_TRY(read_int(&root, "video_end_token_id", 154833, 0, &c->video_end_token_id));
    /* A pad id the file names must be a row of the embedding. (The image/video ids are not checked here: random
     * tiny checkpoints of transformers keep the real ids with a toy vocabulary and are fine for text; an image
     * prompt with ids outside the vocabulary fails in the step, which checks every token id.) */
    const glm53_text_config *t = &c->text;
    if (get(&text, "pad_token_id") && t->pad_token_id >= t->vocab_size)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: %spad_token_id is %d, outside the vocabulary [0, %d)", file,
                          text.prefix, t->pad_token_id, t->vocab_size);
    return parse_quantization(&root, &text, &c->fp8_block_rows, &c->fp8_block_cols);
}

glm53_status glm53_config_parse(const char *json, size_t len, const char *file, glm53_model_config *out) {
    if (!json || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "config_parse: NULL argument");
    memset(out, 0, sizeof *out);
    cJSON *root;
    GLM53_TRY(glm53_json_parse(json, len, file, "the file", &root));
    glm53_status st = parse_model(root, file, out);
    cJSON_Delete(root);
    if (st != GLM53_OK) memset(out, 0, sizeof *out);
    return st;
}

glm53_status glm53_config_fp8_block(const char *json, size_t len, const char *file, int32_t *rows,
                                    int32_t *cols) {
    *rows = *cols = 0;
    cJSON *root_json;
    GLM53_TRY(glm53_json_parse(json, len, file, "the file", &root_json));
    scope root, text;
    glm53_status st = open_scopes(root_json, file, &root, &text);
    if (st == GLM53_OK) st = parse_quantization(&root, &text, rows, cols);
    cJSON_Delete(root_json);
    return st;
}
