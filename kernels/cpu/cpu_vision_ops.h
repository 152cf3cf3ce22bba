/*
 * cpu_vision_ops.h - private to the CPU backend: entry points of the vision ops (ops_vision.c). Shapes and
 * semantics are those of the "Vision ops" section of kernels/backend.h.
 */
#ifndef GLM53_CPU_VISION_OPS_H
#define GLM53_CPU_VISION_OPS_H

#include "cpu_ops.h"

glm53_status cpu_rope_2d(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *pos,
                         float theta);
glm53_status cpu_attention_segments(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                    const glm53_tensor *v, const glm53_tensor *cu_seqlens, float scale);

#endif /* GLM53_CPU_VISION_OPS_H */
