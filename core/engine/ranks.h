/*
 * ranks.h - running a piece of a step on every rank at once (ranks.c): rank 0 on the calling thread, rank r > 0
 * on a thread of its own that lives as long as the model. One thread per rank is what NCCL wants (one device per
 * thread) and what the threads communicator needs (its collectives are barriers across the ranks' threads).
 */
#ifndef GLM53_ENGINE_RANKS_H
#define GLM53_ENGINE_RANKS_H

#include "core/engine/model.h"

enum { GLM53_MAX_RANKS = 64 };

typedef glm53_status (*glm53_rank_fn)(glm53_rank *rank, void *arg);

/* Starts the threads of ranks 1 .. n_ranks-1 (none for one rank). */
glm53_status glm53_ranks_start(glm53_model *model);
/* Joins them (nothing may be running). */
void         glm53_ranks_stop(glm53_model *model);
/* fn(rank, arg) on every rank concurrently; returns when all have returned. The result is GLM53_OK, or the status
 * of the rank that failed first, its message (prefixed "rank r: " for r > 0) set on this thread. A rank that fails
 * aborts the communicator, so ranks waiting in a collective for it give up instead of hanging; the threads
 * communicator is reset once all have returned. */
glm53_status glm53_ranks_run(glm53_model *model, glm53_rank_fn fn, void *arg);

#endif /* GLM53_ENGINE_RANKS_H */
