/*
 * gemv.cu - the decode GEMV y[M,N] = x[M,K] * w[N,K]^T for M = 1..16 rows, at the real GLM-5.3-Flash
 * projection shapes: a CPU reference (float64) beside numbered kernel versions, each checked against it and
 * timed against the bytes it must read (the llm.c dev/cuda layout).
 *
 *   build/bench_gemv [--quick]   # every shape x dtype x M x version: time, GB/s, floor, ratio
 *
 * Versions:
 *   1  the engine's CUDA-core GEMV (gemv.cuh: one warp per weight row; the lane converts FP8 codes with the
 *      hardware cvt, two at a time, and reloads x from global memory per chunk). The engine keeps it for F32
 *      activations and the fused SwiGLU and expert kernels; BF16 activations with FP8 weights take version 4.
 *   2  one warp per row, x staged once per block in shared memory as F32, weights read with streaming 16-byte
 *      loads issued U at a time before any arithmetic, FP8 codes turned into floats with integer operations
 *      (no cvt: the conversion unit does 16 per clock per SM, which at M = 1 costs more than the 3.9 us the
 *      bytes of a 4096 x 4096 FP8 matrix need). The float made from a code's bits is code * 2^-120 (normal and
 *      subnormal codes alike); x is staged times 2^64 and the block scale applied times 2^56, so every product
 *      and partial sum is the unscaled one times 2^-56: the same roundings as version 1's sum of code * x times
 *      the scale (below 2^-70 in magnitude, where F32 would go subnormal, nothing of weight is left).
 *   3  version 2 with two weight rows per warp (x read once from shared memory for both rows).
 *   4  the engine's tensor-core GEMV for BF16 activations (gemv_mma.cuh: mma.sync m16n8k16, 8 warps splitting K,
 *      R n-tiles of 8 rows per warp, U groups of loads in flight), batch invariant by construction; FP8 codes
 *      turned into BF16 by moving bits. "4cvt": the same through the hardware e4m3x2 -> f16x2 cvt.
 *   5  the engine's streaming form of version 4 (gemv_mma_stream: a block takes a run of tiles, x staged once,
 *      each warp's next step of weights in registers, the loads running on across tiles).
 *   6  version 5 with each warp's weights copied by cp.async into a ring of S steps in shared memory (S - 1
 *      steps in flight, 37-93 registers a thread instead of 88-193). Slower than 5 on every shape on the H100
 *      (2026-12-07: KDA q/k/v 27.1 -> 32.2 us, MLA o_proj FP8 31.6 -> 61.6 us at R2 U2 S4; the whole decode step
 *      2.887 -> 3.918 ms): kept as the measured alternative, not in the engine.
 *   7  version 5's steps with the weights brought into a shared ring by TMA bulk copies that a ninth warp issues
 *      (mbarrier full / empty per slot), so the bytes in flight do not depend on the registers. Written without a
 *      GPU (2026-12-07, branch gpu-pending-fp8-tma): its first run says whether it is right and whether it helps.
 *   cublas  cublasGemmEx BF16 x BF16 -> F32 (the engine's BF16-weight path).
 * Versions 1-3 and 6 are kept as the measured alternatives (docs/performance.md has the tables and what they
 * decided).
 *
 * Timing: each measurement is a CUDA graph of 20 launches, each on its own copy of the weight (copies rotate so
 * that the bytes in flight exceed L2 several times), replayed 8 times; the figure is the median replay (the first
 * dropped) / 20, which
 * is what a kernel costs inside a captured decode step (launch latency hidden, L2 cold for the weight).
 * The floor is the weight bytes (plus x, y and the scales) over the read bandwidth this card measured in the
 * same run (a streaming-sum kernel over 1 GiB), also printed.
 */
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/gemv_mma.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cuda/bench/bench.cuh"

/* ------------------------------------------------------------------------------------------------------------
 * CPU reference: y[m, n] = sum_k x[m, k] * w[n, k] in float64, w dequantised exactly; also sum |x * w| (the scale
 * the error is measured against).
 */
static float bf16_to_float_host(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t float_to_bf16_host(float f) {   /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float fp8_e4m3_to_float_host(uint8_t c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
    return s ? -v : v;
}

static void cpu_reference(std::vector<double> &y, std::vector<double> &mag, const std::vector<uint16_t> &x,
                          const std::vector<uint8_t> &w, const std::vector<float> &scale, bool fp8, int M, int N,
                          int K) {
    int sk = (K + 127) / 128;
    std::vector<double> xr((size_t)M * K);
    for (size_t i = 0; i < xr.size(); i++) xr[i] = bf16_to_float_host(x[i]);
    y.assign((size_t)M * N, 0.0), mag.assign((size_t)M * N, 0.0);
    for (int n = 0; n < N; n++) {
        std::vector<double> wr(K);
        for (int k = 0; k < K; k++)
            wr[k] = fp8 ? (double)fp8_e4m3_to_float_host(w[(size_t)n * K + k]) * scale[(size_t)(n / 128) * sk + k / 128]
                        : bf16_to_float_host(((const uint16_t *)w.data())[(size_t)n * K + k]);
        for (int m = 0; m < M; m++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) s += xr[(size_t)m * K + k] * wr[k], a += fabs(xr[(size_t)m * K + k] * wr[k]);
            y[(size_t)m * N + n] = s, mag[(size_t)m * N + n] = a;
        }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Version 1: the engine's kernel (gemv.cuh), unchanged.
 */
template <int MAX_M>
__global__ void __launch_bounds__(256) gemv_v1(float *y, act_in x, weight_ref w, int M, int64_t N, int64_t K) {
    int64_t n = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (n >= N) return;
    float acc[MAX_M];
#pragma unroll
    for (int m = 0; m < MAX_M; m++) acc[m] = 0.0f;
    gemv_lane_partials<MAX_M>(acc, w, n, x, 0, M, K, gemv_vec16(w, K), lane);
#pragma unroll
    for (int m = 0; m < MAX_M; m++)
        if (m < M) {
            float s = cuda_warp_sum(acc[m]);
            if (lane == 0) y[(int64_t)m * N + n] = s;
        }
}

/* ------------------------------------------------------------------------------------------------------------
 * Versions 2 and 3.
 */
/* The four E4M3 codes of `word` as floats times 2^-120: sign to bit 31, the 7 exponent-and-mantissa bits to
 * bits 26..20 (exponent field 0..15, so a code's exponent e becomes e + 0 where F32's bias is 127 against E4M3's
 * 7; a subnormal code becomes the F32 subnormal of the same digits: both scaled by exactly 2^-120). */
__device__ inline void fp8x4_to_float_scaled(uint32_t word, float *out) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t top = word << (24 - 8 * j);   /* code j in bits 31..24 (j = 3: unchanged) */
        out[j] = __uint_as_float((top & 0x80000000u) | ((top >> 4) & 0x07f00000u));
    }
}

enum { V2_THREADS = 256, V2_WARPS = V2_THREADS / 32 };
constexpr float SCALE_FIX = 72057594037927936.0f;          /* 2^56 = 2^120 / 2^64 */

/* x[M, K] (BF16 in global memory) into xs[M, K] F32 in shared memory, times `mul`. */
__device__ inline void stage_x(float *xs, const __nv_bfloat16 *x, int M, int K, float mul) {
    const uint4 *src = reinterpret_cast<const uint4 *>(x);
    for (int i = threadIdx.x; i < M * K / 8; i += blockDim.x) {
        float v[8];
        cuda_bf16x8_to_float(src[i], v);
#pragma unroll
        for (int j = 0; j < 8; j++) xs[i * 8 + j] = v[j] * mul;
    }
    __syncthreads();
}

/* acc[m][r] += lane's share of dot(x[m], w[n0 + r]) for R consecutive rows: chunks of 16 bytes, lane l takes
 * chunks l, l + 32, ...; U chunks are loaded before any is used. FP8: 16 codes per chunk, the chunk's partial
 * sum times its block's scale (block_cols a multiple of 16); BF16: 8 weights per chunk. */
template <int MAX_M, int R, bool FP8, int U>
__device__ inline void v2_lane_partials(float (&acc)[MAX_M][R], const uint8_t *w, const float *scale, int scale_stride,
                                        const float *xs, int M, int64_t n0, int K, int lane) {
    constexpr int EPC = FP8 ? 16 : 8;   /* elements per 16-byte chunk */
    const int chunks = K / EPC;
    const size_t row_bytes = (size_t)K * (FP8 ? 1 : 2);
    for (int c0 = lane; c0 < chunks; c0 += 32 * U) {
        uint4 p[R][U];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < U; u++) {
                int c = c0 + 32 * u;
                if (c < chunks) p[r][u] = gemv_mma_load_stream(w + (size_t)(n0 + r) * row_bytes + (size_t)c * 16);
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int c = c0 + 32 * u;
            if (c >= chunks) break;
            int k0 = c * EPC;
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wv[EPC];
                if constexpr (FP8) {
                    fp8x4_to_float_scaled(p[r][u].x, wv);
                    fp8x4_to_float_scaled(p[r][u].y, wv + 4);
                    fp8x4_to_float_scaled(p[r][u].z, wv + 8);
                    fp8x4_to_float_scaled(p[r][u].w, wv + 12);
                } else {
                    cuda_bf16x8_to_float(p[r][u], *reinterpret_cast<float(*)[8]>(wv));
                }
                float s = FP8 ? scale[((n0 + r) / 128) * scale_stride + k0 / 128] * SCALE_FIX : 1.0f;
#pragma unroll
                for (int m = 0; m < MAX_M; m++) {
                    if (m < M) {
                        const float4 *xv = reinterpret_cast<const float4 *>(xs + (size_t)m * K + k0);
                        float part = 0.0f;
#pragma unroll
                        for (int q = 0; q < EPC / 4; q++) {
                            float4 v = xv[q];
                            part += v.x * wv[4 * q];
                            part += v.y * wv[4 * q + 1];
                            part += v.z * wv[4 * q + 2];
                            part += v.w * wv[4 * q + 3];
                        }
                        acc[m][r] += FP8 ? part * s : part;
                    }
                }
            }
        }
    }
}

template <int MAX_M, int R, bool FP8, int U>
__global__ void __launch_bounds__(V2_THREADS) gemv_v2(float *y, const __nv_bfloat16 *x, const uint8_t *w,
                                                     const float *scale, int scale_stride, int M, int N, int K) {
    extern __shared__ float xs[];   /* [M, K] */
    stage_x(xs, x, M, K, FP8 ? GEMV_MMA_X_SCALE : 1.0f);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    for (int64_t n0 = ((int64_t)blockIdx.x * V2_WARPS + warp) * R; n0 < N; n0 += (int64_t)gridDim.x * V2_WARPS * R) {
        float acc[MAX_M][R];
#pragma unroll
        for (int m = 0; m < MAX_M; m++)
#pragma unroll
            for (int r = 0; r < R; r++) acc[m][r] = 0.0f;
        v2_lane_partials<MAX_M, R, FP8, U>(acc, w, scale, scale_stride, xs, M, n0, K, lane);
#pragma unroll
        for (int m = 0; m < MAX_M; m++)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (m < M) {
                    float s = cuda_warp_sum(acc[m][r]);
                    if (lane == 0) y[(int64_t)m * N + n0 + r] = s;
                }
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Read bandwidth of this card: every 16-byte word of a large buffer summed (so nothing is optimised away).
 */
__global__ void read_sum(const uint4 *p, size_t n, unsigned *out) {
    unsigned s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = gemv_mma_load_stream(p + i);
        s ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (s == 0x12345678u) *out = s;
}

/* ------------------------------------------------------------------------------------------------------------
 * Harness
 */
struct shape {
    const char *name;
    int N, K;
    bool fp8;
};

/* The decode projections of GLM-5.3-Flash (docs: glm53-architecture.md, section 3) */
static const shape SHAPES[] = {
    {"kda q/k/v_proj", 8192, 4096, false},   {"kda o_proj", 4096, 8192, false},
    {"indexer wq_b", 4096, 1536, false},     {"bf16 4096^2", 4096, 4096, false},
    {"mla q_a_proj", 1536, 4096, true},      {"mla q_b_proj", 16384, 1536, true},
    {"mla o_proj", 4096, 16384, true},       {"dense gate/up", 12288, 4096, true},
    {"dense down", 4096, 12288, true},       {"expert gate/up", 2048, 4096, true},
    {"expert down", 4096, 2048, true},       {"fp8 4096^2", 4096, 4096, true},
};

struct gpu_case {
    int N, K;
    bool fp8;
    int copies;
    std::vector<uint8_t *> w;   /* copies of the weight (identical bytes) */
    std::vector<float *> scale;
    __nv_bfloat16 *x;           /* [16, K] */
    float *y;                   /* [16, N] */
    size_t w_bytes, s_bytes;
};

static cudaStream_t stream;
static cublasHandle_t cublas;
static int n_sm;

typedef void (*launch_fn)(gpu_case &, int copy, int M);

/* The engine's view of copy i of the weight: 128 x 128 scale blocks for FP8. */
static weight_ref bench_weight_ref(gpu_case &g, int i) {
    weight_ref wr{};
    wr.data = g.w[i];
    wr.dtype = g.fp8 ? GLM53_F8_E4M3 : GLM53_BF16;
    wr.cols = g.K;
    wr.scale = g.fp8 ? g.scale[i] : nullptr;
    wr.scale_stride = (g.K + 127) / 128;
    wr.block_rows = wr.block_cols = 128;
    return wr;
}

static void launch_v1(gpu_case &g, int i, int M) {
    weight_ref wr = bench_weight_ref(g, i);
    act_in xi{g.x, true};
    unsigned blocks = (g.N + 7) / 8;
    GEMV_DISPATCH_M(M, (gemv_v1<MAX_M_><<<blocks, 256, 0, stream>>>(g.y, xi, wr, M, g.N, g.K)));
}

template <int MAX_M, int R, bool FP8, int U>
static void start_v2(gpu_case &g, int i, int M, int blocks, size_t smem, int sk) {
    auto kernel = gemv_v2<MAX_M, R, FP8, U>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<blocks, V2_THREADS, smem, stream>>>(g.y, g.x, g.w[i], FP8 ? g.scale[i] : nullptr, sk, M, g.N, g.K);
}

template <int R, int U>
static void launch_v2(gpu_case &g, int i, int M) {
    size_t smem = (size_t)M * g.K * sizeof(float);
    int rows_per_block = V2_WARPS * R;
    int blocks = (g.N + rows_per_block - 1) / rows_per_block;
    int sk = (g.K + 127) / 128;
    if (g.fp8) GEMV_DISPATCH_M(M, (start_v2<MAX_M_, R, true, U>(g, i, M, blocks, smem, sk)));
    else GEMV_DISPATCH_M(M, (start_v2<MAX_M_, R, false, U>(g, i, M, blocks, smem, sk)));
}

template <int R, int U, bool HW_CVT = false>
static void launch_v4(gpu_case &g, int i, int M) {
    weight_ref wr = bench_weight_ref(g, i);
    const int slab = gemv_mma_slab(M, g.K);
    size_t smem = gemv_mma_smem(M, R, slab);
    int blocks = (g.N + 8 * R - 1) / (8 * R);
    auto kernel = g.fp8 ? gemv_mma_kernel<true, R, U, HW_CVT> : gemv_mma_kernel<false, R, U, HW_CVT>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<blocks, GEMV_MMA_THREADS, smem, stream>>>(act_out{g.y, false}, g.x, wr, M, g.N, g.K, slab);
}

/* ------------------------------------------------------------------------------------------------------------
 * Version 6, the asynchronous form: each lane copies its weights global -> shared with cp.async into a ring of
 * `stages` steps of its own (no other lane reads them, so no barrier guards the ring: cp.async.wait_group orders
 * a lane's copies before its own reads), `stages - 1` steps ahead of the MMAs. The register form holds one step ahead
 * in registers (the kernel runs 92-157 registers a thread, so one or two blocks per multiprocessor and few bytes
 * in flight: FP8 at one row stayed at 0.5-0.6 of the bandwidth floor); the ring keeps stages - 1 steps in flight
 * for no registers. A step's values, their order and the arithmetic are the register form's: the same bits.
 */
__device__ inline void v6_cp_async4(void *dst, const void *src) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
/* Waits until at most `pending` of this thread's committed groups are still in flight (wait_group takes a
 * constant; the ring's depth is a run-time choice). */
__device__ inline void v6_cp_async_wait(int pending) {
    switch (pending) {
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    case 7: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    }
}

/* One lane's slot of a ring step: U x R 16-byte weight pieces and (FP8) their scales, [u][r][lane]. */
template <bool FP8, int R, int U>
struct v6_ring {
    uint4 *w;       /* this warp's ring [stages][U][R][32] */
    float *scale;   /* [stages][U][R][32] (FP8) */
    int    lane;
    __device__ int at(int slot, int u, int r) const { return ((slot * U + u) * R + r) * 32 + lane; }

    /* Copies the step of k-groups kg0, kg0 + 8, ... of the R n-tiles into `slot`: gemv_mma_load's values (zeros
     * past the groups or the weight's rows, scale 1 without a block scale). */
    __device__ void load(int slot, const gemv_mma_lane_rows (&t)[R], int kg0, int groups, int q,
                         const void *any_global) const {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int kg = kg0 + GEMV_MMA_WARPS * u;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const bool real = kg < groups && t[r].row;
                cuda_cp_async16(&w[at(slot, u, r)],
                                real ? (const void *)gemv_mma_piece<FP8>(t[r], kg, q) : any_global, real ? 16 : 0);
                if (FP8) {
                    if (t[r].scale_row && kg < groups)
                        v6_cp_async4(&scale[at(slot, u, r)], gemv_mma_scale_of(t[r], kg));
                    else
                        scale[at(slot, u, r)] = 1.0f;
                }
            }
        }
    }
    __device__ void read(gemv_mma_step<FP8, R, U> &s, int slot) const {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                s.w[u][r] = w[at(slot, u, r)];
                s.scale[u][r] = FP8 ? scale[at(slot, u, r)] : 1.0f;
            }
    }
};

/* gemv_mma_stream_registers' product with the weights through the ring. `smem` holds x, the two sums areas, then
 * the ring (v6_ring_smem(FP8, R, U, stages) bytes), stages >= 2. A warp's steps are numbered across its
 * tiles (steps_per_tile each: the k-groups warp, warp + 8 U, ...), so the copies run on from one tile into the
 * next while a tile's sums are reduced and stored. */
template <bool FP8, int R, int U, class Tiles>
__device__ inline void v6_stream_ring(uint8_t *smem, const Tiles &tiles, int t_begin, int t_end,
                                            const __nv_bfloat16 *__restrict__ x, int x_rows, int M, int K,
                                            int stages) {
    constexpr int GROUP = FP8 ? 64 : 32;
    const int ld = K + GEMV_MMA_PAD, groups = K / GROUP;
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(smem);
    float *sums = reinterpret_cast<float *>(smem + (size_t)x_rows * ld * 2);
    uint8_t *ring_base = smem + (size_t)x_rows * ld * 2 + 2 * (size_t)GEMV_MMA_WARPS * R * 16 * 8 * 4;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
    const int per_warp = stages * U * R * 32;
    const v6_ring<FP8, R, U> ring = {
        reinterpret_cast<uint4 *>(ring_base) + (size_t)warp * per_warp,
        reinterpret_cast<float *>(ring_base + (size_t)GEMV_MMA_WARPS * per_warp * 16) + (size_t)warp * per_warp, lane};
    cuda_pdl_launch_dependents();

    /* This warp's steps: steps_per_tile per tile, all tiles in a row; step j of tile t starts at group
     * warp + 8 U j. The producer copies step `made` into slot made % stages. */
    const int steps_per_tile = groups > warp ? (groups - warp + GEMV_MMA_WARPS * U - 1) / (GEMV_MMA_WARPS * U) : 0;
    const int n_steps = (t_end > t_begin ? t_end - t_begin : 0) * steps_per_tile;
    gemv_mma_lane_rows made_rows[R];
    int made = 0;
    auto produce = [&]() {   /* copies the next step (if any) and closes its group (always: the counts stay even) */
        if (made < n_steps) {
            const int j = made % steps_per_tile;
            if (j == 0) tiles.rows(t_begin + made / steps_per_tile, made_rows, g);
            ring.load(made % stages, made_rows, warp + GEMV_MMA_WARPS * U * j, groups, q, x);
        }
        cuda_cp_async_commit();
        made++;
    };

    if constexpr (!Tiles::rows_before_wait) cuda_pdl_wait();
    for (int i = 0; i < stages - 1; i++) produce();
    if constexpr (Tiles::rows_before_wait) cuda_pdl_wait();
    if (t_begin >= t_end) {   /* the whole block */
        v6_cp_async_wait(0);
        return;
    }
    gemv_mma_stage_x<FP8, false>(xs, ld, x, x_rows, x_rows, K, 0, K);
    __syncthreads();
    int used = 0;
    for (int t = t_begin, parity = 0; t < t_end; t++, parity ^= 1) {
        gemv_mma_lane_rows unused[R];
        const int x_row = tiles.rows(t, unused, g);
        float acc[R][4];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
        for (int j = 0; j < steps_per_tile; j++, used++) {
            produce();                                   /* step used + stages - 1 */
            v6_cp_async_wait(stages - 1);          /* step `used` has landed */
            gemv_mma_step<FP8, R, U> p;
            ring.read(p, used % stages);
            gemv_mma_compute<FP8, R, U, false>(acc, p, xs, ld, x_row, M, warp + GEMV_MMA_WARPS * U * j, groups, g, q);
        }
        float *s = sums + parity * GEMV_MMA_WARPS * R * 16 * 8;
        gemv_mma_reduce<R>(s, acc, warp, g, q);
        tiles.store(t, s);
    }
    v6_cp_async_wait(0);   /* the empty groups closed past the last step */
}

/* The weight ring of version 6: per warp, `stages` steps of U k-groups of R n-tiles, a lane's 16 bytes each, and
 * (FP8) their block scales. */
static inline size_t v6_ring_smem(bool fp8, int R, int U, int stages) {
    return (size_t)GEMV_MMA_WARPS * stages * U * R * 32 * (16 + (fp8 ? 4 : 0));
}

/* Version 5: the streaming form (one segment), as many blocks as the device holds at once. */
template <int R, int U>
static void launch_v5(gpu_case &g, int i, int M) {
    gemv_mma_segments segs = {};
    segs.n = 1;
    segs.seg[0] = {bench_weight_ref(g, i), act_out{g.y, false}, g.N, 0};
    segs.tiles = (g.N + 8 * R - 1) / (8 * R);
    const size_t smem = gemv_mma_stream_smem(M, R, g.K);
    auto kernel = g.fp8 ? gemv_mma_stream_kernel<true, R, U> : gemv_mma_stream_kernel<false, R, U>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, GEMV_MMA_THREADS, smem));
    const int most = std::max(per_sm, 1) * n_sm, per_block = (segs.tiles + most - 1) / most;
    kernel<<<(segs.tiles + per_block - 1) / per_block, GEMV_MMA_THREADS, smem, stream>>>(segs, g.x, M, g.K, per_block);
}

/* Version 6: version 5 with each warp's weights through a ring of S steps in shared memory (v6_stream_ring). */
template <bool FP8, int R, int U>
__global__ void __launch_bounds__(GEMV_MMA_THREADS)
v6_kernel(const __grid_constant__ gemv_mma_segments segs, const __nv_bfloat16 *x, int M, int K, int tiles_per_block,
          int stages) {
    extern __shared__ __align__(16) uint8_t v6_smem[];
    const int t_begin = blockIdx.x * tiles_per_block, t_end = min(t_begin + tiles_per_block, segs.tiles);
    const gemv_mma_segment_tiles<FP8, R> tiles{segs, M, K};
    v6_stream_ring<FP8, R, U>(v6_smem, tiles, t_begin, t_end, x, M, M, K, stages);
}

template <int R, int U, int S>
static void launch_v6(gpu_case &g, int i, int M) {
    gemv_mma_segments segs = {};
    segs.n = 1;
    segs.seg[0] = {bench_weight_ref(g, i), act_out{g.y, false}, g.N, 0};
    segs.tiles = (g.N + 8 * R - 1) / (8 * R);
    const size_t smem = gemv_mma_stream_smem(M, R, g.K) + v6_ring_smem(g.fp8, R, U, S);
    auto kernel = g.fp8 ? v6_kernel<true, R, U> : v6_kernel<false, R, U>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, GEMV_MMA_THREADS, smem));
    const int most = std::max(per_sm, 1) * n_sm, per_block = (segs.tiles + most - 1) / most;
    kernel<<<(segs.tiles + per_block - 1) / per_block, GEMV_MMA_THREADS, smem, stream>>>(segs, g.x, M, g.K, per_block,
                                                                                          S);
}

/* ------------------------------------------------------------------------------------------------------------
 * Version 7, the bulk-copy form (written 2026-12-07 without a GPU to run it: the first run decides): version 5's
 * tiles, steps and arithmetic, with the weights brought into a shared-memory ring by the copy engine (TMA bulk
 * copies, cp.async.bulk) instead of the lanes' registers. A ninth warp produces: for block step s (the k-groups
 * 8 U j .. 8 U (j + 1) of tile t, what the 8 consumer warps' step j reads together) lanes 0-7 each copy their
 * weight row's contiguous 512 U bytes of every n-tile into slot s % S, completing on full[slot]; the consumer
 * warps wait on full[slot], read their 16-byte pieces (rows padded by 16 bytes so the 8 rows fall in different
 * banks), arrive on empty[slot], then run gemv_mma_compute on them: the same values, the same bits as version 4.
 * Why: the registers bound what version 5 keeps in flight (FP8 at 105-114 registers a thread, 2 blocks a
 * multiprocessor, one step of 16 bytes a lane ahead); here S - 1 steps of the whole block are in flight for no
 * registers. FP8 block scales are loaded a step ahead into registers by the consumers (a few bytes).
 */
enum { V7_CONSUMERS = GEMV_MMA_WARPS * 32, V7_THREADS = V7_CONSUMERS + 32 };

__device__ inline uint32_t v7_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ inline void v7_mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(v7_smem_addr(bar)), "r"(count) : "memory");
}
__device__ inline void v7_mbar_arrive(uint64_t *bar) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(v7_smem_addr(bar)) : "memory");
}
__device__ inline void v7_mbar_arrive_expect(uint64_t *bar, unsigned bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(v7_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ inline void v7_mbar_wait(uint64_t *bar, unsigned parity) {
    asm volatile("{\n .reg .pred done;\n wait_%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra wait_%=;\n}" ::"r"(v7_smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}
/* bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned), completing on bar. */
__device__ inline void v7_bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     v7_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(v7_smem_addr(bar))
                 : "memory");
}
__device__ inline void v7_consumers_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }   /* V7_CONSUMERS */
static_assert(V7_CONSUMERS == 256, "v7_consumers_sync counts 256 threads");

/* Bytes of one ring slot: R n-tiles x 8 rows x (512 U + 16). */
template <int R, int U> __host__ __device__ constexpr int v7_slot_bytes() { return R * 8 * (512 * U + 16); }

/* gemv_mma_reduce for the 8 consumer warps only (the producer warp does not take part in their barriers). */
template <int R>
__device__ inline void v7_reduce(float *sums, const float (&acc)[R][4], int warp, int g, int q) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < 4; j++) sums[((warp * R + r) * 16 + g + (j >= 2 ? 8 : 0)) * 8 + 2 * q + (j & 1)] = acc[r][j];
    v7_consumers_sync();
    for (int i = threadIdx.x; i < R * 16 * 8; i += V7_CONSUMERS) {
        float s = sums[i];
        for (int v = 1; v < GEMV_MMA_WARPS; v++) s += sums[v * R * 16 * 8 + i];
        sums[i] = s;
    }
    v7_consumers_sync();
}

/* Tiles t_begin .. t_end of one weight w [N, K] (FP8 with 8-row-aligned scale blocks, or BF16), x [M, K] staged
 * whole. smem: x, the sums, then the ring (S slots) and 2 S mbarriers. */
template <bool FP8, int R, int U, int S>
__global__ void __launch_bounds__(V7_THREADS)
v7_kernel(float *y, const __nv_bfloat16 *__restrict__ x, weight_ref w, int M, int N, int K, int tiles_per_block) {
    extern __shared__ __align__(128) uint8_t v7_smem[];
    constexpr int GROUP = FP8 ? 64 : 32, ROW = 512 * U + 16, STEP_GROUPS = GEMV_MMA_WARPS * U;
    constexpr int ELEM = FP8 ? 1 : 2;
    const int ld = K + GEMV_MMA_PAD, groups = K / GROUP, MS = gemv_mma_x_rows(M);
    const int n_tiles = (N + 8 * R - 1) / (8 * R);
    const int t_begin = blockIdx.x * tiles_per_block, t_end = min(t_begin + tiles_per_block, n_tiles);
    const int steps_per_tile = (groups + STEP_GROUPS - 1) / STEP_GROUPS;
    const int n_steps = (t_end > t_begin ? t_end - t_begin : 0) * steps_per_tile;
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(v7_smem);
    const size_t x_bytes = ((size_t)MS * ld * 2 + 127) / 128 * 128;
    float *sums = reinterpret_cast<float *>(v7_smem + x_bytes);
    uint8_t *ring = v7_smem + x_bytes + (size_t)GEMV_MMA_WARPS * R * 16 * 8 * 4;
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + (size_t)S * v7_slot_bytes<R, U>()), *empty = full + S;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;

    if (threadIdx.x == 0) {
        for (int i = 0; i < S; i++) v7_mbar_init(&full[i], 1), v7_mbar_init(&empty[i], GEMV_MMA_WARPS);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == GEMV_MMA_WARPS) {   /* the producer: lanes 0-7 copy rows 0-7 of each n-tile */
        for (int s = 0; s < n_steps; s++) {
            const int slot = s % S, t = t_begin + s / steps_per_tile, j = s % steps_per_tile;
            if (s >= S) v7_mbar_wait(&empty[slot], ((s / S) - 1) & 1);
            const int kg0 = j * STEP_GROUPS, n_groups = min(STEP_GROUPS, groups - kg0);
            const unsigned row_bytes = (unsigned)(n_groups * GROUP * ELEM);
            unsigned bytes = 0;   /* what this step's copies bring, every row that exists */
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t first = (int64_t)t * 8 * R + 8 * r;
                bytes += (unsigned)max((int64_t)0, min((int64_t)8, (int64_t)N - first)) * row_bytes;
            }
            if (lane == 0) v7_mbar_arrive_expect(&full[slot], bytes);
            __syncwarp();
            if (lane < 8) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int64_t n = (int64_t)t * 8 * R + 8 * r + lane;
                    if (n >= N) continue;
                    const uint8_t *src = (const uint8_t *)w.data + (n * K + (int64_t)kg0 * GROUP) * ELEM;
                    v7_bulk_copy(ring + (size_t)slot * v7_slot_bytes<R, U>() + (r * 8 + lane) * ROW, src, row_bytes,
                                 &full[slot]);
                }
            }
        }
        return;
    }

    /* the consumers */
    /* x staged by the 256 consumer threads (gemv_mma_stage_x's values; it strides by the whole block) */
    for (int i = threadIdx.x; i < MS * K / 8; i += V7_CONSUMERS) {
        const int m = i / (K / 8), c = (i % (K / 8)) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m < M) {
            v = *reinterpret_cast<const uint4 *>(x + (size_t)m * K + c);
            if (FP8) v = gemv_mma_x8_for_fp8<false>(v);
        }
        *reinterpret_cast<uint4 *>(xs + (size_t)m * ld + c) = v;
    }
    v7_consumers_sync();
    int s = 0;
    for (int t = t_begin, parity = 0; t < t_end; t++, parity ^= 1) {
        gemv_mma_lane_rows rows[R];
#pragma unroll
        for (int r = 0; r < R; r++) rows[r] = gemv_mma_rows_of<FP8>(w, (int64_t)t * 8 * R + 8 * r, N, K, g);
        float acc[R][4];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
        for (int j = 0; j < steps_per_tile; j++, s++) {
            const int slot = s % S, kg0 = warp + j * STEP_GROUPS;
            gemv_mma_step<FP8, R, U> p;
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int kg = kg0 + GEMV_MMA_WARPS * u;
                    p.scale[u][r] = FP8 && rows[r].scale_row && kg < groups
                                        ? rows[r].scale_row[(int64_t)kg * GROUP / rows[r].block_cols]
                                        : 1.0f;
                }
            v7_mbar_wait(&full[slot], (s / S) & 1);
            const uint8_t *base = ring + (size_t)slot * v7_slot_bytes<R, U>();
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int local = warp + GEMV_MMA_WARPS * u;   /* group within the step */
                    const bool real = kg0 + GEMV_MMA_WARPS * u < groups && rows[r].row;
                    p.w[u][r] = real ? *reinterpret_cast<const uint4 *>(base + (r * 8 + g) * ROW + local * GROUP * ELEM +
                                                                        16 * q)
                                     : make_uint4(0, 0, 0, 0);
                }
            __syncwarp();
            if (lane == 0) v7_mbar_arrive(&empty[slot]);
            gemv_mma_compute<FP8, R, U, false>(acc, p, xs, ld, 0, M, kg0, groups, g, q);
        }
        float *sm = sums;   /* one area: v7_reduce's barriers keep a tile's sums until they are stored */
        v7_reduce<R>(sm, acc, warp, g, q);
        for (int i = threadIdx.x; i < R * 16 * 8; i += V7_CONSUMERS) {
            const int r = i / 128, m = (i / 8) % 16, c = i % 8;
            const int64_t n = (int64_t)t * 8 * R + 8 * r + c;
            if (m < M && n < N) y[(int64_t)m * N + n] = sm[i];
        }
        v7_consumers_sync();   /* the sums area is written again by the next tile */
    }
}

template <int R, int U, int S> static size_t smem_v7(int M, int K) {
    if ((int64_t)M * (K + GEMV_MMA_PAD) * 2 > GEMV_MMA_X_BUDGET) return SIZE_MAX;
    return ((size_t)gemv_mma_x_rows(M) * (K + GEMV_MMA_PAD) * 2 + 127) / 128 * 128 +
           (size_t)GEMV_MMA_WARPS * R * 16 * 8 * 4 + (size_t)S * v7_slot_bytes<R, U>() + 2 * S * sizeof(uint64_t);
}

template <int R, int U, int S>
static void launch_v7(gpu_case &g, int i, int M) {
    const size_t smem = smem_v7<R, U, S>(M, g.K);
    auto kernel = g.fp8 ? v7_kernel<true, R, U, S> : v7_kernel<false, R, U, S>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, V7_THREADS, smem));
    const int tiles = (g.N + 8 * R - 1) / (8 * R);
    const int most = std::max(per_sm, 1) * n_sm, per_block = (tiles + most - 1) / most;
    kernel<<<(tiles + per_block - 1) / per_block, V7_THREADS, smem, stream>>>(g.y, g.x, bench_weight_ref(g, i), M, g.N,
                                                                              g.K, per_block);
}

static void launch_cublas(gpu_case &g, int i, int M) {
    const float one = 1.0f, zero = 0.0f;
    cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, g.N, M, g.K, &one, g.w[i], CUDA_R_16BF, g.K, g.x, CUDA_R_16BF, g.K,
                 &zero, g.y, CUDA_R_32F, g.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

struct version {
    const char *name;
    launch_fn fn;
    bool fp8_ok, bf16_ok;
    size_t (*smem)(int M, int K);   /* shared memory a launch needs (NULL: none to speak of) */
};

static size_t smem_v2(int M, int K) { return (size_t)M * K * 4; }
template <int R> static size_t smem_v4(int M, int K) { return gemv_mma_smem(M, R, gemv_mma_slab(M, K)); }
template <int R> static size_t smem_v5(int M, int K) {   /* x whole, or the version does not run */
    return (int64_t)M * (K + GEMV_MMA_PAD) * 2 <= GEMV_MMA_X_BUDGET ? gemv_mma_stream_smem(M, R, K) : SIZE_MAX;
}
template <int R, int U, int S> static size_t smem_v6(int M, int K) {
    const size_t v5 = smem_v5<R>(M, K);
    return v5 == SIZE_MAX ? SIZE_MAX : v5 + v6_ring_smem(true, R, U, S);
}

static const version VERSIONS[] = {
    {"1", launch_v1, true, true, nullptr},
    {"2 U4", launch_v2<1, 4>, true, true, smem_v2},
    {"3 R2 U4", launch_v2<2, 4>, true, true, smem_v2},
    {"4 R1 U8", launch_v4<1, 8>, true, true, smem_v4<1>},
    {"4 R2 U2", launch_v4<2, 2>, true, true, smem_v4<2>},
    {"4 R2 U4", launch_v4<2, 4>, true, true, smem_v4<2>},
    {"4 R4 U2", launch_v4<4, 2>, true, true, smem_v4<4>},
    {"4cvt R1 U8", launch_v4<1, 8, true>, true, false, smem_v4<1>},
    {"4cvt R2 U2", launch_v4<2, 2, true>, true, false, smem_v4<2>},
    {"5 R1 U8", launch_v5<1, 8>, true, true, smem_v5<1>},
    {"5 R2 U2", launch_v5<2, 2>, true, true, smem_v5<2>},
    {"5 R2 U4", launch_v5<2, 4>, true, true, smem_v5<2>},
    {"5 R4 U2", launch_v5<4, 2>, true, true, smem_v5<4>},
    {"6 R1 U8 S3", launch_v6<1, 8, 3>, true, true, smem_v6<1, 8, 3>},
    {"6 R2 U2 S4", launch_v6<2, 2, 4>, true, true, smem_v6<2, 2, 4>},
    {"6 R2 U2 S6", launch_v6<2, 2, 6>, true, true, smem_v6<2, 2, 6>},
    {"6 R2 U1 S8", launch_v6<2, 1, 8>, true, true, smem_v6<2, 1, 8>},
    {"6 R4 U2 S3", launch_v6<4, 2, 3>, true, true, smem_v6<4, 2, 3>},
    {"7 R2 U2 S4", launch_v7<2, 2, 4>, true, true, smem_v7<2, 2, 4>},
    {"7 R2 U2 S8", launch_v7<2, 2, 8>, true, true, smem_v7<2, 2, 8>},
    {"7 R1 U4 S6", launch_v7<1, 4, 6>, true, true, smem_v7<1, 4, 6>},
    {"cublas", launch_cublas, false, true, nullptr},
};

/* Median time of one launch inside a graph of `reps` launches over rotating weight copies, microseconds. */
static float time_graph(gpu_case &g, launch_fn fn, int M, int reps) {
    return bench_graph_us(stream, reps, 8, [&] {
        for (int r = 0; r < reps; r++) fn(g, r % g.copies, M);
    });
}

int main(int argc, char **argv) {
    bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return fprintf(stderr, "cublasCreate failed\n"), 1;
    cublasSetStream(cublas, stream);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    n_sm = prop.multiProcessorCount;
    int smem_optin = prop.sharedMemPerBlockOptin;

    /* the card's read bandwidth */
    size_t big = (size_t)1 << 30;
    uint4 *buf;
    unsigned *sink;
    CK(cudaMalloc(&buf, big));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(buf, 1, big));
    std::vector<float> bw_t;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 6; i++) {
        CK(cudaEventRecord(a, stream));
        read_sum<<<n_sm * 8, 512, 0, stream>>>(buf, big / 16, sink);
        CK(cudaEventRecord(b, stream));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i) bw_t.push_back(ms);
    }
    CK(cudaFree(buf));
    double read_bw = big / (bench_median(bw_t) * 1e-3);   /* bytes / s */
    printf("# %s, %d SMs, shared memory opt-in %d KiB; streaming read of 1 GiB: %.0f GB/s\n", prop.name, n_sm,
           smem_optin / 1024, read_bw / 1e9);
    printf("%-16s %-5s %5s %5s %2s %-10s %9s %9s %8s %6s %9s %s\n", "shape", "dtype", "N", "K", "M", "version", "time_us",
           "floor_us", "GB/s", "ratio", "max_err", "bits");

    srand(1234);
    const int Ms[] = {1, 2, 4, 8, 16};
    int failures = 0;
    for (const shape &sh : SHAPES) {
        gpu_case g{};
        g.N = sh.N, g.K = sh.K, g.fp8 = sh.fp8;
        g.w_bytes = (size_t)sh.N * sh.K * (sh.fp8 ? 1 : 2);
        int sk = (sh.K + 127) / 128, sn = (sh.N + 127) / 128;
        g.s_bytes = sh.fp8 ? (size_t)sn * sk * 4 : 0;
        g.copies = (int)std::min<size_t>(64, std::max<size_t>(2, ((size_t)400 << 20) / g.w_bytes + 1));
        /* host data: FP8 codes without the NaN codes, BF16 weights ~ N(0, 0.02), x ~ N(0, 1) */
        std::vector<uint8_t> w(g.w_bytes);
        std::vector<float> scale((size_t)sn * sk);
        std::vector<uint16_t> x((size_t)16 * sh.K);
        auto gauss = [] {
            double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
            return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
        };
        if (sh.fp8) {
            for (auto &c : w) {
                c = (uint8_t)(rand() & 0xff);
                if ((c & 0x7f) == 0x7f) c ^= 1;
            }
            for (auto &s : scale) s = 1e-3f * (1.0f + (rand() % 1000) / 1000.0f);
        } else {
            uint16_t *wb = (uint16_t *)w.data();
            for (size_t i = 0; i < g.w_bytes / 2; i++) wb[i] = float_to_bf16_host(0.02f * gauss());
        }
        for (auto &v : x) v = float_to_bf16_host(gauss());
        g.w.resize(g.copies), g.scale.resize(g.copies);
        for (int i = 0; i < g.copies; i++) {
            CK(cudaMalloc(&g.w[i], g.w_bytes));
            CK(cudaMemcpy(g.w[i], w.data(), g.w_bytes, cudaMemcpyHostToDevice));
            if (sh.fp8) {
                CK(cudaMalloc(&g.scale[i], g.s_bytes));
                CK(cudaMemcpy(g.scale[i], scale.data(), g.s_bytes, cudaMemcpyHostToDevice));
            }
        }
        CK(cudaMalloc(&g.x, x.size() * 2));
        CK(cudaMemcpy(g.x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&g.y, (size_t)16 * sh.N * 4));
        std::vector<double> ref, mag;
        cpu_reference(ref, mag, x, w, scale, sh.fp8, 16, sh.N, sh.K);

        std::vector<std::vector<float>> row0(sizeof VERSIONS / sizeof VERSIONS[0]);   /* per version, from M = 1 */
        for (int M : Ms) {
            if (quick && M != 1 && M != 4 && M != 16) continue;
            for (const version &v : VERSIONS) {
                if ((sh.fp8 && !v.fp8_ok) || (!sh.fp8 && !v.bf16_ok)) continue;
                if (v.smem && v.smem(M, sh.K) > (size_t)smem_optin) continue;
                CK(cudaMemsetAsync(g.y, 0xff, (size_t)16 * sh.N * 4, stream));
                v.fn(g, 0, M);
                CK(cudaGetLastError());
                CK(cudaStreamSynchronize(stream));
                std::vector<float> y((size_t)M * sh.N);
                CK(cudaMemcpy(y.data(), g.y, y.size() * 4, cudaMemcpyDeviceToHost));
                double max_err = 0;
                for (size_t i = 0; i < y.size(); i++) {
                    double e = fabs(y[i] - ref[i]) / (mag[i] + 1e-30);
                    if (!(e <= max_err)) max_err = std::isnan(e) ? INFINITY : std::max(max_err, e);
                }
                /* row 0 of this M against row 0 of M = 1: the same bits whatever the batch (batch invariance) */
                const char *bits = "-";
                size_t vi = &v - VERSIONS;
                const size_t v4 = 4;   /* "4 R2 U2": versions 5, 6 and 7 must give its bits */
                if (M == 1) row0[vi].assign(y.begin(), y.begin() + sh.N);
                if (M == 1 && strchr("567", v.name[0]) && row0[v4].size() == (size_t)sh.N)
                    bits = memcmp(row0[v4].data(), y.data(), sh.N * 4) ? "DIFFER-v4" : "same-v4";
                else if (M != 1 && row0[vi].size() == (size_t)sh.N)
                    bits = memcmp(row0[vi].data(), y.data(), sh.N * 4) ? "DIFFER" : "same";
                float t = time_graph(g, v.fn, M, 20);
                double bytes = g.w_bytes + g.s_bytes + (double)M * sh.K * 2 + (double)M * sh.N * 4;
                double floor_us = bytes / read_bw * 1e6;
                bool bad = max_err > 1e-5 || !strncmp(bits, "DIFFER", 6);
                failures += bad;
                printf("%-16s %-5s %5d %5d %2d %-10s %9.2f %9.2f %8.0f %6.2f %9.1e %s%s\n", sh.name,
                       sh.fp8 ? "fp8" : "bf16", sh.N, sh.K, M, v.name, t, floor_us, bytes / (t * 1e-6) / 1e9,
                       floor_us / t, max_err, bits, bad ? "  FAIL" : "");
                fflush(stdout);
            }
        }
        for (int i = 0; i < g.copies; i++) {
            CK(cudaFree(g.w[i]));
            if (sh.fp8) CK(cudaFree(g.scale[i]));
        }
        CK(cudaFree(g.x));
        CK(cudaFree(g.y));
    }
    printf("# %d failed\n", failures);
    return failures != 0;
}
