/*
 * test_loader.c - the checkpoint loader on valid input: safetensors parsing, sharding, FP8 block scales and
 * config.json (nested and flat forms, HF defaults, every derived per-layer list).
 *
 * Every checkpoint is written here, byte by byte, into a temp directory; expected values are written out by
 * hand (FP8 codes decoded on paper), not computed with the code under test.
 */
#include "loader_test_util.h"

#include "core/io/config.h"

static int64_t count_equal(const int32_t *v, int n, int32_t value) {
    int64_t k = 0;
    for (int i = 0; i < n; i++) k += v[i] == value;
    return k;
}

static bool same_ints(const int32_t *got, const int32_t *want, int n) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return false;
    return true;
}

static glm53_status parse(const char *json, glm53_model_config *c) {
    return glm53_config_parse(json, strlen(json), "config.json", c);
}

/* ------------------------------------------------------------------------------------------------------------ */

static void test_single_file(void) {
    char dir[64];
    make_temp_dir(dir);
    const uint16_t bf16[6] = {0x3f80, 0xc000, 0x3f00, 0x4040, 0x3e20, 0xbe80};   /* 1 -2 .5 3 .15625 -.25 */
    const float f32[3] = {1.0f, -2.0f, 3.5f};
    const int64_t i64[2] = {7, -9};
    const st_tensor ts[] = {
        {"b.bias", "F32", 1, {3}, f32, sizeof f32},
        {"a.weight", "BF16", 2, {2, 3}, bf16, sizeof bf16},
        {"c.ids", "I64", 1, {2}, i64, sizeof i64},
        {"d.empty", "F32", 2, {0, 4}, NULL, 0},
        {"e.scalar", "F32", 0, {0}, f32, 4},
    };
    write_safetensors(dir, "model.safetensors", ts, 5);

    glm53_checkpoint *ck = NULL;
    glm53_status st = glm53_checkpoint_open(dir, &ck);
    CHECK(st == GLM53_OK, "open: %s", glm53_last_error());
    if (st != GLM53_OK) return;
    CHECK(glm53_checkpoint_n_tensors(ck) == 5, "n_tensors %lld", (long long)glm53_checkpoint_n_tensors(ck));
    const char *names[] = {"a.weight", "b.bias", "c.ids", "d.empty", "e.scalar"};
    const int32_t dtypes[] = {GLM53_BF16, GLM53_F32, GLM53_I64, GLM53_F32, GLM53_F32};
    for (int i = 0; i < 5; i++) {
        const glm53_tensor *t = glm53_checkpoint_tensor(ck, i);
        CHECK(t && strcmp(t->name, names[i]) == 0, "tensor %d is %s, want %s", i, t ? t->name : "NULL", names[i]);
        CHECK(t && t->dtype == dtypes[i], "tensor %d dtype %d", i, t ? t->dtype : -1);
        CHECK(t && t->scale == NULL && t->device == GLM53_DEVICE_CPU, "tensor %d scale/device", i);
        CHECK(strcmp(glm53_checkpoint_tensor_file(ck, i), "model.safetensors") == 0, "tensor %d file", i);
    }
    CHECK(glm53_checkpoint_tensor(ck, 5) == NULL && glm53_checkpoint_tensor(ck, -1) == NULL, "out of range");
    CHECK(glm53_checkpoint_tensor_file(ck, 5) == NULL, "file out of range");

    const glm53_tensor *a;
    CHECK(glm53_checkpoint_find(ck, "a.weight", &a) == GLM53_OK, "find a.weight: %s", glm53_last_error());
    CHECK(a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->stride[0] == 3 && a->stride[1] == 1,
          "a.weight shape/stride");
    float got[6];
    const float want_a[6] = {1.0f, -2.0f, 0.5f, 3.0f, 0.15625f, -0.25f};
    CHECK(glm53_tensor_to_f32(a, got, 6) == GLM53_OK && memcmp(got, want_a, sizeof want_a) == 0, "a.weight values");

    const glm53_tensor *b, *c, *d, *e;
    CHECK(glm53_checkpoint_find(ck, "b.bias", &b) == GLM53_OK, "find b.bias");
    CHECK(glm53_tensor_to_f32(b, got, 3) == GLM53_OK && memcmp(got, f32, sizeof f32) == 0, "b.bias values");
    CHECK(glm53_checkpoint_find(ck, "c.ids", &c) == GLM53_OK, "find c.ids");
    CHECK(glm53_tensor_to_f32(c, got, 2) == GLM53_OK && got[0] == 7.0f && got[1] == -9.0f, "c.ids values");
    CHECK(((const int64_t *)c->data)[1] == -9, "c.ids raw");
    CHECK(glm53_checkpoint_find(ck, "d.empty", &d) == GLM53_OK && glm53_tensor_numel(d) == 0, "empty tensor");
    CHECK(glm53_checkpoint_find(ck, "e.scalar", &e) == GLM53_OK && e->ndim == 0 && glm53_tensor_numel(e) == 1 &&
              *(const float *)e->data == 1.0f, "scalar tensor");
    CHECK(glm53_checkpoint_config_json(ck) == NULL, "no config.json");
    glm53_model_config cfg;
    EXPECT_FAIL(glm53_checkpoint_config(ck, &cfg), GLM53_ERR_NOT_FOUND, "config.json");
    glm53_checkpoint_free(ck);

    /* The same file opened directly. */
    char file[128];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    st = glm53_checkpoint_open(file, &ck);
    CHECK(st == GLM53_OK && glm53_checkpoint_n_tensors(ck) == 5, "open file: %s", glm53_last_error());
    glm53_checkpoint_free(ck);
    glm53_checkpoint_free(NULL);
    remove_dir(dir);
}

/* A writer that does not sort by dtype size leaves an F32 tensor at an odd offset; the loader copies it so
 * element loads stay aligned (UBSan would flag a misaligned float read). */
static void test_misaligned_tensor(void) {
    char dir[64];
    make_temp_dir(dir);
    const uint16_t bf16[3] = {0x3f80, 0x4000, 0x4040};
    const float f32[2] = {-1.5f, 6.25f};
    const st_tensor ts[] = {{"x.first", "BF16", 1, {3}, bf16, sizeof bf16}, {"y.second", "F32", 1, {2}, f32, 8}};
    write_safetensors(dir, "model.safetensors", ts, 2);
    glm53_checkpoint *ck = NULL;
    CHECK(glm53_checkpoint_open(dir, &ck) == GLM53_OK, "open: %s", glm53_last_error());
    const glm53_tensor *y;
    float got[2];
    if (ck && glm53_checkpoint_find(ck, "y.second", &y) == GLM53_OK) {
        CHECK((uintptr_t)y->data % 4 == 0, "F32 data aligned");
        CHECK(glm53_tensor_to_f32(y, got, 2) == GLM53_OK && got[0] == -1.5f && got[1] == 6.25f, "values");
    }
    glm53_checkpoint_free(ck);
    remove_dir(dir);
}

/* FP8 E4M3 codes with their values worked out by hand: (-1)^s * 2^(e-7) * (1 + m/8), subnormal 2^-6 * m/8. */
static const uint8_t fp8_codes[15] = {0x38, 0x40, 0x30, 0xb8, 0x39, 0x01, 0x7e, 0x00,
                                      0x44, 0x3c, 0xc0, 0x08, 0x4a, 0x28, 0x52};
static const float fp8_values[15] = {1.0f, 2.0f, 0.5f, -1.0f, 1.125f, 0.001953125f, 448.0f, 0.0f,
                                     3.0f, 1.5f, -2.0f, 0.015625f, 5.0f, 0.25f, 10.0f};

static void test_fp8_block_scale(void) {
    char dir[64];
    make_temp_dir(dir);
    /* weight [3, 5] in 2 x 4 blocks -> scale [ceil(3/2), ceil(5/4)] = [2, 2] */
    const float scale[4] = {0.5f, 2.0f, -1.0f, 4.0f};
    const uint16_t norm[2] = {0x3f80, 0x3f80};
    const st_tensor ts[] = {
        {"model.layers.0.mlp.down_proj.weight_scale_inv", "F32", 2, {2, 2}, scale, sizeof scale},
        {"model.layers.0.mlp.down_proj.weight", "F8_E4M3", 2, {3, 5}, fp8_codes, 15},
        {"model.layers.0.input_layernorm.weight", "BF16", 1, {2}, norm, sizeof norm},
    };
    write_safetensors(dir, "model.safetensors", ts, 3);
    write_text(dir, "config.json",
               "{\"model_type\": \"glm5_next\", \"text_config\": {\"num_hidden_layers\": 2},"
               " \"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\","
               " \"activation_scheme\": \"dynamic\", \"weight_block_size\": [2, 4]}}");
    glm53_checkpoint *ck = NULL;
    glm53_status st = glm53_checkpoint_open(dir, &ck);
    CHECK(st == GLM53_OK, "open: %s", glm53_last_error());
    if (st != GLM53_OK) return;
    CHECK(glm53_checkpoint_n_tensors(ck) == 3, "scale stays in the tensor list");
    const glm53_tensor *w, *s;
    CHECK(glm53_checkpoint_find(ck, "model.layers.0.mlp.down_proj.weight", &w) == GLM53_OK, "find weight");
    CHECK(glm53_checkpoint_find(ck, "model.layers.0.mlp.down_proj.weight_scale_inv", &s) == GLM53_OK, "find scale");
    CHECK(w->dtype == GLM53_F8_E4M3 && w->scale == s && w->block_rows == 2 && w->block_cols == 4,
          "weight linked to its scale (block %dx%d)", w->block_rows, w->block_cols);
    CHECK(s->scale == NULL && s->block_rows == 0, "the scale itself has no scale");
    float got[15], want[15];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) want[i * 5 + j] = fp8_values[i * 5 + j] * scale[(i / 2) * 2 + j / 4];
    CHECK(glm53_tensor_to_f32(w, got, 15) == GLM53_OK, "to_f32: %s", glm53_last_error());
    for (int k = 0; k < 15; k++) CHECK(got[k] == want[k], "element %d: got %g want %g", k, got[k], want[k]);
    glm53_model_config cfg;
    CHECK(glm53_checkpoint_config(ck, &cfg) == GLM53_OK, "config: %s", glm53_last_error());
    CHECK(cfg.fp8_block_rows == 2 && cfg.fp8_block_cols == 4, "config block size");
    CHECK(strstr(glm53_checkpoint_config_json(ck), "weight_block_size") != NULL, "raw config text");
    glm53_checkpoint_free(ck);
    remove_dir(dir);

    /* Without a config the block defaults to 128 x 128: a [200, 130] weight takes a [2, 2] scale. */
    make_temp_dir(dir);
    uint8_t *codes = calloc(200 * 130, 1);
    const float scale128[4] = {1, 2, 3, 4};
    codes[129 * 130 + 128] = 0x38;   /* row 129, col 128: block (1, 1) -> 1.0 * 4 */
    const st_tensor big[] = {{"w.weight", "F8_E4M3", 2, {200, 130}, codes, 200 * 130},
                             {"w.weight_scale_inv", "F32", 2, {2, 2}, scale128, sizeof scale128}};
    write_safetensors(dir, "model.safetensors", big, 2);
    free(codes);
    st = glm53_checkpoint_open(dir, &ck);
    CHECK(st == GLM53_OK, "open 128: %s", glm53_last_error());
    if (st == GLM53_OK) {
        const glm53_tensor *t = glm53_checkpoint_tensor(ck, 0);
        float *vals = malloc(sizeof(float) * 200 * 130);
        CHECK(t->block_rows == 128 && t->block_cols == 128, "default block");
        CHECK(glm53_tensor_to_f32(t, vals, 200 * 130) == GLM53_OK && vals[129 * 130 + 128] == 4.0f &&
                  vals[0] == 0.0f, "default-block dequantisation");
        free(vals);
    }
    glm53_checkpoint_free(ck);
    remove_dir(dir);
}

static void test_sharded(void) {
    char dir[64];
    make_temp_dir(dir);
    const uint16_t emb[8] = {0x3f80, 0x4000, 0x4040, 0x4080, 0xbf80, 0xc000, 0xc040, 0xc080};  /* 1 2 3 4 -1.. */
    const float x[2] = {0.25f, -8.0f}, head[4] = {1, 2, 3, 4};
    const uint16_t f16[3] = {0x3c00, 0xc000, 0x3800};                                       /* 1 -2 .5 */
    const st_tensor shard1[] = {{"model.embed.weight", "BF16", 2, {4, 2}, emb, sizeof emb},
                                {"model.layers.1.x", "F32", 1, {2}, x, sizeof x}};
    const st_tensor shard2[] = {{"lm_head.weight", "F32", 2, {2, 2}, head, sizeof head},
                                {"model.layers.0.y", "F16", 1, {3}, f16, sizeof f16}};
    write_safetensors(dir, "model-00001-of-00002.safetensors", shard1, 2);
    write_safetensors(dir, "model-00002-of-00002.safetensors", shard2, 2);
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\": {\"total_size\": 54}, \"weight_map\": {"
               "\"model.layers.1.x\": \"model-00001-of-00002.safetensors\","
               "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
               "\"model.embed.weight\": \"model-00001-of-00002.safetensors\","
               "\"model.layers.0.y\": \"model-00002-of-00002.safetensors\"}}");
    write_text(dir, "config.json", "{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 2}");
    glm53_checkpoint *ck = NULL;
    glm53_status st = glm53_checkpoint_open(dir, &ck);
    CHECK(st == GLM53_OK, "open sharded: %s", glm53_last_error());
    if (st != GLM53_OK) return;
    const char *names[] = {"lm_head.weight", "model.embed.weight", "model.layers.0.y", "model.layers.1.x"};
    const char *files[] = {"model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"};
    CHECK(glm53_checkpoint_n_tensors(ck) == 4, "n_tensors");
    for (int i = 0; i < 4; i++) {
        CHECK(strcmp(glm53_checkpoint_tensor(ck, i)->name, names[i]) == 0, "name %d", i);
        CHECK(strcmp(glm53_checkpoint_tensor_file(ck, i), files[i]) == 0, "file %d: %s", i,
              glm53_checkpoint_tensor_file(ck, i));
    }
    const glm53_tensor *t;
    float got[8];
    CHECK(glm53_checkpoint_find(ck, "model.embed.weight", &t) == GLM53_OK && t->shape[0] == 4, "embed");
    CHECK(glm53_tensor_to_f32(t, got, 8) == GLM53_OK && got[3] == 4.0f && got[7] == -4.0f, "embed values");
    CHECK(glm53_checkpoint_find(ck, "model.layers.0.y", &t) == GLM53_OK && t->dtype == GLM53_F16, "f16");
    CHECK(glm53_tensor_to_f32(t, got, 3) == GLM53_OK && got[0] == 1.0f && got[1] == -2.0f && got[2] == 0.5f,
          "f16 values");
    CHECK(glm53_checkpoint_find(ck, "model.layers.1.x", &t) == GLM53_OK && ((const float *)t->data)[1] == -8.0f,
          "x values");
    glm53_model_config cfg;
    CHECK(glm53_checkpoint_config(ck, &cfg) == GLM53_OK && cfg.text.num_hidden_layers == 2 && !cfg.has_vision,
          "flat config: %s", glm53_last_error());
    glm53_checkpoint_free(ck);
    remove_dir(dir);
}

/* ------------------------------------------------------------------------------------------------------------ */

static void test_config_defaults(void) {
    glm53_model_config c;
    CHECK(parse("{}", &c) == GLM53_OK, "empty config: %s", glm53_last_error());
    const glm53_text_config *t = &c.text;
    CHECK(t->vocab_size == 154880 && t->hidden_size == 4096 && t->num_hidden_layers == 45, "sizes");
    CHECK(t->intermediate_size == 12288 && t->moe_intermediate_size == 2048, "ffn widths");
    CHECK(t->n_routed_experts == 288 && t->num_experts_per_tok == 8 && t->n_shared_experts == 1 &&
              t->n_group == 1 && t->topk_group == 1 && t->norm_topk_prob == 1 && t->routed_scaling_factor == 2.5f,
          "moe");
    CHECK(t->num_attention_heads == 64 && t->q_lora_rank == 1536 && t->kv_lora_rank == 512 &&
              t->qk_nope_head_dim == 256 && t->qk_rope_head_dim == 0 && t->v_head_dim == 256, "mla");
    CHECK(t->index_n_heads == 32 && t->index_head_dim == 128 && t->index_topk == 2048 && t->index_kpool == 16 &&
              t->index_kpool_always_select_tail == 1, "indexer (HF kpool default 16)");
    CHECK(t->linear_num_heads == 64 && t->linear_head_dim == 128 && t->linear_conv_kernel_dim == 4 &&
              t->linear_has_lower_bound == 1 && t->linear_lower_bound == -5.0f, "kda");
    CHECK(t->hc_mult == 4 && t->hc_sinkhorn_iters == 20 && t->hc_eps == 1e-6f, "mhc");
    CHECK(t->rms_norm_eps == 1e-5f && t->swiglu_limit == 10.0f && t->num_nextn_predict_layers == 0 &&
              t->pad_token_id == 154820 && t->tie_word_embeddings == 0, "misc");
    CHECK(count_equal(t->layer_types, 45, GLM53_LAYER_SPARSE_MLA) == 11 && t->layer_types[3] == GLM53_LAYER_SPARSE_MLA &&
              t->layer_types[43] == GLM53_LAYER_SPARSE_MLA && t->layer_types[44] == GLM53_LAYER_KDA, "layer_types i%%4==3");
    CHECK(count_equal(t->mlp_types, 45, GLM53_MLP_DENSE) == 3 && t->mlp_types[2] == GLM53_MLP_DENSE &&
              t->mlp_types[3] == GLM53_MLP_MOE, "mlp: 3 dense");
    CHECK(count_equal(t->indexer_types, 45, GLM53_INDEXER_FULL) == 45, "indexer: freq 1 -> all full");
    CHECK(c.has_vision == 0 && c.image_token_id == 154854 && c.video_token_id == 154855 &&
              c.image_start_token_id == 154830 && c.image_end_token_id == 154831 &&
              c.video_start_token_id == 154832 && c.video_end_token_id == 154833, "token ids");
    CHECK(c.fp8_block_rows == 0 && c.fp8_block_cols == 0, "unquantised");

    /* A vision_config with nothing in it takes HF's vision defaults. */
    CHECK(parse("{\"model_type\": \"glm5_next\", \"text_config\": {}, \"vision_config\": {}}", &c) == GLM53_OK,
          "empty nested: %s", glm53_last_error());
    const glm53_vision_config *v = &c.vision;
    CHECK(c.has_vision == 1 && v->depth == 24 && v->hidden_size == 1024 && v->num_heads == 16 &&
              v->intermediate_size == 4096 && v->out_hidden_size == 1536 && v->projection_intermediate_size == 10240 &&
              v->in_channels == 3 && v->patch_size == 14 && v->temporal_patch_size == 2 &&
              v->spatial_merge_size == 2 && v->attention_bias == 1 && v->rms_norm_eps == 1e-5f &&
              v->swiglu_limit == 10.0f, "vision defaults");
}

/* The real GLM-5.3-Flash config (nested, abridged to what we read), with its explicit lists. */
static void test_config_nested_real(void) {
    char json[8192];
    size_t n = (size_t)snprintf(json, sizeof json,
        "{\"architectures\": [\"Glm5NextForConditionalGeneration\"], \"model_type\": \"glm5_next\","
        " \"image_token_id\": 1001, \"video_token_id\": 1002, \"image_start_token_id\": 1003,"
        " \"image_end_token_id\": 1004, \"video_start_token_id\": 1005, \"video_end_token_id\": 1006,"
        " \"tie_word_embeddings\": false,"
        " \"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": [128, 128]},"
        " \"vision_config\": {\"model_type\": \"glm5_next_vision\", \"depth\": 24, \"hidden_size\": 1024,"
        " \"num_heads\": 16, \"intermediate_size\": 4096, \"out_hidden_size\": 4096, \"image_size\": 448,"
        " \"patch_size\": [14, 14], \"projection_intermediate_size\": 10240, \"hidden_act\": \"silu\"},"
        " \"text_config\": {\"model_type\": \"glm5_next_text\", \"vocab_size\": 154880, \"hidden_size\": 4096,"
        " \"num_hidden_layers\": 45, \"index_kpool\": 4, \"scoring_func\": \"sigmoid\", \"topk_method\": \"noaux_tc\","
        " \"num_nextn_predict_layers\": 1, \"rope_scaling\": null, \"head_dim\": 0, \"bos_token_id\": null,"
        " \"linear_attn_config\": {\"num_heads\": 64, \"head_dim\": 128, \"short_conv_kernel_size\": 4,"
        " \"gate_lower_bound\": -5.0, \"full_attn_layers\": [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43]},"
        " \"layer_types\": [");
    for (int i = 0; i < 45; i++)
        n += (size_t)snprintf(json + n, sizeof json - n, "%s\"%s\"", i ? ", " : "",
                              i % 4 == 3 ? (i == 7 ? "full_attention" : "deepseek_sparse_attention")
                                         : "linear_attention");
    n += (size_t)snprintf(json + n, sizeof json - n, "], \"mlp_layer_types\": [");
    for (int i = 0; i < 45; i++)
        n += (size_t)snprintf(json + n, sizeof json - n, "%s\"%s\"", i ? ", " : "", i < 3 ? "dense" : "sparse");
    n += (size_t)snprintf(json + n, sizeof json - n, "], \"indexer_types\": [");
    for (int i = 0; i < 45; i++) n += (size_t)snprintf(json + n, sizeof json - n, "%s\"full\"", i ? ", " : "");
    snprintf(json + n, sizeof json - n, "]}}");

    glm53_model_config c;
    CHECK(parse(json, &c) == GLM53_OK, "real config: %s", glm53_last_error());
    const glm53_text_config *t = &c.text;
    int32_t want_layers[45];
    for (int i = 0; i < 45; i++) want_layers[i] = i % 4 == 3 ? GLM53_LAYER_SPARSE_MLA : GLM53_LAYER_KDA;
    CHECK(same_ints(t->layer_types, want_layers, 45), "layer types (full_attention alias)");
    CHECK(count_equal(t->mlp_types, 45, GLM53_MLP_DENSE) == 3 && t->mlp_types[3] == GLM53_MLP_MOE, "mlp types");
    CHECK(count_equal(t->indexer_types, 45, GLM53_INDEXER_FULL) == 45, "indexer types");
    CHECK(t->index_kpool == 4 && t->num_nextn_predict_layers == 1, "kpool 4, one MTP layer");
    CHECK(t->linear_has_lower_bound == 1 && t->linear_lower_bound == -5.0f, "lower bound");
    CHECK(c.fp8_block_rows == 128 && c.fp8_block_cols == 128, "fp8 block");
    CHECK(c.has_vision && c.vision.out_hidden_size == 4096 && c.vision.patch_size == 14, "vision");
    CHECK(c.image_token_id == 1001 && c.video_token_id == 1002 && c.image_start_token_id == 1003 &&
              c.image_end_token_id == 1004 && c.video_start_token_id == 1005 && c.video_end_token_id == 1006,
          "token ids");
}

static void test_config_derived(void) {
    glm53_model_config c;
    const glm53_text_config *t = &c.text;

    /* Flat form: text keys at the top level. */
    CHECK(parse("{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 6, \"hidden_size\": 64,"
                " \"num_local_experts\": 16, \"num_experts_per_tok\": 2, \"pad_token_id\": null,"
                " \"tie_word_embeddings\": true, \"first_k_dense_replace\": 1, \"index_topk\": 32,"
                " \"index_kpool\": 4, \"routed_scaling_factor\": 1.5}", &c) == GLM53_OK,
          "flat: %s", glm53_last_error());
    CHECK(t->num_hidden_layers == 6 && t->hidden_size == 64 && t->n_routed_experts == 16 &&
              t->num_experts_per_tok == 2 && t->pad_token_id == -1 && t->tie_word_embeddings == 1 &&
              t->routed_scaling_factor == 1.5f, "flat values (num_local_experts alias, null pad)");
    const int32_t mlp1[6] = {0, 1, 1, 1, 1, 1};
    CHECK(same_ints(t->mlp_types, mlp1, 6), "first_k_dense_replace 1");

    /* first_k_dense_replace larger than the model: everything dense (HF's min(3, L)). */
    CHECK(parse("{\"num_hidden_layers\": 2}", &c) == GLM53_OK && t->mlp_types[0] == GLM53_MLP_DENSE &&
              t->mlp_types[1] == GLM53_MLP_DENSE, "short model all dense");

    /* Legacy dict lists: DSA layers 1 and 4 of 6, given as both lists and as full_attn_layers alone. */
    const int32_t dsa_1_4[6] = {0, 1, 0, 0, 1, 0};
    CHECK(parse("{\"num_hidden_layers\": 6, \"linear_attn_config\": {\"kda_layers\": [0, 2, 3, 5],"
                " \"full_attn_layers\": [1, 4]}}", &c) == GLM53_OK &&
              same_ints(t->layer_types, dsa_1_4, 6), "kda/full lists: %s", glm53_last_error());
    CHECK(parse("{\"num_hidden_layers\": 6, \"linear_attn_config\": {\"full_attn_layers\": [4, 1]}}", &c) ==
                  GLM53_OK && same_ints(t->layer_types, dsa_1_4, 6), "full list alone");
    CHECK(parse("{\"num_hidden_layers\": 6, \"linear_attn_config\": {\"kda_layers\": [0, 2, 3, 5]}}", &c) ==
                  GLM53_OK && same_ints(t->layer_types, dsa_1_4, 6), "kda list alone");
    /* An explicit layer_types wins over the dict lists. */
    CHECK(parse("{\"num_hidden_layers\": 2, \"layer_types\": [\"linear_attention\", \"linear_attention\"],"
                " \"linear_attn_config\": {\"full_attn_layers\": [1]}}", &c) == GLM53_OK &&
              t->layer_types[1] == GLM53_LAYER_KDA, "layer_types precedence");

    /* indexer_types from a pattern, then from freq/offset: full iff max(i - 2 + 1, 0) % 2 == 0. */
    const int32_t fsff[8] = {0, 1, 0, 0, 1, 0, 1, 0};
    CHECK(parse("{\"num_hidden_layers\": 8, \"index_topk_pattern\": \"FSFFSFSF\"}", &c) == GLM53_OK &&
              same_ints(t->indexer_types, fsff, 8), "pattern: %s", glm53_last_error());
    CHECK(parse("{\"num_hidden_layers\": 8, \"index_topk_pattern\": [\"full\", \"shared\", \"full\", \"full\","
                " \"shared\", \"full\", \"shared\", \"full\"]}", &c) == GLM53_OK &&
              same_ints(t->indexer_types, fsff, 8), "pattern list");
    const int32_t freq2[8] = {0, 0, 1, 0, 1, 0, 1, 0};
    CHECK(parse("{\"num_hidden_layers\": 8, \"index_topk_freq\": 2}", &c) == GLM53_OK &&
              same_ints(t->indexer_types, freq2, 8), "freq 2 offset 2: %s", glm53_last_error());
    /* freq 4, offset 3 (the GLM-5.2 schedule): full at 0, 1, 2, 6, 10; layer types chosen so DSA layers hit them. */
    const int32_t freq4[11] = {0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0};
    CHECK(parse("{\"num_hidden_layers\": 11, \"index_topk_freq\": 4, \"index_skip_topk_offset\": 3,"
                " \"linear_attn_config\": {\"full_attn_layers\": [2, 5, 6, 10]}}", &c) == GLM53_OK &&
              same_ints(t->indexer_types, freq4, 11), "freq 4 offset 3: %s", glm53_last_error());
    CHECK(parse("{\"num_hidden_layers\": 4, \"index_topk_freq\": 0}", &c) == GLM53_OK &&
              count_equal(t->indexer_types, 4, GLM53_INDEXER_FULL) == 4, "freq 0 -> 1");

    /* KDA scalars: the legacy dict wins over the scalar keys (HF __post_init__), lower_bound is the old key. */
    CHECK(parse("{\"linear_num_heads\": 99, \"linear_attn_config\": {\"num_heads\": 8, \"head_dim\": 16,"
                " \"short_conv_kernel_size\": 3, \"lower_bound\": -2.0}}", &c) == GLM53_OK &&
              t->linear_num_heads == 8 && t->linear_head_dim == 16 && t->linear_conv_kernel_dim == 3 &&
              t->linear_has_lower_bound == 1 && t->linear_lower_bound == -2.0f, "legacy dict");
    CHECK(parse("{\"linear_num_heads\": 12, \"linear_head_dim\": 32, \"linear_conv_kernel_dim\": 2,"
                " \"linear_lower_bound\": -3.5}", &c) == GLM53_OK && t->linear_num_heads == 12 &&
              t->linear_head_dim == 32 && t->linear_conv_kernel_dim == 2 && t->linear_lower_bound == -3.5f,
          "scalar keys");
    CHECK(parse("{\"linear_lower_bound\": null}", &c) == GLM53_OK && t->linear_has_lower_bound == 0,
          "null bound -> softplus form");
    CHECK(parse("{\"linear_attn_config\": {\"gate_lower_bound\": null, \"safe_gate\": false}}", &c) == GLM53_OK &&
              t->linear_has_lower_bound == 0, "null bound, safe_gate false");
    CHECK(parse("{\"linear_attn_config\": {\"gate_lower_bound\": null}}", &c) == GLM53_OK &&
              t->linear_has_lower_bound == 1 && t->linear_lower_bound == -5.0f, "safe_gate defaults to true");
    CHECK(parse("{\"linear_lower_bound\": null, \"linear_attn_config\": {\"safe_gate\": true}}", &c) == GLM53_OK &&
              t->linear_has_lower_bound == 1 && t->linear_lower_bound == -5.0f, "safe_gate restores -5");
    CHECK(parse("{\"linear_lower_bound\": -1.0, \"linear_attn_config\": {\"num_heads\": 4}}", &c) == GLM53_OK &&
              t->linear_lower_bound == -1.0f, "dict without a bound keeps the scalar");

    /* quantization_config copied into text_config (lmdeploy style); top-level tie_word_embeddings. */
    CHECK(parse("{\"model_type\": \"glm5_next\", \"tie_word_embeddings\": true, \"text_config\":"
                " {\"quantization_config\": {\"quant_method\": \"fp8\"}}}", &c) == GLM53_OK &&
              c.fp8_block_rows == 128 && c.fp8_block_cols == 128 && t->tie_word_embeddings == 1,
          "nested quantization default block: %s", glm53_last_error());
    int32_t rows, cols;
    const char *q = "{\"quantization_config\": {\"weight_block_size\": [64, 32]}}";
    CHECK(glm53_config_fp8_block(q, strlen(q), "config.json", &rows, &cols) == GLM53_OK && rows == 64 &&
              cols == 32, "fp8 block only");
}

int main(void) {
    TEST_CASE("single file") test_single_file();
    TEST_CASE("misaligned tensor") test_misaligned_tensor();
    TEST_CASE("fp8 block scale") test_fp8_block_scale();
    TEST_CASE("sharded") test_sharded();
    TEST_CASE("config defaults") test_config_defaults();
    TEST_CASE("config nested real") test_config_nested_real();
    TEST_CASE("config derived") test_config_derived();
    return test_finish("test_loader");
}
