/*
 * ops_linear.cu - matmul y[M,N] = x[M,K] * w[N,K]^T on the CUDA backend.
 *
 * Three paths, chosen by dtypes and M:
 *   1. FP8 weight and M <= FP8_GEMV_MAX_M (decode, speculative verification): fp8_gemv_kernel reads the FP8
 *      codes directly (one byte per weight, the least memory traffic), dequantises each with its block scale in
 *      F32 and accumulates in F32. One warp per output column.
 *   2. BF16 activation with a BF16 or FP8 weight: cuBLAS BF16 GEMM with F32 accumulation (CUBLAS_COMPUTE_32F),
 *      output BF16 or F32 straight from cuBLAS. An FP8 weight is first dequantised to BF16 into a scratch buffer
 *      (one rounding of code * scale, as HF's "dequantise then BF16 GEMM").
 *   3. Everything else (an F32 activation, or an F32 / F16 weight): plain F32 GEMM (CUBLAS_COMPUTE_32F, never
 *      TF32). Operands not already F32 are converted into scratch exactly (BF16, F16 and FP8*scale are all
 *      exact in F32), and a BF16 output goes through an F32 scratch. This is the path of the F32 router and of
 *      anything the caller wants in full precision, and it matches the CPU backend to F32 rounding.
 *
 * cuBLAS is column-major: y^T[N,M] = w[N,K] * x^T[K,M], i.e. C = op(A) * B with A = w seen as a K x N column-
 * major matrix (lda K) transposed, B = x seen as K x M (ldb K), C = y seen as N x M (ldc N).
 *
 * Not here yet: cuBLASLt's FP8 GEMM with 128x128 block scales (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
 * for the weight, VEC128_32F for the activation) needs the activation quantised to FP8 per 1x128 group, a
 * different precision contract (lmdeploy's); it belongs to the performance issue, behind a capability check.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <climits>

enum { FP8_GEMV_MAX_M = 16, FP8_GEMV_THREADS = 256 };

/* ------------------------------------------------------------------------------------------------------------
 * Kernels
 */
/* out[rows, cols] = w (any weight dtype, dequantised), stored as F32 or BF16. */
__global__ void dequantize_kernel(act_out out, weight_ref w, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out.store(i, w.at(i / cols, i % cols));
}

/* y[M,N] = x[M,K] * w[N,K]^T for an FP8 w, M <= MAX_M. Warp `n` owns output column n: its lanes walk row n of w
 * (16 codes = one 16-byte load per lane per step when rows are 16-byte aligned, else one code per lane) and keep
 * one F32 partial sum per x row; a warp reduction finishes each. */
template <int MAX_M>
__global__ void __launch_bounds__(FP8_GEMV_THREADS)
fp8_gemv_kernel(act_out y, act_in x, weight_ref w, int M, int64_t N, int64_t K, bool vec16) {
    int64_t n = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (n >= N) return;   /* the whole warp leaves together: no reduction is skipped by half a warp */
    const uint8_t *wrow = (const uint8_t *)w.data + n * K;
    const float *srow = w.scale ? w.scale + (n / w.block_rows) * w.scale_stride : nullptr;

    float acc[MAX_M];
#pragma unroll
    for (int m = 0; m < MAX_M; m++) acc[m] = 0.0f;

    if (vec16) {
        for (int64_t k0 = (int64_t)lane * 16; k0 < K; k0 += 32 * 16) {
            uint4 packed = *reinterpret_cast<const uint4 *>(wrow + k0);
            uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
            float wv[16];
#pragma unroll
            for (int j = 0; j < 16; j++) wv[j] = cuda_fp8_e4m3_to_float((uint8_t)(words[j / 4] >> (8 * (j % 4))));
            if (srow) {
                int64_t b0 = k0 / w.block_cols, b1 = (k0 + 15) / w.block_cols;
                if (b0 == b1) {
                    float s = srow[b0];
#pragma unroll
                    for (int j = 0; j < 16; j++) wv[j] *= s;
                } else {
#pragma unroll
                    for (int j = 0; j < 16; j++) wv[j] *= srow[(k0 + j) / w.block_cols];
                }
            }
#pragma unroll
            for (int m = 0; m < MAX_M; m++) {
                if (m < M) {
                    float part = 0.0f;
#pragma unroll
                    for (int j = 0; j < 16; j++) part += x[(int64_t)m * K + k0 + j] * wv[j];
                    acc[m] += part;
                }
            }
        }
    } else {
        for (int64_t k = lane; k < K; k += 32) {
            float wv = cuda_fp8_e4m3_to_float(wrow[k]);
            if (srow) wv *= srow[k / w.block_cols];
#pragma unroll
            for (int m = 0; m < MAX_M; m++)
                if (m < M) acc[m] += x[(int64_t)m * K + k] * wv;
        }
    }

#pragma unroll
    for (int m = 0; m < MAX_M; m++) {
        if (m < M) {
            float s = cuda_warp_sum(acc[m]);
            if (lane == 0) y.store((int64_t)m * N + n, s);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Host side
 */
/* Dequantises (or converts) the whole weight into `dst_dtype` (F32 or BF16) scratch. */
static glm53_status dequantize_weight(cuda_backend *cb, cuda_scratch *dst, const weight_ref &w, int64_t rows,
                                      int64_t cols, int32_t dst_dtype) {
    size_t bytes = (size_t)(rows * cols) * glm53_dtype_size((glm53_dtype)dst_dtype);
    GLM53_TRY(dst->get(cb, bytes, "matmul weight scratch"));
    act_out out{dst->ptr, dst_dtype == GLM53_BF16};
    dequantize_kernel<<<cuda_blocks_for(rows * cols, 256), 256, 0, cb->stream>>>(out, w, rows, cols);
    CUDA_LAUNCHED("matmul (dequantise weight)");
    return GLM53_OK;
}

static glm53_status gemm(cuda_backend *cb, int64_t M, int64_t N, int64_t K, const void *w, cudaDataType w_type,
                         const void *x, cudaDataType x_type, void *y, cudaDataType y_type) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, w, w_type, (int)K, x,
                            x_type, (int)K, &zero, y, y_type, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return GLM53_OK;
}

glm53_status cuda_matmul(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(x) && cuda_is_act(y) && y->data != x->data);
    assert(w->ndim == 2);
    int64_t M = glm53_tensor_rows(x), K = cuda_cols(x), N = w->shape[0];
    assert(w->shape[1] == K && glm53_tensor_rows(y) == M && cuda_cols(y) == N);
    assert(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && K > 0);
    weight_ref wr;
    GLM53_TRY(cuda_weight_ref(w, &wr, "matmul"));
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || N == 0) return GLM53_OK;

    if (w->dtype == GLM53_F8_E4M3 && M <= FP8_GEMV_MAX_M) {
        bool vec16 = K % 16 == 0 && (uintptr_t)w->data % 16 == 0;
        int warps = FP8_GEMV_THREADS / 32;
        unsigned blocks = (unsigned)((N + warps - 1) / warps);
        fp8_gemv_kernel<FP8_GEMV_MAX_M><<<blocks, FP8_GEMV_THREADS, 0, cb->stream>>>(
            cuda_act_out(y), cuda_act_in(x), wr, (int)M, N, K, vec16);
        CUDA_LAUNCHED("matmul (fp8 gemv)");
        return GLM53_OK;
    }

    bool bf16_path = x->dtype == GLM53_BF16 && (w->dtype == GLM53_BF16 || w->dtype == GLM53_F8_E4M3);
    if (bf16_path) {
        cuda_scratch w_bf16;
        const void *a = w->data;
        if (w->dtype != GLM53_BF16) {
            GLM53_TRY(dequantize_weight(cb, &w_bf16, wr, N, K, GLM53_BF16));
            a = w_bf16.ptr;
        }
        cudaDataType y_type = y->dtype == GLM53_BF16 ? CUDA_R_16BF : CUDA_R_32F;
        return gemm(cb, M, N, K, a, CUDA_R_16BF, x->data, CUDA_R_16BF, y->data, y_type);
    }

    /* F32 path */
    cuda_scratch w_f32, x_f32, y_f32;
    const void *a = w->data, *b = x->data;
    void *c = y->data;
    if (w->dtype != GLM53_F32) {
        GLM53_TRY(dequantize_weight(cb, &w_f32, wr, N, K, GLM53_F32));
        a = w_f32.ptr;
    }
    if (x->dtype != GLM53_F32) {
        GLM53_TRY(x_f32.get(cb, (size_t)(M * K) * sizeof(float), "matmul activation scratch"));
        GLM53_TRY(cuda_convert(cb, act_out{x_f32.ptr, false}, cuda_act_in(x), M * K));
        b = x_f32.ptr;
    }
    if (y->dtype != GLM53_F32) {
        GLM53_TRY(y_f32.get(cb, (size_t)(M * N) * sizeof(float), "matmul output scratch"));
        c = y_f32.ptr;
    }
    GLM53_TRY(gemm(cb, M, N, K, a, CUDA_R_32F, b, CUDA_R_32F, c, CUDA_R_32F));
    if (c != y->data) GLM53_TRY(cuda_convert(cb, cuda_act_out(y), act_in{c, false}, M * N));
    return GLM53_OK;
}
