/*
 * plan.h - the step plan of a model: everything a step needs besides weights and caches, reserved once and
 * reused, so that a steady-state step allocates nothing and waits for the device only when its outputs are read.
 *
 *   scratch    every intermediate tensor of a step (and the scratch ops take for themselves) lives in one
 *              workspace on the model's backend (kernels/workspace.h); the tensor headers pointing into it
 *              come from chunks of host memory that never move. Marks and resets give a layer's scratch back.
 *   metadata   the per-step indices (token ids, output rows, absolute positions, closed pool counts, KDA ring
 *              slots, conv ring slots, embedding rows) and float rows (caller embeddings, MTP hidden inputs) are
 *              written into one staging buffer of pinned host memory and go to the device in ONE asynchronous
 *              copy at the start of the step; the graph reads views of the device copy.
 *   slices     the per-sequence bookkeeping of the batch.
 *
 * Buckets: a step of a given shape (main or MTP layer, sequences, rows per sequence, output rows) takes the
 * same pieces in the same order each time. The plan is sized by the high-water mark of the largest bucket seen
 * and every bucket reuses it: after one step of each shape, no step allocates, and steps of one bucket get
 * identical device addresses, which is what a captured step's replay relies on.
 * `generation` changes whenever the workspace block or the staging buffer moves (a graph captured before then
 * would read freed memory).
 */
#ifndef GLM53_ENGINE_PLAN_H
#define GLM53_ENGINE_PLAN_H

#include "kernels/workspace.h"

typedef struct glm53_step_plan {
    glm53_backend  *be;
    glm53_workspace ws;
    /* tensor headers: chunks of GLM53_PLAN_CHUNK headers; the first n_headers of them are in use */
    glm53_tensor  **chunks;
    int64_t         n_chunks, cap_chunks, n_headers;
    /* metadata staging (pinned host memory when the backend has it) */
    char           *staging;
    size_t          staging_cap, staging_used;
    glm53_tensor   *meta;         /* this step's device copy of the staging bytes (a workspace tensor) */
    uint64_t        staging_generation;
    /* per-sequence slices of the current batch (graph.h's seq_slice), and each sequence's first batch row */
    void           *slices;
    int32_t         cap_slices;
    glm53_kda_seq  *kda_seqs;     /* [cap_slices]: a KDA layer's kda_sequences arguments (kda.c) */
    int64_t        *seq_starts;
    int32_t         cap_seq_starts;
} glm53_step_plan;

enum { GLM53_PLAN_CHUNK = 256 };

/* A mark of the plan's scratch: headers and workspace offset. */
typedef struct glm53_plan_mark {
    int64_t n_headers;
    size_t  offset;
} glm53_plan_mark;

glm53_status glm53_plan_init(glm53_step_plan *plan, glm53_backend *be);
void         glm53_plan_free(glm53_step_plan *plan);
/* Generation of everything a captured step points at (workspace block and staging buffer). */
uint64_t     glm53_plan_generation(const glm53_step_plan *plan);

/* Starts a step whose metadata takes `meta_bytes` (a multiple of 4): resets the scratch, grows the workspace
 * to the high-water mark if an earlier step overflowed it, makes room in the staging buffer, and takes the
 * device copy of the metadata as the step's first scratch tensor. */
glm53_status glm53_plan_begin(glm53_step_plan *plan, size_t meta_bytes);
/* n 32-bit entries of the staging buffer for the host to fill; *offset receives their byte offset. */
void        *glm53_plan_stage(glm53_step_plan *plan, int64_t n, size_t *offset);
/* Sends the staging bytes to their device copy: one asynchronous copy (a plain copy without async support). */
glm53_status glm53_plan_upload(glm53_step_plan *plan);
/* A view of n entries of dtype (I32 or F32) of the device metadata at byte `offset`, shaped [n] or [n / d1, d1]. */
glm53_tensor *glm53_plan_meta_view(glm53_step_plan *plan, glm53_status *st, int32_t dtype, size_t offset,
                                   int64_t d0, int64_t d1);

/* A new contiguous tensor [d0, d1, d2] (first ndim dims) in the step's scratch, or NULL with *st set. Does
 * nothing and returns NULL when *st is already an error, so a chain of ops needs no check after each line. */
glm53_tensor *glm53_plan_tensor(glm53_step_plan *plan, glm53_status *st, int32_t dtype, int ndim, int64_t d0,
                                int64_t d1, int64_t d2);
glm53_plan_mark glm53_plan_mark_get(const glm53_step_plan *plan);
/* Gives back the scratch tensors made after `mark`. */
void            glm53_plan_reset(glm53_step_plan *plan, glm53_plan_mark mark);

#endif /* GLM53_ENGINE_PLAN_H */
