/*
 * cuda_backend.h - what the CUDA backend offers beyond the op table of backend.h, for its own tests and
 * benchmark harnesses (tests/cuda, kernels/cuda/bench). Plain C, so a C test can include it without CUDA headers.
 */
#ifndef GLM53_CUDA_BACKEND_H
#define GLM53_CUDA_BACKEND_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cudaStream_t (as void *) every op of this CUDA backend is enqueued on: timing harnesses record their
 * cudaEvents on it. */
void *glm53_cuda_backend_stream(glm53_backend *be);

#ifdef __cplusplus
}
#endif

#endif /* GLM53_CUDA_BACKEND_H */
