/*
 * linear.cu - matmul y[M,N] = x[M,K] * w[N,K]^T on the CUDA backend, and the fused dense SwiGLU.
 *
 * Paths, chosen by dtypes and M:
 *   0. BF16 activation, FP8 or BF16 weight and M <= 16 (decode, speculative verification, small batches): the
 *      tensor-core GEMV (gemv_mma.cuh) reads the weights as stored (one byte per FP8 weight, converted exactly to
 *      BF16) and lets mma.sync do the products with F32 sums, each FP8 64-column group times its block scale. A
 *      row gives the same bits at any M <= 16 (batch invariant), which exact greedy speculative decoding needs:
 *      cuBLAS, which BF16 weights took before at every M, gave the trained tiny model's MTP verification rows
 *      other bits than its decode rows (a greedy continuation changed). kernels/cuda/bench/gemv.cu times it
 *      against the other versions and cuBLAS. With GLM53_CUDA_GEMV_STREAM on (docs/cuda.md), an x that fits
 *      shared memory whole takes the streaming form (a block per run of tiles, the same bits), and matmul_multi
 *      puts several weights of one x into one such launch.
 *   1. FP8 weight and M <= GEMV_MAX_M otherwise (F32 activations): gemv_kernel reads the FP8 codes directly,
 *      dequantises each with its block scale in F32 and accumulates in F32. One warp per output column
 *      (gemv.cuh).
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
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/gemv_mma.cuh"

#include <climits>

enum { GEMV_MAX_M = 16, GEMV_THREADS = 256 };

/* ------------------------------------------------------------------------------------------------------------
 * Kernels
 */
/* out[rows, cols] = w (any weight dtype, dequantised), stored as F32 or BF16. */
__global__ void dequantize_kernel(act_out out, weight_ref w, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out.store(i, w.at(i / cols, i % cols));
}

/* dequantize_kernel's 16-byte form for FP8 weights whose rows are whole 16-byte pieces within one scale block
 * (dequantize_fp8x16_fits): grid (ceil(cols / 16 / DEQUANT_THREADS), rows up to 65535, the rest strided), a thread
 * takes 16 consecutive codes of a row, one scale and one 64-bit row offset for them. Each element is w.at's value
 * (the code's exact float times the scale, or the code alone without a scale tensor), stored with act_out's
 * rounding: the same bits. The flat form spent its time on two 64-bit divisions an element (290 us for a 12288 x
 * 4096 weight on the H100, six times its bytes). */
enum { DEQUANT_THREADS = 128 };
__global__ void __launch_bounds__(DEQUANT_THREADS)
dequantize_fp8x16_kernel(act_out out, weight_ref w, int64_t rows, int64_t cols) {
    const int64_t c0 = ((int64_t)blockIdx.x * DEQUANT_THREADS + threadIdx.x) * 16;
    if (c0 >= cols) return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const uint4 raw = *reinterpret_cast<const uint4 *>((const uint8_t *)w.data + r * w.cols + c0);
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
        const float scale = w.scale ? w.scale[(r / w.block_rows) * w.scale_stride + c0 / w.block_cols] : 0.0f;
        float v[16];
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const float code = cuda_fp8_e4m3_to_float((uint8_t)(words[e / 4] >> (8 * (e % 4))));
            v[e] = w.scale ? code * scale : code;
        }
        if (out.bf16) {
            uint4 *to = reinterpret_cast<uint4 *>((__nv_bfloat16 *)out.data + r * cols + c0);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float piece[8];
#pragma unroll
                for (int e = 0; e < 8; e++) piece[e] = v[8 * h + e];
                to[h] = cuda_float8_to_bf16x8(piece);
            }
        } else {
            float4 *to = reinterpret_cast<float4 *>((float *)out.data + r * cols + c0);
#pragma unroll
            for (int h = 0; h < 4; h++) to[h] = make_float4(v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]);
        }
    }
}

/* Whether dequantize_fp8x16_kernel takes w: FP8, rows of whole 16-byte pieces, 16-byte aligned, and (with a scale)
 * scale blocks of whole pieces. */
static bool dequantize_fp8x16_fits(const weight_ref &w, int64_t cols) {
    return w.dtype == GLM53_F8_E4M3 && cols % 16 == 0 && w.cols % 16 == 0 && (uintptr_t)w.data % 16 == 0 &&
           (!w.scale || (w.block_cols % 16 == 0 && w.block_rows > 0));
}

/* y[M,N] = x[M,K] * w[N,K]^T for M <= MAX_M. Warp `n` owns output column n (gemv.cuh has the lane order). */
template <int MAX_M>
__global__ void __launch_bounds__(GEMV_THREADS)
gemv_kernel(act_out y, act_in x, weight_ref w, int M, int64_t N, int64_t K, bool vec16) {
    int64_t n = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (n >= N) return;   /* the whole warp leaves together: no reduction is skipped by half a warp */
    float acc[MAX_M];
#pragma unroll
    for (int m = 0; m < MAX_M; m++) acc[m] = 0.0f;
    gemv_lane_partials<MAX_M>(acc, w, n, x, 0, M, K, vec16, lane);
#pragma unroll
    for (int m = 0; m < MAX_M; m++) {
        if (m < M) {
            float s = cuda_warp_sum(acc[m]);
            if (lane == 0) y.store((int64_t)m * N + n, s);
        }
    }
}

/* y[M,F] = swiglu(x * wg^T, x * wu^T) for M <= MAX_M: warp f computes column f of both products for every row,
 * rounds each to y's dtype (as the generic chain stores them) and writes the SwiGLU. */
template <int MAX_M>
__global__ void __launch_bounds__(GEMV_THREADS)
swiglu_gate_up_kernel(act_out y, act_in x, weight_ref wg, weight_ref wu, int M, int64_t F, int64_t K, bool vec16_g,
                      bool vec16_u, float limit) {
    int64_t f = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (f >= F) return;
    float acc_g[MAX_M], acc_u[MAX_M];
#pragma unroll
    for (int m = 0; m < MAX_M; m++) acc_g[m] = acc_u[m] = 0.0f;
    gemv_lane_partials<MAX_M>(acc_g, wg, f, x, 0, M, K, vec16_g, lane);
    gemv_lane_partials<MAX_M>(acc_u, wu, f, x, 0, M, K, vec16_u, lane);
#pragma unroll
    for (int m = 0; m < MAX_M; m++) {
        if (m < M) {
            float g = round_as_act(cuda_warp_sum(acc_g[m]), y.bf16), u = round_as_act(cuda_warp_sum(acc_u[m]), y.bf16);
            if (lane == 0) y.store((int64_t)m * F + f, cuda_swiglu_value(g, u, limit));
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Host side
 */
glm53_status cuda_dequantize_weight(cuda_backend *cb, cuda_scratch *dst, const weight_ref &w, int64_t rows,
                                    int64_t cols, int32_t dst_dtype) {
    size_t bytes = (size_t)(rows * cols) * glm53_dtype_size((glm53_dtype)dst_dtype);
    GLM53_TRY(dst->get(cb, bytes, "dequantised weight scratch"));
    act_out out{dst->ptr, dst_dtype == GLM53_BF16};
    if (rows > 0 && dequantize_fp8x16_fits(w, cols)) {
        const int64_t pieces = cols / 16;
        const dim3 grid((unsigned)((pieces + DEQUANT_THREADS - 1) / DEQUANT_THREADS),
                        (unsigned)(rows < 65535 ? rows : 65535));
        dequantize_fp8x16_kernel<<<grid, DEQUANT_THREADS, 0, cb->stream>>>(out, w, rows, cols);
        CUDA_LAUNCHED("dequantise weight");
        return GLM53_OK;
    }
    dequantize_kernel<<<cuda_blocks_for(rows * cols, 256), 256, 0, cb->stream>>>(out, w, rows, cols);
    CUDA_LAUNCHED("dequantise weight");
    return GLM53_OK;
}

/* The tensor-core GEMV (gemv_mma.cuh) for M <= 16, R n-tiles per warp and U k-groups per step, from bench_gemv on
 * the H100 (docs/performance.md): up to 4 rows, R = 2 (U = 2), and for few weight rows (N <= GEMV_MMA_FEW_ROWS)
 * R = 1 with U = 8, because a block per 16 rows then leaves most multiprocessors idle and each busy one waits a
 * round trip per two groups (the 128 x 4096 BF16 KDA gate projections: 12.2 -> 8.1 us; 2048 x 4096 FP8 at
 * 4 rows: 10.6 -> 8.7 us); above 4 rows R = 4 (x fragments shared by more weight rows: 16 x 12288 x 4096 FP8
 * 95 -> 68 us), R = 2 for few weight rows (2048 x 4096 FP8 at 16 rows: R = 1 U = 8 26.6 us, R = 2 17.3,
 * R = 4 23.4). Neither R nor U changes any row's arithmetic (gemv_mma.cuh). */
enum { GEMV_MMA_FEW_ROWS = 2048 };

template <int R, int U>
static glm53_status gemv_mma_launch(cuda_backend *cb, act_out y, const __nv_bfloat16 *x, const weight_ref &w, int M,
                                    int N, int K) {
    const bool fp8 = w.dtype == GLM53_F8_E4M3;
    const void *kernel = fp8 ? (const void *)gemv_mma_kernel<true, R, U> : (const void *)gemv_mma_kernel<false, R, U>;
    const int slab = gemv_mma_slab(M, K);
    size_t smem = gemv_mma_smem(M, R, slab);
    GLM53_TRY(cuda_smem_optin(cb, kernel, smem, "matmul (mma gemv)"));
    unsigned blocks = (unsigned)((N + 8 * R - 1) / (8 * R));
    if (fp8) gemv_mma_kernel<true, R, U><<<blocks, GEMV_MMA_THREADS, smem, cb->stream>>>(y, x, w, M, N, K, slab);
    else gemv_mma_kernel<false, R, U><<<blocks, GEMV_MMA_THREADS, smem, cb->stream>>>(y, x, w, M, N, K, slab);
    CUDA_LAUNCHED("matmul (mma gemv)");
    return GLM53_OK;
}

/* The streaming kernel over segs (gemv_mma.cuh): tiles numbered segment after segment, on gemv_mma_stream_grid. */
template <bool FP8, int R, int U>
static glm53_status gemv_mma_stream_launch(cuda_backend *cb, gemv_mma_segments &segs, const __nv_bfloat16 *x, int M,
                                           int K) {
    auto kernel_fn = gemv_mma_stream_kernel<FP8, R, U>;
    if constexpr (FP8)
        if (cb->fp8_occupancy) kernel_fn = gemv_mma_stream_kernel_occupancy<FP8, R, U>;
    const void *kernel = (const void *)kernel_fn;
    const size_t smem = gemv_mma_stream_smem(M, R, K);
    GLM53_TRY(cuda_smem_optin(cb, kernel, smem, "matmul (mma stream)"));
    segs.tiles = 0;
    for (int s = 0; s < segs.n; s++) {
        segs.seg[s].first_tile = segs.tiles;
        segs.tiles += (segs.seg[s].n_rows + 8 * R - 1) / (8 * R);
    }
    if (segs.tiles == 0) return GLM53_OK;
    unsigned blocks;
    int per_block;
    GLM53_TRY(gemv_mma_stream_grid(cb, kernel, smem, segs.tiles, &blocks, &per_block));
    CUDA_TRY(cuda_launch(cb, kernel_fn, blocks, GEMV_MMA_THREADS, smem, cb->pdl, segs, x, M, K, per_block));
    CUDA_LAUNCHED("matmul (mma stream)");
    return GLM53_OK;
}

/* R and U by M and the weight rows N (the rule above; the streaming kernel takes the same). */
#define GEMV_MMA_DISPATCH(M, N, CALL)                                                                        \
    ((M) <= 4 ? ((N) <= GEMV_MMA_FEW_ROWS ? CALL(1, 8) : CALL(2, 2))                                          \
              : ((N) <= GEMV_MMA_FEW_ROWS ? CALL(2, 2) : CALL(4, 2)))

/* Whether x [M, K] fits the streaming kernel's shared memory whole. */
static bool gemv_mma_streams(const cuda_backend *cb, int M, int K) {
    return cb->gemv_stream && (int64_t)M * (K + GEMV_MMA_PAD) * 2 <= GEMV_MMA_X_BUDGET;
}

/* y_s = x w_s^T over the segments on the streaming kernel; every weight FP8 (fp8) or every one BF16. */
static glm53_status gemv_mma_segments_run(cuda_backend *cb, gemv_mma_segments &segs, bool fp8,
                                          const __nv_bfloat16 *x, int M, int K) {
    int rows = 0;
    for (int s = 0; s < segs.n; s++) rows += segs.seg[s].n_rows;
#define GEMV_MMA_STREAM_CALL(R_, U_)                                                                          \
    (fp8 ? gemv_mma_stream_launch<true, R_, U_>(cb, segs, x, M, K)                                              \
         : gemv_mma_stream_launch<false, R_, U_>(cb, segs, x, M, K))
    return GEMV_MMA_DISPATCH(M, rows, GEMV_MMA_STREAM_CALL);
#undef GEMV_MMA_STREAM_CALL
}

static glm53_status gemv_mma(cuda_backend *cb, act_out y, const __nv_bfloat16 *x, const weight_ref &w, int M, int N,
                             int K) {
    if (gemv_mma_streams(cb, M, K)) {
        gemv_mma_segments segs = {};
        segs.n = 1;
        segs.seg[0] = {w, y, N, 0};
        return gemv_mma_segments_run(cb, segs, w.dtype == GLM53_F8_E4M3, x, M, K);
    }
#define GEMV_MMA_BLOCK_CALL(R_, U_) gemv_mma_launch<R_, U_>(cb, y, x, w, M, N, K)
    return GEMV_MMA_DISPATCH(M, N, GEMV_MMA_BLOCK_CALL);
#undef GEMV_MMA_BLOCK_CALL
}

static glm53_status gemm(cuda_backend *cb, int64_t M, int64_t N, int64_t K, const void *w, cudaDataType w_type,
                         const void *x, cudaDataType x_type, void *y, cudaDataType y_type) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, w, w_type, (int)K, x,
                            x_type, (int)K, &zero, y, y_type, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (cb->profile) cuda_profile_mark(cb, "matmul (cublas)");
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
    if (cb->profile)
        snprintf(cb->profile_detail, sizeof cb->profile_detail, " %lldx%lldx%lld %s", (long long)M, (long long)N,
                 (long long)K, glm53_dtype_name((glm53_dtype)w->dtype));

    if (x->dtype == GLM53_BF16 && gemv_mma_fits(wr, M, K, x->data))
        return gemv_mma(cb, cuda_act_out(y), (const __nv_bfloat16 *)x->data, wr, (int)M, (int)N, (int)K);

    if (w->dtype == GLM53_F8_E4M3 && M <= GEMV_MAX_M) {
        int warps = GEMV_THREADS / 32;
        unsigned blocks = (unsigned)((N + warps - 1) / warps);
        GEMV_DISPATCH_M(M, (gemv_kernel<MAX_M_><<<blocks, GEMV_THREADS, 0, cb->stream>>>(
                               cuda_act_out(y), cuda_act_in(x), wr, (int)M, N, K, gemv_vec16(wr, K))));
        CUDA_LAUNCHED("matmul (fp8 gemv)");
        return GLM53_OK;
    }

    bool bf16_path = x->dtype == GLM53_BF16 && (w->dtype == GLM53_BF16 || w->dtype == GLM53_F8_E4M3);
    if (bf16_path) {
        cuda_scratch w_bf16;
        const void *a = w->data;
        if (w->dtype != GLM53_BF16) {
            GLM53_TRY(cuda_dequantize_weight(cb, &w_bf16, wr, N, K, GLM53_BF16));
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
        GLM53_TRY(cuda_dequantize_weight(cb, &w_f32, wr, N, K, GLM53_F32));
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

/* matmul_multi (backend.h): the weights that suit the streaming tensor-core GEMV as segments of one launch per
 * weight kind (FP8, BF16), the rest through matmul. Each y[i] gets matmul's bits: a tile's arithmetic does not
 * depend on the tiles around it. */
glm53_status cuda_matmul_multi(glm53_backend *be, glm53_tensor *const *y, const glm53_tensor *x,
                               const glm53_tensor *const *w, int32_t n) {
    cuda_backend *cb = cuda_impl(be);
    assert(n >= 0 && n <= GEMV_MMA_MAX_SEGMENTS && cuda_is_act(x));
    const int64_t M = glm53_tensor_rows(x), K = cuda_cols(x);
    gemv_mma_segments segs[2] = {};   /* BF16 weights, FP8 weights */
    bool streamed[GEMV_MMA_MAX_SEGMENTS] = {false};
    const bool streams = x->dtype == GLM53_BF16 && M >= 1 && M <= GEMV_MMA_MAX_M && K <= INT_MAX &&
                         gemv_mma_streams(cb, (int)M, (int)K);
    if (streams) {
        for (int32_t i = 0; i < n; i++) {
            weight_ref wr;
            assert(w[i]->ndim == 2 && w[i]->shape[1] == K && glm53_tensor_rows(y[i]) == M &&
                   cuda_cols(y[i]) == w[i]->shape[0]);
            GLM53_TRY(cuda_weight_ref(w[i], &wr, "matmul_multi"));
            if (!gemv_mma_fits(wr, M, K, x->data) || !cuda_is_act(y[i]) || w[i]->shape[0] > INT_MAX) continue;
            gemv_mma_segments &sg = segs[wr.dtype == GLM53_F8_E4M3];
            sg.seg[sg.n++] = {wr, cuda_act_out(y[i]), (int)w[i]->shape[0], 0};
            streamed[i] = true;
        }
    }
    GLM53_TRY(cuda_enter(cb));
    for (int kind = 0; kind < 2; kind++) {
        if (segs[kind].n == 0) continue;
        if (cb->profile)
            snprintf(cb->profile_detail, sizeof cb->profile_detail, " %lldx%lld %d weights %s", (long long)M,
                     (long long)K, segs[kind].n, kind ? "F8_E4M3" : "BF16");
        GLM53_TRY(gemv_mma_segments_run(cb, segs[kind], kind == 1, (const __nv_bfloat16 *)x->data, (int)M, (int)K));
    }
    for (int32_t i = 0; i < n; i++)
        if (!streamed[i]) GLM53_TRY(cuda_matmul(be, y[i], x, w[i]));
    return GLM53_OK;
}

/* The fused dense SwiGLU (backend.h swiglu_gate_up): one CUDA-core GEMV kernel for decode-sized M with F32
 * activations, else the generic chain (two matmuls into workspace scratch, rounded to y's dtype as the fused
 * kernel rounds them, then swiglu): past the GEMV rows, and for BF16 activations, where the matmuls take the
 * tensor-core GEMV (at M = 1 two of its launches beat the fused CUDA-core kernel, 2 x 22 us against 60 us for
 * 12288 x 4096 FP8 on the H200, and they stay batch invariant). */
glm53_status cuda_swiglu_gate_up(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w_gate,
                                 const glm53_tensor *w_up, float limit) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(x) && cuda_is_act(y) && w_gate->ndim == 2 && w_up->ndim == 2);
    int64_t M = glm53_tensor_rows(x), K = cuda_cols(x), F = w_gate->shape[0];
    assert(w_gate->shape[1] == K && w_up->shape[0] == F && w_up->shape[1] == K);
    assert(glm53_tensor_rows(y) == M && cuda_cols(y) == F && M <= INT_MAX);
    weight_ref gr, ur;
    GLM53_TRY(cuda_weight_ref(w_gate, &gr, "swiglu_gate_up"));
    GLM53_TRY(cuda_weight_ref(w_up, &ur, "swiglu_gate_up"));
    bool mma = x->dtype == GLM53_BF16 && gemv_mma_fits(gr, M, K, x->data) && gemv_mma_fits(ur, M, K, x->data);
    if (M > GEMV_MAX_M || mma) {
        size_t bytes = (size_t)(M * F) * glm53_dtype_size((glm53_dtype)y->dtype);
        cuda_scratch gate_buf, up_buf;
        GLM53_TRY(gate_buf.get(cb, bytes, "swiglu_gate_up gate"));
        GLM53_TRY(up_buf.get(cb, bytes, "swiglu_gate_up up"));
        glm53_tensor gate = cuda_view_2d(gate_buf.ptr, y->dtype, M, F), up = cuda_view_2d(up_buf.ptr, y->dtype, M, F);
        glm53_tensor *outs[2] = {&gate, &up};
        const glm53_tensor *ws[2] = {w_gate, w_up};
        GLM53_TRY(cuda_matmul_multi(be, outs, x, ws, 2));
        return cuda_swiglu(be, y, &gate, &up, limit);
    }
    GLM53_TRY(cuda_enter(cb));
    if (M == 0 || F == 0) return GLM53_OK;
    int warps = GEMV_THREADS / 32;
    unsigned blocks = (unsigned)((F + warps - 1) / warps);
    GEMV_DISPATCH_M(M, (swiglu_gate_up_kernel<MAX_M_><<<blocks, GEMV_THREADS, 0, cb->stream>>>(
                           cuda_act_out(y), cuda_act_in(x), gr, ur, (int)M, F, K, gemv_vec16(gr, K), gemv_vec16(ur, K),
                           limit)));
    CUDA_LAUNCHED("swiglu_gate_up");
    return GLM53_OK;
}
