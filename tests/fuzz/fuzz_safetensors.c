/*
 * fuzz_safetensors.c - libFuzzer target: the safetensors header parser on arbitrary bytes.
 *
 * The input is a whole .safetensors file. Whatever it holds, glm53_safetensors_parse must return a status
 * without touching memory outside the buffer (ASan), without undefined behaviour (UBSan) and without leaks.
 * When it accepts the file, every promise of glm53_st_header is checked here and a broken one traps, so a
 * parser that says OK to a lie is a finding too. Built and run by tests/fuzz/run.sh.
 */
#include "core/io/safetensors.h"

#include <stdlib.h>

static void check_header(const glm53_st_header *h, size_t size) {
    if (h->data_start > size || h->data_start + h->data_size != size) __builtin_trap();
    for (int64_t i = 0; i < h->n_entries; i++) {
        const glm53_st_entry *e = &h->entries[i];
        if (i > 0 && strcmp(h->entries[i - 1].name, e->name) >= 0) __builtin_trap();   /* sorted, unique */
        if (e->ndim < 0 || e->ndim > GLM53_MAX_DIMS || e->begin > e->end || e->end > h->data_size)
            __builtin_trap();
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)e->shape[d];
        if (numel * glm53_dtype_size((glm53_dtype)e->dtype) != e->end - e->begin) __builtin_trap();
        for (int64_t j = 0; j < i; j++) {   /* disjoint (the fuzzer's files hold few tensors) */
            const glm53_st_entry *o = &h->entries[j];
            if (e->begin < e->end && o->begin < o->end && e->begin < o->end && o->begin < e->end) __builtin_trap();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    glm53_st_header header;
    if (glm53_safetensors_parse(data, size, "fuzz.safetensors", &header) == GLM53_OK) {
        check_header(&header, size);
        glm53_safetensors_header_free(&header);
    }
    return 0;
}
