/*
 * comm.h - communicators: the collectives that tie the ranks of a tensor/expert-parallel model together, behind
 * one interface table with two implementations.
 *
 *   threads   (comm_threads.c) N ranks as threads of this process over any backend whose tensors the host can
 *             read (the CPU backend): every sharding decision of the engine is tested in CI without a GPU;
 *   nccl      (comm_nccl.c) NCCL, one GPU per rank, one thread per rank (the engine's rank threads), the
 *             collectives enqueued on each rank's backend stream, so a captured step (CUDA graph) records them.
 *             libnccl.so.2 is opened at run time (dlopen, like vLLM's pynccl), so a single-GPU user needs no NCCL;
 *             $GLM53_NCCL_LIBRARY names another file.
 *
 * Ranks and groups. Rank r of an N = tp * ep world is (ep_rank, tp_rank) = (r / tp, r % tp). Two groups:
 *   TP     the tp ranks of one ep_rank: attention heads and dense MLP widths are split across them;
 *   WORLD  all N ranks: the experts are split across ep_ranks and each expert's width across tp_ranks.
 *
 * Every rank calls the same collectives in the same order. all_reduce leaves the same bits on every rank of the
 * group (threads: each element is summed in rank order; NCCL: each element is reduced once and broadcast), so the
 * replicated computations after it (norms, routing, the indexer's selection, the logits) agree exactly across
 * ranks, and ties break the same way everywhere.
 *
 * Failure. A rank whose step failed calls abort: ranks blocked in a collective of the threads communicator return
 * an error at once (their step then fails too); NCCL's communicator is aborted, after which every later
 * collective fails (the model must be loaded again).
 */
#ifndef GLM53_KERNELS_COMM_H
#define GLM53_KERNELS_COMM_H

#include "kernels/backend.h"

typedef enum glm53_comm_group {
    GLM53_COMM_TP = 0,
    GLM53_COMM_WORLD = 1,
} glm53_comm_group;

typedef struct glm53_comm     glm53_comm;
typedef struct glm53_comm_ops glm53_comm_ops;

struct glm53_comm_ops {
    const char *name;   /* "threads", "nccl" */
    /* t = the sum over the group's ranks of their t, in place. t is contiguous, F32 or BF16, on this rank's
     * backend `be`; enqueued on its stream (NCCL) or done before return (threads). */
    glm53_status (*all_reduce)(glm53_comm *c, glm53_backend *be, glm53_tensor *t, glm53_comm_group group);
    /* Called by a rank whose step failed, so the others stop waiting for it. */
    void         (*abort)(glm53_comm *c);
    /* Ends an aborted pass of the threads communicator: every rank has left its collectives (NCCL: nothing;
     * an aborted NCCL communicator stays aborted). */
    void         (*reset)(glm53_comm *c);
    /* Frees all n endpoints made by one create call (each rank's thread has left every collective). */
    void         (*destroy)(glm53_comm **endpoints, int32_t n);
};

/* One rank's endpoint. */
struct glm53_comm {
    const glm53_comm_ops *ops;
    int32_t               rank, n_ranks, tp;
    void                 *impl;   /* the implementation's shared state */
};

/* Endpoints for ranks 0 .. n_ranks-1 (n_ranks a multiple of tp) into out[0 .. n_ranks). */
glm53_status glm53_comm_threads_create(int32_t n_ranks, int32_t tp, glm53_comm **out);
/* NCCL endpoints, rank r on CUDA device devices[r]. GLM53_ERR_BACKEND without CUDA or without libnccl. */
glm53_status glm53_comm_nccl_create(int32_t n_ranks, int32_t tp, const int32_t *devices, glm53_comm **out);
/* Opens libnccl and resolves every function the NCCL communicator calls; *version = NCCL's version code. Needs
 * no GPU: the check CI runs that the NCCL path links. */
glm53_status glm53_comm_nccl_probe(int32_t *version);

#endif /* GLM53_KERNELS_COMM_H */
