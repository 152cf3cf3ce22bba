/*
 * test_loader_corrupt.c - the checkpoint loader on bad input: every corruption must come back as the right
 * status with a message naming the file and the tensor or key, never as a crash, a leak or garbage.
 *
 * Labelled "asan" too: scripts/run_tests.sh runs it again under AddressSanitizer + UBSan with leak checking.
 */
#include "loader_test_util.h"

#include "core/io/config.h"

/* Opens `path`, checking that a failed open leaves *out NULL; frees whatever opened. */
static glm53_status try_open(const char *path) {
    glm53_checkpoint *ck = NULL;
    glm53_status st = glm53_checkpoint_open(path, &ck);
    if (st != GLM53_OK) CHECK(ck == NULL, "failed open must leave *out NULL");
    glm53_checkpoint_free(ck);
    return st;
}

/* A checkpoint directory holding only model.safetensors = bytes[0, len); returns the open status. */
static glm53_status open_bytes(const uint8_t *bytes, size_t len) {
    char dir[64];
    make_temp_dir(dir);
    write_bytes(dir, "model.safetensors", bytes, len);
    glm53_status st = try_open(dir);
    remove_dir(dir);
    return st;
}

static glm53_status open_header(const char *header, const void *data, size_t data_len) {
    size_t len;
    uint8_t *bytes = st_build_raw(header, data, data_len, &len);
    glm53_status st = open_bytes(bytes, len);
    free(bytes);
    return st;
}

static glm53_status parse_config(const char *json) {
    glm53_model_config c;
    return glm53_config_parse(json, strlen(json), "config.json", &c);
}

static const float zeros[16];

/* ------------------------------------------------------------------------------------------------------------ */

static void test_truncated(void) {
    const st_tensor ts[] = {{"a.weight", "F32", 1, {4}, zeros, 16}, {"b.weight", "F32", 1, {2}, zeros, 8}};
    size_t len;
    uint8_t *bytes = st_build(ts, 2, &len);
    size_t header_end = len - 24;
    const size_t in_length[] = {0, 3, 7};
    for (int i = 0; i < 3; i++)
        EXPECT_FAIL(open_bytes(bytes, in_length[i]), GLM53_ERR_FORMAT, "model.safetensors", "too short");
    const size_t in_header[] = {8, 20, header_end - 1};
    for (int i = 0; i < 3; i++)
        EXPECT_FAIL(open_bytes(bytes, in_header[i]), GLM53_ERR_FORMAT, "model.safetensors: header length",
                    "past the end of the file");
    EXPECT_FAIL(open_bytes(bytes, header_end + 4), GLM53_ERR_FORMAT, "model.safetensors: tensor 'a.weight'",
                "past the end of the data region");
    EXPECT_FAIL(open_bytes(bytes, len - 1), GLM53_ERR_FORMAT, "model.safetensors: tensor 'b.weight'",
                "past the end of the data region");
    CHECK(open_bytes(bytes, len) == GLM53_OK, "the untruncated file opens: %s", glm53_last_error());

    /* Header length fields that lie. */
    uint8_t saved[8];
    memcpy(saved, bytes, 8);
    memset(bytes, 0, 8);
    bytes[5] = 1;   /* 2^40 */
    EXPECT_FAIL(open_bytes(bytes, len), GLM53_ERR_FORMAT, "model.safetensors", "absurd");
    memcpy(bytes, saved, 8);
    bytes[1] = (uint8_t)(bytes[1] + 1);   /* + 256: past the end of this small file */
    EXPECT_FAIL(open_bytes(bytes, len), GLM53_ERR_FORMAT, "model.safetensors", "past the end of the file");
    free(bytes);

    EXPECT_FAIL(open_bytes((const uint8_t *)"", 0), GLM53_ERR_FORMAT, "model.safetensors", "0 bytes");
}

static void test_bad_json(void) {
    EXPECT_FAIL(open_header("{\"a\": {\"dtype\": ", NULL, 0), GLM53_ERR_FORMAT, "model.safetensors",
                "not valid JSON");
    EXPECT_FAIL(open_header("{} trailing", NULL, 0), GLM53_ERR_FORMAT, "model.safetensors", "not valid JSON");
    EXPECT_FAIL(open_header("[1, 2]", NULL, 0), GLM53_ERR_FORMAT, "model.safetensors", "not a JSON object");
    EXPECT_FAIL(open_header("", NULL, 0), GLM53_ERR_FORMAT, "model.safetensors", "not valid JSON");
    const uint8_t with_nul[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ', ' ', ' ', ' ', ' '};
    EXPECT_FAIL(open_bytes(with_nul, 16), GLM53_ERR_FORMAT, "model.safetensors", "NUL byte");
    CHECK(open_header("{}", NULL, 0) == GLM53_OK, "an empty header is a valid empty file");
    EXPECT_FAIL(open_header("{\"__metadata__\": [1]}", NULL, 0), GLM53_ERR_FORMAT, "__metadata__");
    EXPECT_FAIL(open_header("{\"__metadata__\": {\"format\": 1}}", NULL, 0), GLM53_ERR_FORMAT, "__metadata__",
                "format");
}

static void test_bad_entries(void) {
    struct {
        const char *header;
        glm53_status want;
        const char *needle;
    } cases[] = {
        {"{\"w\": 5}", GLM53_ERR_FORMAT, "not a JSON object"},
        {"{\"w\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT, "\"dtype\""},
        {"{\"w\": {\"dtype\": 7, \"shape\": [2], \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT, "\"dtype\""},
        {"{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT, "\"shape\""},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": {}, \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT, "\"shape\""},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", GLM53_ERR_FORMAT, "data_offsets"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4, 8]}}", GLM53_ERR_FORMAT,
         "data_offsets"},
        {"{\"w\": {\"dtype\": \"F4\", \"shape\": [2], \"data_offsets\": [0, 8]}}", GLM53_ERR_UNSUPPORTED,
         "dtype \"F4\" is not supported"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT, "shape[0]"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 1.5], \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT,
         "shape[1]"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT,
         "shape[0]"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 1, 2], \"data_offsets\": [0, 8]}}",
         GLM53_ERR_UNSUPPORTED, "6 dims"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [9007199254740992, 9007199254740992], \"data_offsets\": [0, 8]}}",
         GLM53_ERR_FORMAT, "2^63"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", GLM53_ERR_FORMAT,
         "end before they begin"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [-8, 0]}}", GLM53_ERR_FORMAT,
         "not non-negative integers"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [250], \"data_offsets\": [0, 1000]}}", GLM53_ERR_FORMAT,
         "past the end of the data region"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", GLM53_ERR_FORMAT,
         "shape [3] of F32 needs 3 x 4 bytes but data_offsets [0, 8] hold 8"},
        {"{\"w\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 16]}}", GLM53_ERR_FORMAT,
         "shape [2, 3] of BF16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        EXPECT_FAIL(open_header(cases[i].header, zeros, 16), cases[i].want, "model.safetensors: tensor 'w'",
                    cases[i].needle);

    EXPECT_FAIL(open_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                            " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                            zeros, 16),
                GLM53_ERR_FORMAT, "model.safetensors: tensor 'b'", "overlap tensor 'a' [0, 8]");
    EXPECT_FAIL(open_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                            " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
                            zeros, 16),
                GLM53_ERR_FORMAT, "model.safetensors: tensor 'a' appears twice");
    /* Gaps and empty tensors inside another's range own no bytes and are fine. */
    CHECK(open_header("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                      " \"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
                      " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [12, 16]}}",
                      zeros, 16) == GLM53_OK,
          "gap and empty tensor: %s", glm53_last_error());
}

/* ------------------------------------------------------------------------------------------------------------ */

static const char SHARD1[] = "model-00001-of-00002.safetensors", SHARD2[] = "model-00002-of-00002.safetensors";

/* Two shards holding x.weight and y.weight, and the given index text. */
static glm53_status open_sharded(const char *index_json, bool write_second) {
    char dir[64];
    make_temp_dir(dir);
    const st_tensor x = {"x.weight", "F32", 1, {2}, zeros, 8}, y = {"y.weight", "F32", 1, {2}, zeros, 8};
    write_safetensors(dir, SHARD1, &x, 1);
    if (write_second) write_safetensors(dir, SHARD2, &y, 1);
    write_text(dir, "model.safetensors.index.json", index_json);
    glm53_status st = try_open(dir);
    remove_dir(dir);
    return st;
}

static void test_sharded(void) {
    const char *good = "{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\","
                       " \"y.weight\": \"model-00002-of-00002.safetensors\"}}";
    CHECK(open_sharded(good, true) == GLM53_OK, "the good index opens: %s", glm53_last_error());
    EXPECT_FAIL(open_sharded(good, false), GLM53_ERR_NOT_FOUND, SHARD2, "cannot open",
                "model.safetensors.index.json");
    EXPECT_FAIL(open_sharded("{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\","
                             " \"ghost.weight\": \"model-00001-of-00002.safetensors\","
                             " \"y.weight\": \"model-00002-of-00002.safetensors\"}}", true),
                GLM53_ERR_NOT_FOUND, "model.safetensors.index.json: tensor 'ghost.weight'", SHARD1,
                "does not contain it");
    EXPECT_FAIL(open_sharded("{\"weight_map\": {\"x.weight\": \"model-00002-of-00002.safetensors\","
                             " \"y.weight\": \"model-00001-of-00002.safetensors\"}}", true),
                GLM53_ERR_FORMAT, "tensor 'x.weight' is mapped to model-00002-of-00002.safetensors but stored in "
                "model-00001-of-00002.safetensors");
    EXPECT_FAIL(open_sharded("{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\","
                             " \"y.weight\": \"model-00001-of-00002.safetensors\"}}", true),
                GLM53_ERR_NOT_FOUND, "tensor 'y.weight'", SHARD1);
    EXPECT_FAIL(open_sharded("{\"weight_map\": {\"x.weight\": \"../model-00001-of-00002.safetensors\"}}", true),
                GLM53_ERR_FORMAT, "model.safetensors.index.json: tensor 'x.weight'", "not a plain file name");
    EXPECT_FAIL(open_sharded("{\"weight_map\": {\"x.weight\": \"/etc/passwd\"}}", true), GLM53_ERR_FORMAT,
                "not a plain file name");
    EXPECT_FAIL(open_sharded("{\"weight_map\": {\"x.weight\": 3}}", true), GLM53_ERR_FORMAT, "'x.weight'",
                "not a file name string");
    EXPECT_FAIL(open_sharded("{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\","
                             " \"x.weight\": \"model-00002-of-00002.safetensors\"}}", true),
                GLM53_ERR_FORMAT, "tensor 'x.weight' is listed twice");
    EXPECT_FAIL(open_sharded("{\"metadata\": {}}", true), GLM53_ERR_FORMAT, "model.safetensors.index.json",
                "weight_map");
    EXPECT_FAIL(open_sharded("{\"weight_map\": ", true), GLM53_ERR_FORMAT, "model.safetensors.index.json",
                "not valid JSON");

    /* The same tensor in both shards. */
    char dir[64];
    make_temp_dir(dir);
    const st_tensor x = {"x.weight", "F32", 1, {2}, zeros, 8};
    write_safetensors(dir, SHARD1, &x, 1);
    write_safetensors(dir, SHARD2, &x, 1);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\","
               " \"z.weight\": \"model-00002-of-00002.safetensors\"}}");
    EXPECT_FAIL(try_open(dir), GLM53_ERR_FORMAT, "tensor 'x.weight' is also stored in");
    remove_dir(dir);

    /* A shard tensor the index does not list. */
    make_temp_dir(dir);
    const st_tensor both[] = {x, {"extra.weight", "F32", 1, {2}, zeros, 8}};
    write_safetensors(dir, SHARD1, both, 2);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"x.weight\": \"model-00001-of-00002.safetensors\"}}");
    EXPECT_FAIL(try_open(dir), GLM53_ERR_FORMAT, "model-00001-of-00002.safetensors: tensor 'extra.weight' is not "
                "listed in model.safetensors.index.json");
    remove_dir(dir);

    /* A bad tensor in one shard of three is reported with that shard's name. */
    make_temp_dir(dir);
    const st_tensor a = {"model.language_model.layers.0.mlp.gate.weight", "F32", 1, {2}, zeros, 8};
    write_safetensors(dir, "model-00001-of-00003.safetensors", &a, 1);
    write_raw_safetensors(dir, "model-00002-of-00003.safetensors",
                          "{\"model.language_model.layers.3.mlp.gate.weight\": {\"dtype\": \"BF16\","
                          " \"shape\": [2, 4], \"data_offsets\": [0, 8]}}", zeros, 8);
    write_safetensors(dir, "model-00003-of-00003.safetensors", &x, 1);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {"
               "\"model.language_model.layers.0.mlp.gate.weight\": \"model-00001-of-00003.safetensors\","
               " \"model.language_model.layers.3.mlp.gate.weight\": \"model-00002-of-00003.safetensors\","
               " \"x.weight\": \"model-00003-of-00003.safetensors\"}}");
    EXPECT_FAIL(try_open(dir), GLM53_ERR_FORMAT,
                "model-00002-of-00003.safetensors: tensor 'model.language_model.layers.3.mlp.gate.weight': ");
    remove_dir(dir);
}

static void test_missing_things(void) {
    char dir[64];
    make_temp_dir(dir);
    EXPECT_FAIL(try_open(dir), GLM53_ERR_NOT_FOUND, dir, "neither model.safetensors nor");
    const st_tensor x = {"x.weight", "F32", 1, {2}, zeros, 8};
    write_safetensors(dir, "model.safetensors", &x, 1);
    glm53_checkpoint *ck = NULL;
    CHECK(glm53_checkpoint_open(dir, &ck) == GLM53_OK, "open: %s", glm53_last_error());
    glm53_tensor dummy = {0};
    const glm53_tensor *t = &dummy;
    EXPECT_FAIL(glm53_checkpoint_find(ck, "no.such.tensor", &t), GLM53_ERR_NOT_FOUND, "tensor 'no.such.tensor'",
                "not found");
    CHECK(t == NULL, "find clears *out");
    EXPECT_FAIL(glm53_checkpoint_find(ck, NULL, &t), GLM53_ERR_INVALID_ARG, "NULL");
    glm53_checkpoint_free(ck);
    remove_dir(dir);

    EXPECT_FAIL(try_open("/tmp/glm53_no_such_checkpoint_dir"), GLM53_ERR_NOT_FOUND,
                "/tmp/glm53_no_such_checkpoint_dir");
    EXPECT_FAIL(glm53_checkpoint_open(NULL, &ck), GLM53_ERR_INVALID_ARG, "NULL");
}

/* ------------------------------------------------------------------------------------------------------------ */

/* model.safetensors from ts[0..n) plus a config asking for 2 x 4 FP8 blocks. */
static glm53_status open_fp8(const st_tensor *ts, int n) {
    char dir[64];
    make_temp_dir(dir);
    write_safetensors(dir, "model.safetensors", ts, n);
    write_text(dir, "config.json",
               "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [2, 4]}}");
    glm53_status st = try_open(dir);
    remove_dir(dir);
    return st;
}

static void test_fp8_scales(void) {
    const uint8_t codes[15] = {0};
    const float scale[4] = {1, 1, 1, 1};
    const st_tensor w = {"m.w.weight", "F8_E4M3", 2, {3, 5}, codes, 15};
    const st_tensor good = {"m.w.weight_scale_inv", "F32", 2, {2, 2}, scale, 16};
    const st_tensor pair[] = {w, good};
    CHECK(open_fp8(pair, 2) == GLM53_OK, "good pair: %s", glm53_last_error());
    EXPECT_FAIL(open_fp8(&w, 1), GLM53_ERR_FORMAT, "model.safetensors: tensor 'm.w.weight'",
                "scale 'm.w.weight_scale_inv' is missing");
    const st_tensor misshaped[] = {w, {"m.w.weight_scale_inv", "F32", 2, {1, 2}, scale, 8}};
    EXPECT_FAIL(open_fp8(misshaped, 2), GLM53_ERR_FORMAT, "tensor 'm.w.weight'", "scale 'm.w.weight_scale_inv'",
                "F32 [2, 2]", "found F32 [1, 2]");
    const st_tensor flat_scale[] = {w, {"m.w.weight_scale_inv", "F32", 1, {4}, scale, 16}};
    EXPECT_FAIL(open_fp8(flat_scale, 2), GLM53_ERR_FORMAT, "'m.w.weight'", "'m.w.weight_scale_inv'",
                "found F32 [4]");
    const st_tensor bf16_scale[] = {w, {"m.w.weight_scale_inv", "BF16", 2, {2, 2}, scale, 8}};
    EXPECT_FAIL(open_fp8(bf16_scale, 2), GLM53_ERR_FORMAT, "'m.w.weight'", "found BF16");
    const st_tensor w1d[] = {{"m.w.weight", "F8_E4M3", 1, {15}, codes, 15}, good};
    EXPECT_FAIL(open_fp8(w1d, 2), GLM53_ERR_FORMAT, "'m.w.weight'", "1 dims", "'m.w.weight_scale_inv'");
    const st_tensor orphan[] = {{"m.w.weight", "BF16", 1, {2}, codes, 4}, good};
    EXPECT_FAIL(open_fp8(orphan, 2), GLM53_ERR_FORMAT, "'m.w.weight_scale_inv' is a block scale",
                "'m.w.weight' is not F8_E4M3");
    EXPECT_FAIL(open_fp8(&good, 1), GLM53_ERR_FORMAT, "'m.w.weight' is missing");
}

/* ------------------------------------------------------------------------------------------------------------ */

/* A checkpoint with one tensor and the given config.json; returns the status of open, then of config. */
static glm53_status open_with_config(const char *config_json, bool config_step) {
    char dir[64];
    make_temp_dir(dir);
    const st_tensor x = {"x.weight", "F32", 1, {2}, zeros, 8};
    write_safetensors(dir, "model.safetensors", &x, 1);
    write_text(dir, "config.json", config_json);
    glm53_checkpoint *ck = NULL;
    glm53_status st = glm53_checkpoint_open(dir, &ck);
    if (st == GLM53_OK && config_step) {
        glm53_model_config cfg;
        st = glm53_checkpoint_config(ck, &cfg);
    }
    glm53_checkpoint_free(ck);
    remove_dir(dir);
    return st;
}

static void test_bad_config_files(void) {
    EXPECT_FAIL(open_with_config("{\"model_type\": \"glm5_next\",", false), GLM53_ERR_FORMAT, "config.json",
                "not valid JSON");
    EXPECT_FAIL(open_with_config("{\"quantization_config\": {\"weight_block_size\": [128]}}", false),
                GLM53_ERR_FORMAT, "config.json: quantization_config.weight_block_size", "two positive integers");
    EXPECT_FAIL(open_with_config("{\"quantization_config\": {\"quant_method\": \"awq\"}}", false),
                GLM53_ERR_UNSUPPORTED, "config.json: quantization_config.quant_method is \"awq\"");
    CHECK(open_with_config("{\"text_config\": {\"num_hidden_layers\": 2,"
                           " \"layer_types\": [\"linear_attention\", \"foo\"]}}", false) == GLM53_OK,
          "a bad layer type does not stop open");
    EXPECT_FAIL(open_with_config("{\"text_config\": {\"num_hidden_layers\": 2,"
                                 " \"layer_types\": [\"linear_attention\", \"foo\"]}}", true),
                GLM53_ERR_UNSUPPORTED, "config.json: text_config.layer_types[1] is \"foo\"",
                "\"deepseek_sparse_attention\"");
    EXPECT_FAIL(open_with_config("{\"text_config\": {\"num_hidden_layers\": 2, \"layer_types\":"
                                 " [\"linear_attention\", \"linear_attention\", \"linear_attention\"]}}", true),
                GLM53_ERR_FORMAT, "config.json: text_config.layer_types has 3 entries but num_hidden_layers is 2");
}

static void test_bad_config_values(void) {
    struct {
        const char *json;
        glm53_status want;
        const char *needle;
    } cases[] = {
        {"[1]", GLM53_ERR_FORMAT, "config.json: the top level is not a JSON object"},
        {"{\"model_type\": \"llama\"}", GLM53_ERR_UNSUPPORTED, "model_type is \"llama\""},
        {"{\"text_config\": 3}", GLM53_ERR_FORMAT, "text_config is 3, expected an object"},
        {"{\"text_config\": {\"model_type\": \"deepseek_v3\"}}", GLM53_ERR_UNSUPPORTED, "text_config.model_type"},
        {"{\"num_hidden_layers\": 2, \"mlp_layer_types\": [\"dense\", \"moe\"]}", GLM53_ERR_UNSUPPORTED,
         "mlp_layer_types[1] is \"moe\""},
        {"{\"num_hidden_layers\": 2, \"mlp_layer_types\": [\"dense\"]}", GLM53_ERR_FORMAT,
         "mlp_layer_types has 1 entries but num_hidden_layers is 2"},
        {"{\"num_hidden_layers\": 2, \"indexer_types\": [\"full\", \"half\"]}", GLM53_ERR_UNSUPPORTED,
         "indexer_types[1] is \"half\""},
        {"{\"num_hidden_layers\": 2, \"indexer_types\": [\"full\", 1]}", GLM53_ERR_FORMAT,
         "indexer_types[1] is 1, expected a string"},
        {"{\"num_hidden_layers\": 2, \"layer_types\": \"linear_attention\"}", GLM53_ERR_FORMAT,
         "layer_types is \"linear_attention\", expected a list of strings"},
        {"{\"num_hidden_layers\": 3, \"index_topk_pattern\": \"FF\"}", GLM53_ERR_FORMAT,
         "index_topk_pattern has 2 entries but num_hidden_layers is 3"},
        {"{\"num_hidden_layers\": 3, \"index_topk_pattern\": \"FXF\"}", GLM53_ERR_UNSUPPORTED,
         "index_topk_pattern has 'X' at position 1"},
        {"{\"num_hidden_layers\": 4, \"index_topk_pattern\": \"FFFS\"}", GLM53_ERR_UNSUPPORTED,
         "the indexer of layer 3, the first sparse-attention layer, is \"shared\""},
        {"{\"num_hidden_layers\": 4, \"linear_attn_config\": {\"kda_layers\": [0, 1, 2],"
         " \"full_attn_layers\": [2, 3]}}", GLM53_ERR_FORMAT, "must partition the 4 layers, but layer 2 is in both"},
        {"{\"num_hidden_layers\": 4, \"linear_attn_config\": {\"full_attn_layers\": [4]}}", GLM53_ERR_FORMAT,
         "linear_attn_config.full_attn_layers[0] is 4, expected a layer index in [0, 4)"},
        {"{\"num_hidden_layers\": 4, \"linear_attn_config\": {\"full_attn_layers\": [1, 1]}}", GLM53_ERR_FORMAT,
         "lists layer 1 twice"},
        {"{\"num_hidden_layers\": 200}", GLM53_ERR_UNSUPPORTED, "num_hidden_layers is 200"},
        {"{\"num_hidden_layers\": 0}", GLM53_ERR_FORMAT, "num_hidden_layers is 0, must be >= 1"},
        {"{\"qk_rope_head_dim\": 64}", GLM53_ERR_UNSUPPORTED, "qk_rope_head_dim is 64"},
        {"{\"scoring_func\": \"softmax\"}", GLM53_ERR_UNSUPPORTED, "scoring_func is \"softmax\""},
        {"{\"topk_method\": \"greedy\"}", GLM53_ERR_UNSUPPORTED, "topk_method is \"greedy\""},
        {"{\"hidden_act\": \"gelu\"}", GLM53_ERR_UNSUPPORTED, "hidden_act is \"gelu\""},
        {"{\"hc_mult\": 0}", GLM53_ERR_FORMAT, "hc_mult is 0, must be >= 1"},
        {"{\"hidden_size\": 0}", GLM53_ERR_FORMAT, "hidden_size is 0"},
        {"{\"vocab_size\": -5}", GLM53_ERR_FORMAT, "vocab_size is -5"},
        {"{\"index_topk\": 100}", GLM53_ERR_FORMAT, "index_topk is 100, not divisible by index_kpool (16)"},
        {"{\"index_kpool\": 0}", GLM53_ERR_FORMAT, "index_kpool is 0"},
        {"{\"hidden_size\": \"4096\"}", GLM53_ERR_FORMAT, "hidden_size is \"4096\", expected an integer"},
        {"{\"hidden_size\": 4096.5}", GLM53_ERR_FORMAT, "hidden_size is 4096.5, expected an integer"},
        {"{\"hidden_size\": 1e12}", GLM53_ERR_FORMAT, "hidden_size is 1e+12, expected an integer"},
        {"{\"rms_norm_eps\": \"small\"}", GLM53_ERR_FORMAT, "rms_norm_eps is \"small\", expected a finite number"},
        {"{\"swiglu_limit\": 1e999}", GLM53_ERR_FORMAT, "swiglu_limit is inf"},
        {"{\"hc_eps\": 1e300}", GLM53_ERR_FORMAT, "hc_eps is 1e+300, expected a finite number in float range"},
        {"{\"norm_topk_prob\": 1}", GLM53_ERR_FORMAT, "norm_topk_prob is 1, expected true or false"},
        /* ranges of every numeric key (the hardening issue): a value the math cannot use is refused by name */
        {"{\"rms_norm_eps\": -1}", GLM53_ERR_FORMAT, "rms_norm_eps is -1, must be > 0"},
        {"{\"rms_norm_eps\": 0}", GLM53_ERR_FORMAT, "rms_norm_eps is 0, must be > 0"},
        {"{\"hc_eps\": -0.5}", GLM53_ERR_FORMAT, "hc_eps is -0.5, must be >= 0"},
        {"{\"swiglu_limit\": -2}", GLM53_ERR_FORMAT, "swiglu_limit is -2, must be >= 0"},
        {"{\"routed_scaling_factor\": 0}", GLM53_ERR_FORMAT, "routed_scaling_factor is 0, must be > 0"},
        {"{\"linear_lower_bound\": 3}", GLM53_ERR_FORMAT, "linear_lower_bound is 3, must be <= 0"},
        {"{\"hc_sinkhorn_iters\": 1000000000}", GLM53_ERR_UNSUPPORTED, "hc_sinkhorn_iters is 1000000000, must be <= 1000"},
        {"{\"hc_sinkhorn_iters\": -1}", GLM53_ERR_FORMAT, "hc_sinkhorn_iters is -1, must be >= 0"},
        {"{\"hc_mult\": 17}", GLM53_ERR_UNSUPPORTED, "hc_mult is 17, must be <= 16"},
        {"{\"index_kpool\": 128, \"index_topk\": 2048}", GLM53_ERR_UNSUPPORTED, "index_kpool is 128, must be <= 64"},
        {"{\"vocab_size\": 100000000}", GLM53_ERR_UNSUPPORTED, "vocab_size is 100000000, must be <= 16777216"},
        {"{\"linear_conv_kernel_dim\": 1000}", GLM53_ERR_UNSUPPORTED, "linear_conv_kernel_dim is 1000, must be <= 64"},
        {"{\"num_nextn_predict_layers\": 99}", GLM53_ERR_UNSUPPORTED, "num_nextn_predict_layers is 99"},
        {"{\"vocab_size\": 1000, \"pad_token_id\": 1000}", GLM53_ERR_FORMAT,
         "pad_token_id is 1000, outside the vocabulary [0, 1000)"},
        {"{\"vision_config\": {\"rms_norm_eps\": -1}}", GLM53_ERR_FORMAT, "vision_config.rms_norm_eps is -1, must be > 0"},
        {"{\"q_lora_rank\": null}", GLM53_ERR_FORMAT, "q_lora_rank is null"},
        {"{\"num_key_value_heads\": 8}", GLM53_ERR_FORMAT, "num_key_value_heads is 8"},
        {"{\"num_experts_per_tok\": 300}", GLM53_ERR_FORMAT, "num_experts_per_tok is 300"},
        {"{\"moe_layer_freq\": 2}", GLM53_ERR_UNSUPPORTED, "moe_layer_freq is 2"},
        {"{\"linear_attn_config\": [1]}", GLM53_ERR_FORMAT, "linear_attn_config is an array, expected an object"},
        {"{\"linear_attn_config\": {\"num_heads\": 0}}", GLM53_ERR_FORMAT, "linear_attn_config.num_heads is 0"},
        {"{\"linear_lower_bound\": \"low\"}", GLM53_ERR_FORMAT, "linear_lower_bound is \"low\""},
        {"{\"vision_config\": {\"hidden_size\": 100, \"num_heads\": 16}}", GLM53_ERR_FORMAT,
         "vision_config.hidden_size 100 is not divisible by num_heads 16"},
        {"{\"vision_config\": {\"patch_size\": [14, 16]}}", GLM53_ERR_UNSUPPORTED,
         "vision_config.patch_size has unequal entries"},
        {"{\"vision_config\": {\"patch_size\": []}}", GLM53_ERR_FORMAT, "vision_config.patch_size"},
        {"{\"vision_config\": {\"model_type\": \"siglip\"}}", GLM53_ERR_UNSUPPORTED, "vision_config.model_type"},
        {"{\"image_token_id\": -1}", GLM53_ERR_FORMAT, "image_token_id is -1"},
        {"{\"quantization_config\": {\"fmt\": \"e5m2\"}}", GLM53_ERR_UNSUPPORTED, "fmt is \"e5m2\""},
        {"{\"quantization_config\": {\"weight_block_size\": [128, 0]}}", GLM53_ERR_FORMAT, "weight_block_size"},
        {"{\"quantization_config\": \"fp8\"}", GLM53_ERR_FORMAT, "quantization_config is \"fp8\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        EXPECT_FAIL(parse_config(cases[i].json), cases[i].want, "config.json: ", cases[i].needle);
}

int main(void) {
    TEST_CASE("truncated files") test_truncated();
    TEST_CASE("bad header JSON") test_bad_json();
    TEST_CASE("bad tensor entries") test_bad_entries();
    TEST_CASE("sharded checkpoints") test_sharded();
    TEST_CASE("missing files and tensors") test_missing_things();
    TEST_CASE("fp8 scales") test_fp8_scales();
    TEST_CASE("bad config files") test_bad_config_files();
    TEST_CASE("bad config values") test_bad_config_values();
    return test_finish("test_loader_corrupt");
}
