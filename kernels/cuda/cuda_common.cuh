/*
 * cuda_common.cuh - private to the CUDA backend: its state, error macros, the typed views kernels read tensors
 * through, block reductions, and the entry points of every op (implemented one family per .cu file).
 *
 * Data types. Activations on this backend are BF16 (be->act_dtype) or F32 where an op's contract says F32, and
 * every op that takes an activation accepts either. Kernels read activations through act_in / act_out, which
 * carry the dtype as a flag: the branch is the same for every thread of a launch, so it costs next to nothing
 * in these memory-bound kernels, and one kernel body serves all dtype combinations. Weights (and 1-D
 * parameters such as norm weights) are read through weight_ref: F32, BF16, F16, or F8_E4M3 with an optional
 * F32 block scale. All arithmetic is F32; an output is rounded once, when it is stored.
 *
 * Errors. Every CUDA / cuBLAS call goes through CUDA_TRY / CUBLAS_TRY, every launch is followed by
 * CUDA_LAUNCHED; each turns a failure into GLM53_FAIL(GLM53_ERR_BACKEND, ...) naming the call site. Kernels that
 * meet an out-of-range index cannot return, so they record it in the backend's fault record
 * (cuda_record_fault); sync and download report it as GLM53_ERR_OUT_OF_RANGE.
 */
#ifndef GLM53_CUDA_COMMON_CUH
#define GLM53_CUDA_COMMON_CUH

#include "kernels/backend.h"
#include "kernels/workspace.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cassert>
#include <cstdint>

/* ------------------------------------------------------------------------------------------------------------
 * Backend state
 */
struct cuda_allocator;   /* the caching allocator, cuda_backend.cu */
struct cuda_profile;     /* per-kernel timing between profile_start and profile_report, cuda_backend.cu */

/* Which op recorded a fault (cuda_fault.op); 0 = none. */
enum cuda_fault_op {
    CUDA_FAULT_NONE = 0,
    CUDA_FAULT_GATHER_ROWS = 1,
    CUDA_FAULT_SCATTER_ROWS = 2,
    CUDA_FAULT_SPARSE_MLA = 3,
    CUDA_FAULT_KPOOL_SELECT = 4,
    CUDA_FAULT_MOE_EXPERTS = 5,
};

/* The first out-of-range index a kernel met since the last sync: index `value` at `position` of its input,
 * outside [0, limit). Lives in device memory; the first kernel to claim `op` writes the rest. */
struct cuda_fault {
    int32_t op;
    int32_t unused;
    long long position, value, limit;
};

struct cuda_backend {
    glm53_backend  *be;                 /* the instance this state belongs to (its workspace, its stream) */
    int32_t         device;             /* CUDA ordinal */
    cudaStream_t    stream;             /* every op of this backend runs on it, in order */
    cublasHandle_t  cublas;             /* bound to stream */
    void           *cublas_workspace;   /* given to cuBLAS once, so it never allocates on its own */
    cuda_allocator *allocator;
    cuda_fault     *fault;              /* device */
    cuda_fault     *fault_host;         /* pinned, read back by sync / download */
    int32_t         smem_optin;         /* most dynamic shared memory one block may opt in to, bytes */
    bool            capturing;          /* between capture_begin and capture_end */
    struct { const void *kernel; size_t bytes; } smem_opted[32];   /* kernels already opted in, and how far */
    int32_t         n_smem_opted;
    glm53_backend_counters counters;    /* cudaMallocs and host waits since creation (the test hook) */
    cuda_profile   *profile;            /* non-NULL while timing kernels (profile_start) */
    char            profile_detail[48]; /* appended to the next labels (a matmul's M x N x K), "" for none */
    int32_t         sm_count;           /* multiprocessors of the device */
    struct { const void *kernel; size_t smem; int32_t threads, blocks; } occupancy[32];   /* cuda_blocks_per_sm's */
    int32_t         n_occupancy;
    /* The performance switches (cuda_backend.cu reads them at creation; docs/cuda.md): */
    bool            gemv_stream;        /* the streaming tensor-core GEMV, GLM53_CUDA_GEMV_STREAM */
    bool            pdl;                /* programmatic dependent launch where a kernel supports it, GLM53_CUDA_PDL */
    bool            kda_sequences;      /* the fused KDA op, GLM53_CUDA_KDA_SEQUENCES (off: the op-by-op chain) */
    bool            grouped_experts;    /* prefill experts grouped on the device, GLM53_CUDA_GROUPED_EXPERTS */
    bool            grouped_wgmma;      /* their GEMM on wgmma where the experts fit, GLM53_CUDA_GROUPED_WGMMA */
    bool            mhc_site;           /* the fused mHC site op, GLM53_CUDA_MHC_SITE (off: the op chain) */
    bool            fp8_occupancy;      /* FP8 GEMVs for 3 blocks a multiprocessor, GLM53_CUDA_FP8_OCCUPANCY */
    bool            kda_chunked;        /* the chunked KDA recurrence for prefill, GLM53_CUDA_KDA_CHUNKED */
    bool            grouped_folded;     /* the wgmma tile with the block scales folded into the codes, GLM53_CUDA_GROUPED_FOLDED */
    bool            kpool_mma;          /* kpool_score's many-rows form on tensor cores, GLM53_CUDA_KPOOL_MMA */
    bool            kda_intra_mma;      /* the chunked KDA's intra kernel on tensor cores, GLM53_CUDA_KDA_INTRA_MMA */
    bool            kda_rows;           /* kda_gate and rmsnorm_gated in their many-rows forms, GLM53_CUDA_KDA_ROWS */
    bool            mla_flash16;        /* sparse MLA's flash form on 16 warps a block, GLM53_CUDA_MLA_FLASH16 */
    bool            kda_conv_async;     /* kda_sequences' conv prep loading its rows by cp.async, GLM53_CUDA_KDA_CONV_ASYNC */
    int64_t         kda_chunk_piece;    /* its scratch a piece, chunk-heads: GLM53_CUDA_KDA_CHUNK_PIECE (default 4096) */
    int64_t         mhc_piece;          /* mhc_site's prefill rows a launch pair: GLM53_CUDA_MHC_PIECE (default 2048) */
    unsigned       *mhc_tickets;        /* device [CUDA_MHC_TICKET_ROWS], zero between mhc_site launches */
    glm53_backend_ops ops;              /* this instance's op table: cuda_ops less the fused ops switched off */
};
enum { CUDA_MHC_TICKET_ROWS = 65536 };   /* rows one mhc_site launch takes (mhc.cu) */

static inline cuda_backend *cuda_impl(glm53_backend *be) { return (cuda_backend *)be->impl; }

/* Blocks of `threads` threads and `smem` bytes of dynamic shared memory one multiprocessor runs at once (at least
 * 1), asked once per kernel and size. */
glm53_status cuda_blocks_per_sm(cuda_backend *cb, const void *kernel, int threads, size_t smem, int *blocks);

/* Programmatic dependent launch. A kernel launched with it (cuda_launch's pdl) may start while the kernel before
 * it in the stream is still running, once every block of that one has called cuda_pdl_launch_dependents (or
 * ended); it may do only work that reads nothing an earlier kernel writes (weights) before cuda_pdl_wait, which
 * returns when the kernel before has finished and its writes are visible. Every block of such a kernel must call
 * cuda_pdl_wait, even one with nothing to do: the kernel after it counts on "this kernel finished" meaning
 * "everything before it finished". Both are no-ops in a kernel launched without the attribute. */
__device__ inline void cuda_pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ inline void cuda_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
/* The start of a kernel whose every read depends on earlier kernels: let the next one launch, then wait. */
__device__ inline void cuda_pdl_begin() {
    cuda_pdl_launch_dependents();
    cuda_pdl_wait();
}

/* cp.async of 16 bytes global -> shared (L2 only, .cg); src_bytes 0 writes zeros and reads nothing (src must still
 * be a valid address). Groups: cuda_cp_async_commit closes the copies issued since the last one, cuda_cp_async_wait<N>
 * waits until at most N of this thread's groups are still in flight (a barrier then makes every thread's visible). */
__device__ inline void cuda_cp_async16(void *dst, const void *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ inline void cuda_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ inline void cuda_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* kernel<<<grid, block, smem, cb->stream>>>(args...), with programmatic dependent launch when pdl. */
template <typename... Params, typename... Args>
static inline cudaError_t cuda_launch(cuda_backend *cb, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      bool pdl, Args &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cb->stream;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}

/* ------------------------------------------------------------------------------------------------------------
 * Errors
 */
#define CUDA_TRY(call)                                                                                   \
    do {                                                                                                 \
        cudaError_t cuda_try_err_ = (call);                                                              \
        if (cuda_try_err_ != cudaSuccess)                                                                \
            return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: %s: %s", #call, cudaGetErrorString(cuda_try_err_)); \
    } while (0)

#define CUBLAS_TRY(call)                                                                                     \
    do {                                                                                                     \
        cublasStatus_t cublas_try_st_ = (call);                                                              \
        if (cublas_try_st_ != CUBLAS_STATUS_SUCCESS)                                                         \
            return GLM53_FAIL(GLM53_ERR_BACKEND, "cublas: %s: %s", #call, cublasGetStatusString(cublas_try_st_)); \
    } while (0)

/* After every <<<...>>> (with `cb` in scope): a bad launch configuration or a missing kernel image shows up
 * here, not later; while profiling, the kernel's end is marked with the label `what`. */
#define CUDA_LAUNCHED(what)                                                                                  \
    do {                                                                                                     \
        cudaError_t cuda_launch_err_ = cudaGetLastError();                                                   \
        if (cuda_launch_err_ != cudaSuccess)                                                                 \
            return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda %s: kernel launch: %s", (what),                       \
                              cudaGetErrorString(cuda_launch_err_));                                         \
        if (cb->profile) cuda_profile_mark(cb, (what));                                                      \
    } while (0)

/* Profiling (profile_start): records an event on the stream labelled `what` (plus cb->profile_detail); the
 * time from the previous event to this one is charged to the label. */
void cuda_profile_mark(cuda_backend *cb, const char *what);

/* Makes the backend's device current for the calling thread (a step may run on a worker thread). */
glm53_status cuda_enter(cuda_backend *cb);

/* Waits for the stream (counted as a host synchronisation) and reports a failed kernel. */
glm53_status cuda_stream_wait(cuda_backend *cb);

/* Opts `kernel` in to `bytes` of dynamic shared memory when that is more than the default 48 KiB; fails with
 * GLM53_ERR_UNSUPPORTED when the device cannot give that much to one block. */
glm53_status cuda_smem_optin(cuda_backend *cb, const void *kernel, size_t bytes, const char *what);

__device__ inline void cuda_record_fault(cuda_fault *fault, int32_t op, long long position, long long value,
                                         long long limit) {
    if (atomicCAS(&fault->op, 0, op) == 0) {
        fault->position = position;
        fault->value = value;
        fault->limit = limit;
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Device memory: the caching allocator (cuda_backend.cu). Blocks go back to a free list on release and are
 * reused by the next request of the same size bucket; that is safe without synchronisation because every user
 * of a block is ordered on the one stream.
 */
glm53_status cuda_device_alloc(cuda_backend *cb, size_t bytes, void **out, const char *what);
void         cuda_device_free(cuda_backend *cb, void *ptr);

/* A scratch buffer for the duration of one op, given back when it goes out of scope. Inside a planned step it is
 * a piece of the step's workspace (so a captured step replays with the same scratch addresses and nothing is
 * allocated); outside one it comes from the caching allocator. */
struct cuda_scratch {
    cuda_backend    *cb = nullptr;
    void            *ptr = nullptr;
    glm53_workspace *ws = nullptr;
    size_t           mark = 0;
    cuda_scratch() = default;
    cuda_scratch(const cuda_scratch &) = delete;
    cuda_scratch &operator=(const cuda_scratch &) = delete;
    ~cuda_scratch() {
        if (ws) glm53_workspace_reset(ws, mark);
        else if (ptr) cuda_device_free(cb, ptr);
    }
    glm53_status get(cuda_backend *backend, size_t bytes, const char *what) {
        cb = backend;
        if (backend->be->workspace) {
            ws = backend->be->workspace;
            mark = glm53_workspace_mark(ws);
            return glm53_workspace_take(ws, bytes, &ptr, what);
        }
        return cuda_device_alloc(backend, bytes, &ptr, what);
    }
};

/* ------------------------------------------------------------------------------------------------------------
 * Typed views
 */
__device__ inline float cuda_fp8_e4m3_to_float(uint8_t code) {
    /* Every E4M3 value (subnormals, +-448, NaN for S.1111.111) is exact in half precision. */
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)code, __NV_E4M3);
    return __half2float(__half(h));
}

/* An activation (F32 or BF16) read as floats by flat element index. */
struct act_in {
    const void *data;
    bool        bf16;
    __device__ float operator[](int64_t i) const {
        return bf16 ? __bfloat162float(((const __nv_bfloat16 *)data)[i]) : ((const float *)data)[i];
    }
};

/* 8 BF16 values packed in 16 bytes, as floats (BF16 -> F32 is exact: the bits shifted up). */
__device__ inline void cuda_bf16x8_to_float(uint4 u, float (&v)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/* 8 floats rounded to BF16 (round to nearest even, as act_out::store) and packed in 16 bytes, element 0 lowest. */
__device__ inline uint4 cuda_float8_to_bf16x8(const float (&v)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i])) |
               (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i + 1])) << 16;
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* v = a[i .. i+8) as floats: 16-byte loads when `aligned` (the caller knows the address is 16-byte aligned),
 * else element by element. Either gives the same values. */
__device__ inline void cuda_act_load8(act_in a, int64_t i, bool aligned, float (&v)[8]) {
    if (aligned && a.bf16) {
        cuda_bf16x8_to_float(*reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)a.data + i), v);
    } else if (aligned) {
        float4 x = *reinterpret_cast<const float4 *>((const float *)a.data + i);
        float4 y = *reinterpret_cast<const float4 *>((const float *)a.data + i + 4);
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = a[i + k];
    }
}

/* An activation (F32 or BF16) written from floats: the one rounding of an op's result happens here. */
struct act_out {
    void *data;
    bool  bf16;
    __device__ void store(int64_t i, float v) const {
        if (bf16) ((__nv_bfloat16 *)data)[i] = __float2bfloat16_rn(v);
        else ((float *)data)[i] = v;
    }
};

/* A weight [rows, cols] (a 1-D parameter is one row) of any weight dtype, read as floats. FP8 element (r, c)
 * is e4m3(code) * scale[r / block_rows, c / block_cols], or the bare code value without a scale tensor. */
struct weight_ref {
    const void  *data;
    int32_t      dtype;          /* glm53_dtype: F32, BF16, F16 or F8_E4M3 */
    int64_t      cols;
    const float *scale;          /* F8_E4M3 only; NULL without a scale */
    int64_t      scale_stride;   /* elements between scale rows */
    int32_t      block_rows, block_cols;

    __device__ float at(int64_t row, int64_t col) const {
        int64_t i = row * cols + col;
        switch (dtype) {
        case GLM53_F32: return ((const float *)data)[i];
        case GLM53_BF16: return __bfloat162float(((const __nv_bfloat16 *)data)[i]);
        case GLM53_F16: return __half2float(((const __half *)data)[i]);
        default: {
            float v = cuda_fp8_e4m3_to_float(((const uint8_t *)data)[i]);
            return scale ? v * scale[(row / block_rows) * scale_stride + col / block_cols] : v;
        }
        }
    }
};

/* Host-side constructors; they assert what the op contracts promise (contiguous, on this device). */
bool       cuda_is_act(const glm53_tensor *t);   /* F32 or BF16, contiguous, on the CUDA device */
act_in     cuda_act_in(const glm53_tensor *t);
act_out    cuda_act_out(glm53_tensor *t);
/* GLM53_ERR_UNSUPPORTED for a dtype weight_ref cannot read or a malformed FP8 scale. */
glm53_status cuda_weight_ref(const glm53_tensor *w, weight_ref *out, const char *op);

/* Last dimension ("columns" of the rows convention). */
static inline int64_t cuda_cols(const glm53_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* A contiguous 2-D tensor header over device memory owned by someone else (scratch, a slice of a buffer). */
glm53_tensor cuda_view_2d(void *data, int32_t dtype, int64_t rows, int64_t cols);

/* for (i over [0, n)) spread over every thread of the grid. */
#define GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Blocks for a grid-stride loop over n items with `threads` per block (n > 0). */
static inline unsigned cuda_blocks_for(int64_t n, int threads) {
    int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
}

/* ------------------------------------------------------------------------------------------------------------
 * Block reductions. Every thread of the block must call them (blockDim.x a multiple of 32, at most 1024);
 * every thread gets the same result, combined in the same order, so results are deterministic.
 */
__device__ inline float cuda_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ inline float cuda_warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ inline float cuda_block_sum(float v) {
    __shared__ float partial[32];
    v = cuda_warp_sum(v);
    __syncthreads();   /* a previous call may still be reading partial */
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; w++) total += partial[w];
    return total;
}

__device__ inline float cuda_block_max(float v) {
    __shared__ float partial[32];
    v = cuda_warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float best = -INFINITY;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; w++) best = fmaxf(best, partial[w]);
    return best;
}

/* Threads of a row-normalisation block (norm.cu). A row of at most this many elements is one element per thread,
 * the form kda_sequences' L2 norms reproduce. */
enum { CUDA_NORM_THREADS = 256 };

/* FLA's l2norm (eps inside the sqrt) of an element x of a row whose squares sum to sum_squares (a cuda_block_sum):
 * x / sqrt(sum_squares + eps) * scale. The l2norm op and the fused kda_sequences both normalise through these two,
 * so they give the same bits. */
__device__ inline float cuda_l2norm_factor(float sum_squares, float eps) { return 1.0f / sqrtf(sum_squares + eps); }
__device__ inline float cuda_l2norm_apply(float x, float factor, float scale) { return x * factor * scale; }

/* The value an act_out of this dtype stores for v, as an act_in reads it back: what a fused kernel keeps of an
 * intermediate the op-by-op chain would have stored in an activation tensor. */
__device__ inline float cuda_act_round(bool bf16, float v) {
    return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

__device__ inline float cuda_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* x / (1 + e^-x): one rounding fewer than x * sigmoid(x), as the CPU backend. */
__device__ inline float cuda_silu(float x) { return x / (1.0f + expf(-x)); }
/* torch's softplus: beta 1, threshold 20. */
__device__ inline float cuda_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
/* Clamped SwiGLU of one element: silu(min(g, limit)) * clamp(u, -limit, limit); limit <= 0: no clamp. */
__device__ inline float cuda_swiglu_value(float g, float u, float limit) {
    if (limit > 0.0f) {
        g = g > limit ? limit : g;
        u = u > limit ? limit : (u < -limit ? -limit : u);
    }
    return cuda_silu(g) * u;
}

/* ------------------------------------------------------------------------------------------------------------
 * Launch helpers shared between op files
 */
/* y[i] = x[i] for n elements, converting between F32 and BF16 (either side may be either). */
glm53_status cuda_convert(cuda_backend *cb, act_out y, act_in x, int64_t n);
/* The whole weight w [rows, cols] dequantised (or converted) into `dst_dtype` (F32 or BF16) scratch: one rounding
 * of code * scale for BF16, exact for F32 (linear.cu). */
glm53_status cuda_dequantize_weight(cuda_backend *cb, cuda_scratch *dst, const weight_ref &w, int64_t rows,
                                    int64_t cols, int32_t dst_dtype);

/* ------------------------------------------------------------------------------------------------------------
 * Op entry points (semantics and shapes: backend.h)
 */
glm53_status cuda_matmul(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w);
glm53_status cuda_matmul_multi(glm53_backend *be, glm53_tensor *const *y, const glm53_tensor *x,
                               const glm53_tensor *const *w, int32_t n);
glm53_status cuda_swiglu_gate_up(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w_gate,
                                 const glm53_tensor *w_up, float limit);

glm53_status cuda_rmsnorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                          float eps);
glm53_status cuda_layernorm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                            const glm53_tensor *b, float eps);
glm53_status cuda_l2norm(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float eps, float scale);
glm53_status cuda_softmax(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x);
glm53_status cuda_rmsnorm_gated(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                const glm53_tensor *gate, const glm53_tensor *w, float eps);

glm53_status cuda_unary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, glm53_unary_op op);
glm53_status cuda_binary(glm53_backend *be, glm53_tensor *y, const glm53_tensor *a, const glm53_tensor *b,
                         glm53_binary_op op);
glm53_status cuda_axpby(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float alpha, float beta);
glm53_status cuda_swiglu(glm53_backend *be, glm53_tensor *y, const glm53_tensor *gate, const glm53_tensor *up,
                         float limit);
glm53_status cuda_conv1d_causal(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w);

glm53_status cuda_topk(glm53_backend *be, glm53_tensor *vals, glm53_tensor *idx, const glm53_tensor *x, int32_t k,
                       int64_t n_valid);
glm53_status cuda_gather_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *table,
                              const glm53_tensor *ids);
glm53_status cuda_scatter_rows(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids);

glm53_status cuda_mhc_expand(glm53_backend *be, glm53_tensor *H, const glm53_tensor *x);
glm53_status cuda_mhc_pre(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                          const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                          const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters);
glm53_status cuda_mhc_post(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y,
                           const glm53_tensor *H_in, const glm53_tensor *post, const glm53_tensor *comb);
glm53_status cuda_mhc_mean(glm53_backend *be, glm53_tensor *y, const glm53_tensor *H);
glm53_status cuda_mhc_site(glm53_backend *be, const glm53_mhc_site *site);

glm53_status cuda_kda_gate(glm53_backend *be, glm53_tensor *g, const glm53_tensor *f, const glm53_tensor *A_log,
                           const glm53_tensor *dt_bias, int32_t has_lower_bound, float lower_bound);
glm53_status cuda_kda_recurrent(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                const glm53_tensor *v, const glm53_tensor *g, const glm53_tensor *beta,
                                glm53_tensor *states, const glm53_tensor *slots);
glm53_status cuda_kda_sequences(glm53_backend *be, glm53_tensor *o, const glm53_tensor *const raw[3],
                                const glm53_tensor *const w[3], const glm53_tensor *g, const glm53_tensor *beta,
                                const glm53_kda_seq *seqs, int32_t n_seqs, float eps, float q_scale);

glm53_status cuda_kpool_compress(glm53_backend *be, glm53_tensor *pooled, const glm53_tensor *kappa,
                                 const glm53_tensor *sigma, const glm53_tensor *ape);
glm53_status cuda_kpool_score(glm53_backend *be, glm53_tensor *scores, const glm53_tensor *Q,
                              const glm53_tensor *w, const glm53_tensor *pooled, const glm53_tensor *n_closed,
                              float scale);
glm53_status cuda_kpool_select(glm53_backend *be, glm53_tensor *idx, const glm53_tensor *scores,
                               const glm53_tensor *pos, int32_t pool_size, int32_t n_select, int32_t with_tail);
glm53_status cuda_sparse_mla(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *latent,
                             const glm53_tensor *idx, const glm53_tensor *kv_b, float scale);

glm53_status cuda_moe_route(glm53_backend *be, glm53_tensor *ids, glm53_tensor *weights,
                            const glm53_tensor *logits, const glm53_tensor *bias, int32_t n_group,
                            int32_t topk_group, int32_t norm, float scaling);
glm53_status cuda_moe_experts(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids,
                              const glm53_tensor *weights, const glm53_expert_set *experts, float limit);
glm53_status cuda_prepare_experts(glm53_backend *be, glm53_expert_set *experts);
void         cuda_release_experts(glm53_backend *be, glm53_expert_set *experts);

/* Vision ops (ops_vision.cu) */
glm53_status cuda_rope_2d(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *pos,
                          float theta);
glm53_status cuda_attention_segments(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                     const glm53_tensor *v, const glm53_tensor *cu_seqlens, float scale);

#endif /* GLM53_CUDA_COMMON_CUH */
