/*
 * trace.c - the debugging dump of a step's intermediates ($GLM53_TRACE_DIR, graph.h): float32 .npy files named
 * <step>_<layer>_<name>.npy, for tests/cuda/compare_traces.py.
 */
#include "core/engine/graph.h"

#include <stdio.h>
#include <stdlib.h>

void trace(step_ctx *sc, int layer, const char *name, const glm53_tensor *t) {
    if (!sc->m->trace_dir || sc->st != GLM53_OK || !t || sc->rank->index != 0) return;   /* rank 0 speaks */
    glm53_plan_mark mark = glm53_plan_mark_get(sc->plan);
    int64_t n = glm53_tensor_numel(t);
    glm53_tensor *t32 = NEW(GLM53_F32, 1, n, 0, 0);
    float *host = malloc((size_t)n * sizeof(float));
    glm53_tensor flat = glm53_tensor_reshape(t, 1, n, 0, 0);
    OP(sc->be->ops->copy(sc->be, t32, &flat));
    if (host) OP(sc->be->ops->download(sc->be, host, t32));
    char path[1024], header[256];
    snprintf(path, sizeof path, "%s/%03lld_%02d_%s.npy", sc->m->trace_dir, (long long)sc->m->trace_step, layer, name);
    FILE *f = host && sc->st == GLM53_OK ? fopen(path, "wb") : NULL;
    if (f) {
        char shape[128] = "";
        for (int i = 0; i < t->ndim; i++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld,%s", (long long)t->shape[i],
                     i + 1 < t->ndim ? " " : "");
        int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
        int pad = 64 - (10 + len + 1) % 64;
        if (pad == 64) pad = 0;
        fwrite("\x93NUMPY\x01\x00", 1, 8, f);
        uint16_t hlen = (uint16_t)(len + pad + 1);
        fwrite(&hlen, 2, 1, f);
        fwrite(header, 1, (size_t)len, f);
        for (int i = 0; i < pad; i++) fputc(' ', f);
        fputc('\n', f);
        fwrite(host, sizeof(float), (size_t)n, f);
        fclose(f);
    }
    free(host);
    glm53_plan_reset(sc->plan, mark);
}
