/*
 * backend_cuda_stub.c - glm53_backend_cuda_create for a library built without the CUDA backend.
 */
#include "kernels/backend.h"

#ifndef GLM53_WITH_CUDA
glm53_status glm53_backend_cuda_create(int32_t device_ordinal, glm53_backend **out) {
    (void)device_ordinal;
    if (out) *out = NULL;
    return GLM53_FAIL(GLM53_ERR_BACKEND, "this libglm53 was built without the CUDA backend (no nvcc at build time)");
}
#endif
