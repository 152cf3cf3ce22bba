/*
 * step.h - the engine's step driver beyond the public API: capture of a step into a backend graph and its
 * replay. Used by tests/cuda (a steady-state decode step captured and replayed gives the same logits) and by
 * the decode work that builds on it; not part of the public API yet.
 *
 * A captured step is the enqueue phase of one pass recorded on the backend's stream (capture_begin ..
 * capture_end): the metadata upload and every op, nothing that allocates or waits. Its replay refills the
 * metadata staging on the host (the same batch at the same cache lengths gives the same bytes), launches the
 * graph, and finishes like an eager step (outputs read, cache bookkeeping and lengths advanced). A step graph
 * is valid while the plan's generation is the one it was captured at and the batch is the one it was made for.
 */
#ifndef GLM53_ENGINE_STEP_H
#define GLM53_ENGINE_STEP_H

#include "core/engine/model.h"

typedef struct glm53_step_graph glm53_step_graph;

/* Captures the main-model step of `batch` (its sequences must hold the lengths the replay will find; the batch
 * must fit one pass). Nothing runs and nothing changes: the graph only records. `outputs` says which outputs
 * the graph computes (which of its pointers are non-NULL, and top_k / top_n_valid; its buffers are not
 * written); NULL: logits and hidden. GLM53_ERR_UNSUPPORTED on a backend without capture. */
glm53_status glm53_step_capture(glm53_model *model, const glm53_batch *batch, const glm53_step_output *outputs,
                                glm53_step_graph **out);
/* Runs a captured step for `batch` (the same sequences, rows and tokens, at the lengths of the capture) and
 * writes its outputs like glm53_model_step; it may ask for the captured outputs or fewer (top_k and
 * top_n_valid as captured). */
glm53_status glm53_step_replay(glm53_model *model, glm53_step_graph *graph, const glm53_batch *batch,
                               glm53_step_output *out);
void         glm53_step_graph_free(glm53_model *model, glm53_step_graph *graph);

#endif /* GLM53_ENGINE_STEP_H */
