/*
 * loader_test_util.h - build checkpoints on disk for the loader tests (test_loader.c, test_loader_corrupt.c).
 *
 * A tiny safetensors writer (tensors laid out in the order given, header padded with spaces to 8 bytes as the
 * real writers do), a raw variant that takes the header JSON verbatim (for corrupt files), temp directories
 * under /tmp, and EXPECT_FAIL, which checks a status and that glm53_last_error() contains given substrings.
 */
#ifndef GLM53_LOADER_TEST_UTIL_H
#define GLM53_LOADER_TEST_UTIL_H

#include "test_util.h"

#include "core/glm53.h"

#include <dirent.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

typedef struct st_tensor {
    const char *name;
    const char *dtype;        /* as written in the header: "F32", "BF16", "F8_E4M3", ... */
    int         ndim;
    int64_t     shape[5];
    const void *data;
    size_t      nbytes;
} st_tensor;

/* The 8-byte length, `header` padded with spaces to a multiple of 8, then `data`. Caller frees. */
static inline uint8_t *st_build_raw(const char *header, const void *data, size_t data_len, size_t *out_len) {
    size_t n = strlen(header), padded = (n + 7) / 8 * 8;
    uint8_t *buf = malloc(8 + padded + data_len + 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, n);
    memset(buf + 8 + n, ' ', padded - n);
    if (data_len) memcpy(buf + 8 + padded, data, data_len);
    *out_len = 8 + padded + data_len;
    return buf;
}

/* A valid safetensors file holding ts[0..n) back to back, with a small __metadata__ block. Caller frees. */
static inline uint8_t *st_build(const st_tensor *ts, int n, size_t *out_len) {
    size_t header_cap = 256, data_len = 0;
    for (int i = 0; i < n; i++) {
        header_cap += strlen(ts[i].name) + 160;
        data_len += ts[i].nbytes;
    }
    char *header = malloc(header_cap);
    uint8_t *data = malloc(data_len ? data_len : 1);
    size_t h = (size_t)snprintf(header, header_cap, "{\"__metadata__\": {\"format\": \"pt\"}");
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        h += (size_t)snprintf(header + h, header_cap - h, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [", ts[i].name,
                              ts[i].dtype);
        for (int d = 0; d < ts[i].ndim; d++)
            h += (size_t)snprintf(header + h, header_cap - h, d ? ", %lld" : "%lld", (long long)ts[i].shape[d]);
        h += (size_t)snprintf(header + h, header_cap - h, "], \"data_offsets\": [%zu, %zu]}", offset,
                              offset + ts[i].nbytes);
        if (ts[i].nbytes) memcpy(data + offset, ts[i].data, ts[i].nbytes);
        offset += ts[i].nbytes;
    }
    snprintf(header + h, header_cap - h, "}");
    uint8_t *buf = st_build_raw(header, data, data_len, out_len);
    free(header);
    free(data);
    return buf;
}

static inline void write_bytes(const char *dir, const char *name, const void *buf, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return;
    }
    if (len) fwrite(buf, 1, len, f);
    fclose(f);
}

static inline void write_text(const char *dir, const char *name, const char *text) {
    write_bytes(dir, name, text, strlen(text));
}

static inline void write_safetensors(const char *dir, const char *name, const st_tensor *ts, int n) {
    size_t len;
    uint8_t *buf = st_build(ts, n, &len);
    write_bytes(dir, name, buf, len);
    free(buf);
}

static inline void write_raw_safetensors(const char *dir, const char *name, const char *header, const void *data,
                                  size_t data_len) {
    size_t len;
    uint8_t *buf = st_build_raw(header, data, data_len, &len);
    write_bytes(dir, name, buf, len);
    free(buf);
}

/* A fresh empty directory /tmp/glm53_loader_XXXXXX, written into dir[64]. */
static inline void make_temp_dir(char *dir) {
    snprintf(dir, 64, "/tmp/glm53_loader_XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        exit(2);
    }
}

/* Removes a flat directory made by make_temp_dir (tests never create subdirectories). */
static inline void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static inline bool error_has_all(const char *const *needles) {
    for (int i = 0; needles[i]; i++)
        if (!strstr(glm53_last_error(), needles[i])) return false;
    return true;
}

/* Checks that `call` returns `want` and that the error message contains every following substring. */
#define EXPECT_FAIL(call, want, ...)                                                                            \
    do {                                                                                                        \
        glm53_status got_ = (call);                                                                             \
        const char *const needles_[] = {__VA_ARGS__, NULL};                                                     \
        CHECK(got_ == (want), "%s returned %s, expected %s (%s)", #call, glm53_status_name(got_),               \
              glm53_status_name(want), glm53_last_error());                                                     \
        CHECK(error_has_all(needles_), "%s: message \"%s\" lacks one of the expected substrings", #call,        \
              glm53_last_error());                                                                              \
    } while (0)

#endif /* GLM53_LOADER_TEST_UTIL_H */
