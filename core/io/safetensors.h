/*
 * safetensors.h - the safetensors header parser, shared by the checkpoint loader and the fuzz target.
 *
 * A .safetensors file is: 8-byte little-endian header length N, N bytes of JSON
 *     {"name": {"dtype": "BF16", "shape": [d0, d1], "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
 * then the data region; offsets are relative to the start of the data region (byte 8 + N).
 *
 * The parser works on bytes in memory (the loader passes an mmapped file, the fuzzer a buffer) and validates
 * everything the header claims against the buffer, so a caller can turn entries into pointers without checks.
 * Messages name the file (`display_name`) and the tensor.
 */
#ifndef GLM53_SAFETENSORS_H
#define GLM53_SAFETENSORS_H

#include "core/base/base.h"

#include <stdint.h>

/* A header larger than this is treated as corrupt (the Rust safetensors crate uses the same bound). */
#define GLM53_SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef struct glm53_st_entry {
    char    *name;                      /* owned */
    int32_t  dtype;                     /* glm53_dtype */
    int32_t  ndim;
    int64_t  shape[GLM53_MAX_DIMS];
    uint64_t begin, end;                /* byte range inside the data region */
} glm53_st_entry;

typedef struct glm53_st_header {
    glm53_st_entry *entries;            /* sorted by name, names unique */
    int64_t         n_entries;
    uint64_t        data_start;         /* offset of the data region in the buffer: 8 + N */
    uint64_t        data_size;          /* bytes from data_start to the end of the buffer */
} glm53_st_header;

/* Parses and validates the header of the safetensors bytes buf[0, len). On failure *out is left empty and the
 * status is GLM53_ERR_FORMAT (malformed) or GLM53_ERR_UNSUPPORTED (unknown dtype, too many dims). */
glm53_status glm53_safetensors_parse(const uint8_t *buf, size_t len, const char *display_name,
                                     glm53_st_header *out);
void         glm53_safetensors_header_free(glm53_st_header *header);

#endif /* GLM53_SAFETENSORS_H */
