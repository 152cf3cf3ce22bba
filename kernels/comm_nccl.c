/*
 * comm_nccl.c - the NCCL communicator (comm.h): one GPU per rank, driven by one thread per rank (the engine's
 * rank threads), every collective enqueued on the rank's backend stream.
 *
 * libnccl.so.2 is opened with dlopen the first time a communicator is made (or probed), not linked: a user of one
 * GPU needs no NCCL, and the library PyTorch ships (nvidia-nccl-cu13) serves as well as the toolkit's. The
 * function pointers are declared with the types of nccl.h (__typeof__), so a signature change fails to compile
 * here rather than at run time. $GLM53_NCCL_LIBRARY names the file to open (default "libnccl.so.2").
 *
 * Communicators: ncclCommInitAll makes the world (rank r on devices[r]) from this one thread; the TP groups are
 * ncclCommSplit of it by ep_rank (color) and tp_rank (key), inside one group call. A TP group of one rank, or a
 * world of one rank with tp == 1, still calls ncclAllReduce: one-rank NCCL runs the same code as N ranks.
 *
 * BF16 tensors are reduced in BF16 (as vLLM and SGLang do); F32 tensors in F32.
 */
#include "kernels/comm.h"

#ifdef GLM53_WITH_CUDA

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------------------
 * The library
 */
static struct {
    __typeof__(ncclGetVersion)     *GetVersion;
    __typeof__(ncclGetErrorString) *GetErrorString;
    __typeof__(ncclCommInitAll)    *CommInitAll;
    __typeof__(ncclCommSplit)      *CommSplit;
    __typeof__(ncclCommDestroy)    *CommDestroy;
    __typeof__(ncclCommAbort)      *CommAbort;
    __typeof__(ncclAllReduce)      *AllReduce;
    __typeof__(ncclGroupStart)     *GroupStart;
    __typeof__(ncclGroupEnd)       *GroupEnd;
} nccl;

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static char           nccl_error[512];   /* why loading failed ("" when it worked) */

static void nccl_open(void) {
    const char *path = getenv("GLM53_NCCL_LIBRARY");
    if (!path || !*path) path = "libnccl.so.2";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(nccl_error, sizeof nccl_error, "cannot open %s (%s); set GLM53_NCCL_LIBRARY to libnccl.so.2", path,
                 dlerror());
        return;
    }
    struct {
        const char *name;
        void      **slot;
    } fns[] = {
        {"ncclGetVersion", (void **)&nccl.GetVersion},     {"ncclGetErrorString", (void **)&nccl.GetErrorString},
        {"ncclCommInitAll", (void **)&nccl.CommInitAll},   {"ncclCommSplit", (void **)&nccl.CommSplit},
        {"ncclCommDestroy", (void **)&nccl.CommDestroy},   {"ncclCommAbort", (void **)&nccl.CommAbort},
        {"ncclAllReduce", (void **)&nccl.AllReduce},       {"ncclGroupStart", (void **)&nccl.GroupStart},
        {"ncclGroupEnd", (void **)&nccl.GroupEnd},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        *fns[i].slot = dlsym(lib, fns[i].name);
        if (!*fns[i].slot) {
            snprintf(nccl_error, sizeof nccl_error, "%s has no %s (NCCL 2.18 or newer is needed)", path, fns[i].name);
            memset(&nccl, 0, sizeof nccl);
            dlclose(lib);
            return;
        }
    }
}

static glm53_status nccl_load(void) {
    pthread_once(&nccl_once, nccl_open);
    if (!nccl.AllReduce) return GLM53_FAIL(GLM53_ERR_BACKEND, "nccl: %s", nccl_error);
    return GLM53_OK;
}

#define NCCL_TRY(call, what)                                                                                \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess) return GLM53_FAIL(GLM53_ERR_BACKEND, "nccl %s: %s", (what),                  \
                                                 nccl.GetErrorString(r_));                                  \
    } while (0)

glm53_status glm53_comm_nccl_probe(int32_t *version) {
    GLM53_TRY(nccl_load());
    int v = 0;
    NCCL_TRY(nccl.GetVersion(&v), "get version");
    if (version) *version = v;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * The communicator
 */
typedef struct {
    int32_t         n_ranks, tp;
    int32_t        *devices;    /* [n_ranks] */
    ncclComm_t     *world;      /* [n_ranks] */
    ncclComm_t     *tp_comm;    /* [n_ranks] the rank's TP group: world[r] when tp == n_ranks */
    bool            split;      /* tp_comm are communicators of their own */
    pthread_mutex_t lock;
    bool            aborted;
    glm53_comm     *endpoints;  /* [n_ranks] */
} nccl_world;

static glm53_status nccl_all_reduce(glm53_comm *c, glm53_backend *be, glm53_tensor *t, glm53_comm_group group) {
    nccl_world *w = c->impl;
    if (t->device != GLM53_DEVICE_CUDA || (t->dtype != GLM53_F32 && t->dtype != GLM53_BF16) ||
        !glm53_tensor_is_contiguous(t))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "all_reduce (nccl): needs a contiguous F32/BF16 CUDA tensor, got %s",
                          glm53_dtype_name((glm53_dtype)t->dtype));
    pthread_mutex_lock(&w->lock);
    bool aborted = w->aborted;
    pthread_mutex_unlock(&w->lock);
    if (aborted)
        return GLM53_FAIL(GLM53_ERR_BACKEND, "all_reduce (nccl): the communicator was aborted after a failed step; "
                          "load the model again");
    if (cudaSetDevice(w->devices[c->rank]) != cudaSuccess)
        return GLM53_FAIL(GLM53_ERR_BACKEND, "all_reduce (nccl): cudaSetDevice(%d) failed", w->devices[c->rank]);
    ncclComm_t comm = group == GLM53_COMM_TP ? w->tp_comm[c->rank] : w->world[c->rank];
    ncclDataType_t type = t->dtype == GLM53_F32 ? ncclFloat32 : ncclBfloat16;
    NCCL_TRY(nccl.AllReduce(t->data, t->data, (size_t)glm53_tensor_numel(t), type, ncclSum, comm,
                            (cudaStream_t)be->stream), "all_reduce");
    return GLM53_OK;
}

static void nccl_abort(glm53_comm *c) {
    nccl_world *w = c->impl;
    pthread_mutex_lock(&w->lock);
    if (!w->aborted) {
        w->aborted = true;
        for (int32_t r = 0; r < w->n_ranks; r++) {
            if (w->split && w->tp_comm[r]) nccl.CommAbort(w->tp_comm[r]);
            if (w->world[r]) nccl.CommAbort(w->world[r]);
            w->tp_comm[r] = w->world[r] = NULL;
        }
    }
    pthread_mutex_unlock(&w->lock);
}

static void nccl_reset(glm53_comm *c) { (void)c; }

static void nccl_destroy(glm53_comm **endpoints, int32_t n) {
    if (n < 1 || !endpoints[0]) return;
    nccl_world *w = endpoints[0]->impl;
    for (int32_t r = 0; r < w->n_ranks; r++) {
        if (w->split && w->tp_comm[r]) nccl.CommDestroy(w->tp_comm[r]);
        if (w->world[r]) nccl.CommDestroy(w->world[r]);
    }
    for (int32_t r = 0; r < n; r++) endpoints[r] = NULL;
    pthread_mutex_destroy(&w->lock);
    free(w->devices);
    free(w->world);
    free(w->tp_comm);
    free(w->endpoints);
    free(w);
}

static const glm53_comm_ops nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .abort = nccl_abort,
    .reset = nccl_reset,
    .destroy = nccl_destroy,
};

static glm53_status make_comms(nccl_world *w) {
    NCCL_TRY(nccl.CommInitAll(w->world, w->n_ranks, w->devices), "comm init");
    if (w->tp == w->n_ranks) {
        for (int32_t r = 0; r < w->n_ranks; r++) w->tp_comm[r] = w->world[r];
        return GLM53_OK;
    }
    w->split = true;
    NCCL_TRY(nccl.GroupStart(), "group start");
    for (int32_t r = 0; r < w->n_ranks; r++) {
        ncclResult_t res = nccl.CommSplit(w->world[r], r / w->tp, r % w->tp, &w->tp_comm[r], NULL);
        if (res != ncclSuccess) {
            nccl.GroupEnd();
            return GLM53_FAIL(GLM53_ERR_BACKEND, "nccl comm split: %s", nccl.GetErrorString(res));
        }
    }
    NCCL_TRY(nccl.GroupEnd(), "group end (comm split)");
    return GLM53_OK;
}

glm53_status glm53_comm_nccl_create(int32_t n_ranks, int32_t tp, const int32_t *devices, glm53_comm **out) {
    if (n_ranks < 1 || tp < 1 || n_ranks % tp)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "comm (nccl): %d ranks do not form groups of tp = %d", n_ranks, tp);
    GLM53_TRY(nccl_load());
    nccl_world *w = calloc(1, sizeof *w);
    if (!w) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "comm (nccl): no memory");
    w->n_ranks = n_ranks;
    w->tp = tp;
    pthread_mutex_init(&w->lock, NULL);
    w->devices = calloc((size_t)n_ranks, sizeof *w->devices);
    w->world = calloc((size_t)n_ranks, sizeof *w->world);
    w->tp_comm = calloc((size_t)n_ranks, sizeof *w->tp_comm);
    w->endpoints = calloc((size_t)n_ranks, sizeof *w->endpoints);
    glm53_status st = w->devices && w->world && w->tp_comm && w->endpoints
                          ? GLM53_OK
                          : GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "comm (nccl): no memory for %d ranks", n_ranks);
    if (st == GLM53_OK) {
        memcpy(w->devices, devices, (size_t)n_ranks * sizeof *devices);
        st = make_comms(w);
    }
    for (int32_t r = 0; r < n_ranks; r++) {
        if (w->endpoints) w->endpoints[r] = (glm53_comm){.ops = &nccl_ops, .rank = r, .n_ranks = n_ranks, .tp = tp,
                                                         .impl = w};
        if (w->endpoints) out[r] = &w->endpoints[r];
    }
    if (st != GLM53_OK) {
        if (w->endpoints) nccl_destroy(out, n_ranks);
        else {
            free(w->devices);
            free(w->world);
            free(w->tp_comm);
            free(w);
        }
        return st;
    }
    return GLM53_OK;
}

#else /* !GLM53_WITH_CUDA */

glm53_status glm53_comm_nccl_create(int32_t n_ranks, int32_t tp, const int32_t *devices, glm53_comm **out) {
    (void)n_ranks; (void)tp; (void)devices; (void)out;
    return GLM53_FAIL(GLM53_ERR_BACKEND, "comm (nccl): this libglm53 was built without CUDA");
}

glm53_status glm53_comm_nccl_probe(int32_t *version) {
    (void)version;
    return GLM53_FAIL(GLM53_ERR_BACKEND, "comm (nccl): this libglm53 was built without CUDA");
}

#endif
