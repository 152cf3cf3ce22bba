/*
 * config.h - config.json parsing, shared by the checkpoint loader and the fuzz target.
 *
 * glm53_config_parse is what glm53_checkpoint_config runs on the checkpoint's config.json text; it is exposed
 * here so a fuzzer (and tests) can feed it strings without a checkpoint on disk.
 */
#ifndef GLM53_CONFIG_H
#define GLM53_CONFIG_H

#include "core/base/base.h"

#include <cjson/cJSON.h>

/* Parses text[0, len) as one JSON value (whitespace may follow it, nothing else). The caller frees *out with
 * cJSON_Delete. `what` names the text in messages: "<file>: <what> is not valid JSON ...". */
glm53_status glm53_json_parse(const char *text, size_t len, const char *file, const char *what, cJSON **out);

/* Full config.json -> glm53_model_config, with Hugging Face defaults and derived per-layer schedules. */
glm53_status glm53_config_parse(const char *json, size_t len, const char *file, glm53_model_config *out);

/* Only quantization_config.weight_block_size (validated): the block of FP8 weight_scale_inv tensors.
 * *rows = *cols = 0 when the config has no quantization_config. */
glm53_status glm53_config_fp8_block(const char *json, size_t len, const char *file, int32_t *rows, int32_t *cols);

#endif /* GLM53_CONFIG_H */
