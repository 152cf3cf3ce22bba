/*
 * fuzz_config.c - libFuzzer target: config.json parsing on arbitrary text.
 *
 * Runs both entry points the loader uses (the FP8 block size at open, the full config afterwards). On success
 * the parsed config must satisfy what the model graph relies on; a violation traps. Built and run by
 * tests/fuzz/run.sh.
 */
#include "core/io/config.h"

static void check_config(const glm53_model_config *c) {
    const glm53_text_config *t = &c->text;
    if (t->num_hidden_layers < 1 || t->num_hidden_layers > GLM53_MAX_LAYERS) __builtin_trap();
    if (t->hidden_size < 1 || t->vocab_size < 1 || t->hc_mult < 1 || t->index_kpool < 1) __builtin_trap();
    if (t->index_topk % t->index_kpool != 0 || t->qk_rope_head_dim != 0) __builtin_trap();
    if (t->num_experts_per_tok > t->n_routed_experts) __builtin_trap();
    for (int i = 0; i < t->num_hidden_layers; i++) {
        if ((uint32_t)t->layer_types[i] > GLM53_LAYER_SPARSE_MLA || (uint32_t)t->mlp_types[i] > GLM53_MLP_MOE ||
            (uint32_t)t->indexer_types[i] > GLM53_INDEXER_SHARED)
            __builtin_trap();
    }
    if ((c->fp8_block_rows == 0) != (c->fp8_block_cols == 0) || c->fp8_block_rows < 0) __builtin_trap();
    if (c->has_vision && (c->vision.num_heads < 1 || c->vision.hidden_size % c->vision.num_heads != 0))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *json = (const char *)data;
    int32_t rows, cols;
    glm53_status block_status = glm53_config_fp8_block(json, size, "config.json", &rows, &cols);
    glm53_model_config config;
    glm53_status status = glm53_config_parse(json, size, "config.json", &config);
    if (status == GLM53_OK) {
        check_config(&config);
        /* Open and config read the same quantization_config: they must agree. */
        if (block_status != GLM53_OK || rows != config.fp8_block_rows || cols != config.fp8_block_cols)
            __builtin_trap();
    }
    return 0;
}
