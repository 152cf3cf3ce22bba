/*
 * workspace.h - the scratch memory of steps on one backend instance, reserved once and reused.
 *
 * Every intermediate of a step (the graph's tensors and the scratch an op needs inside) is carved out of one
 * block of backend memory by bumping an offset; taking a mark before a layer and resetting to it after gives
 * back what the layer used, so a long step holds one layer's scratch at a time. A step that needs more than
 * the block holds still runs: what does not fit gets an allocation of its own (released on reset like the
 * rest), and the workspace records how far the offset went. At the next glm53_workspace_begin the block is
 * reallocated to that high-water mark, so from then on a step of that shape allocates nothing and takes the
 * same addresses every time: the property CUDA graph capture and replay rest on.
 *
 * `generation` changes whenever the block moves; a graph captured against an older generation refers to freed
 * memory and must not be replayed. While `frozen` (during stream capture) growing is an error, not an
 * allocation.
 *
 * Not thread-safe: a workspace belongs to the one step running on its backend instance.
 */
#ifndef GLM53_WORKSPACE_H
#define GLM53_WORKSPACE_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GLM53_WORKSPACE_ALIGN = 256 };   /* bytes: every piece starts on a 256-byte boundary */

typedef struct glm53_workspace_overflow {
    glm53_tensor mem;      /* an allocation of its own for a piece that did not fit the block */
    size_t       offset;   /* the workspace offset the piece was taken at */
} glm53_workspace_overflow;

struct glm53_workspace {
    glm53_backend            *be;
    glm53_tensor              block;        /* backend allocation of `capacity` bytes, as F32 [capacity / 4] */
    size_t                    capacity;
    size_t                    offset;       /* bump offset of the step running now */
    size_t                    high;         /* the largest offset any step reached since the block was sized */
    glm53_workspace_overflow *overflow;     /* live overflow pieces, in offset order */
    int32_t                   n_overflow, cap_overflow;
    bool                      grew;         /* a step overflowed: begin reallocates the block */
    bool                      frozen;       /* capturing: no allocation allowed */
    uint64_t                  generation;   /* bumped each time the block is (re)allocated */
};

/* A workspace on `be` with an initial block of `bytes` (0: none until the first step needs one). */
glm53_status glm53_workspace_init(glm53_workspace *ws, glm53_backend *be, size_t bytes);
/* Frees the block and any overflow piece. */
void         glm53_workspace_free(glm53_workspace *ws);
/* Starts a step: offset 0, overflow gone; if the last steps overflowed, the block is reallocated to their
 * high-water mark (the only time a workspace allocates once it has seen the largest step shape). */
glm53_status glm53_workspace_begin(glm53_workspace *ws);
/* `bytes` of scratch (aligned), valid until a reset to a mark taken before this call. */
glm53_status glm53_workspace_take(glm53_workspace *ws, size_t bytes, void **out, const char *what);
static inline size_t glm53_workspace_mark(const glm53_workspace *ws) { return ws->offset; }
/* Gives back everything taken after `mark`. */
void         glm53_workspace_reset(glm53_workspace *ws, size_t mark);

#ifdef __cplusplus
}
#endif

#endif /* GLM53_WORKSPACE_H */
