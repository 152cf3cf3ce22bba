/*
 * error.c - per-thread last error, status names, version.
 *
 * Each thread has one message slot. GLM53_FAIL writes "file.c:line: message" into it (basename only, so
 * messages read the same whatever the build directory) and returns the status it was given.
 */
#include "core/base/base.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char tls_error[1024];

glm53_status glm53_set_error(glm53_status status, const char *file, int line, const char *fmt, ...) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(tls_error, sizeof tls_error, "%s:%d: ", base, line);
    if (n < 0 || (size_t)n >= sizeof tls_error) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error + n, sizeof tls_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void glm53_clear_error(void) { tls_error[0] = '\0'; }

const char *glm53_last_error(void) { return tls_error; }

const char *glm53_status_name(glm53_status status) {
    switch (status) {
    case GLM53_OK: return "GLM53_OK";
    case GLM53_ERR_INVALID_ARG: return "GLM53_ERR_INVALID_ARG";
    case GLM53_ERR_IO: return "GLM53_ERR_IO";
    case GLM53_ERR_FORMAT: return "GLM53_ERR_FORMAT";
    case GLM53_ERR_UNSUPPORTED: return "GLM53_ERR_UNSUPPORTED";
    case GLM53_ERR_NOT_FOUND: return "GLM53_ERR_NOT_FOUND";
    case GLM53_ERR_OUT_OF_MEMORY: return "GLM53_ERR_OUT_OF_MEMORY";
    case GLM53_ERR_CACHE_FULL: return "GLM53_ERR_CACHE_FULL";
    case GLM53_ERR_OUT_OF_RANGE: return "GLM53_ERR_OUT_OF_RANGE";
    case GLM53_ERR_BACKEND: return "GLM53_ERR_BACKEND";
    }
    return "GLM53_ERR_UNKNOWN";
}

const char *glm53_version(void) { return "0.1.0"; }
int32_t glm53_abi_version(void) { return GLM53_ABI_VERSION; }
